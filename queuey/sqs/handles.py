"""SQS receipt handles: a work-queue receipt and when it was received.

``<receipt>.<received>``: the work-queue receipt (:func:`queuey.model.make_receipt`)
that names the lease, and the second (epoch) of the receive that gave it, from
which SQS counts a message's 12 hours of visibility. A handle without the
suffix (a natively received receipt) is taken as it is, with no receive time.
"""

from __future__ import annotations

from queuey.sqs.errors import SQSError

#: SQS's longest visibility: 12 hours from the receive.
MAX_VISIBILITY = 43200
_SEPARATOR = "."


def make(receipt: str, received: int) -> str:
    return f"{receipt}{_SEPARATOR}{received}"


def read(handle: str) -> tuple[str, int | None]:
    """The receipt a handle carries, and its receive second when it has one."""
    receipt, separator, received = handle.rpartition(_SEPARATOR)
    if separator and received.isascii() and received.isdigit() and len(received) <= 12:
        return receipt, int(received)
    return handle, None


def invalid(handle: str) -> SQSError:
    return SQSError(
        "ReceiptHandleIsInvalid",
        f'The input receipt handle "{handle[:1024]}" is not a valid receipt handle.',
    )

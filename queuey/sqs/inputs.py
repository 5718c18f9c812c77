"""Reading an SQS action's parameters: numbers, tokens, name lists, receipt
handles and batch entries, each refused with SQS's own error."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

from queuey.sqs import handles
from queuey.sqs import queues as qs
from queuey.sqs.api import ACTIONS
from queuey.sqs.errors import SQSError, invalid, missing

#: Most entries in one batch action (SQS's limit).
MAX_BATCH = 10
_BATCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
#: MessageGroupId and MessageDeduplicationId: 1-128 of alphanumerics and punctuation.
_TOKEN = re.compile(r"^[!-~]{1,128}$")


def integer(
    params: Mapping, name: str, low: int, high: int, reason: str | None = None
) -> int | None:
    """An integer parameter in ``low``..``high``; refused with SQS's ``reason``
    (by default its "Must be between <low> and <high>, if provided.")."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        reason = reason or f"Must be between {low} and {high}, if provided."
        raise invalid(f"Value {str(value)[:40]} for parameter {name} is invalid. Reason: {reason}")
    return value


def text_token(params: Mapping, name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise invalid(
            f"Value {str(value)[:200]} for parameter {name} is invalid. Reason: {name} can "
            "only include alphanumeric and punctuation characters. 1 to 128 in length."
        )
    return value


def names(params: Mapping, name: str) -> list[str]:
    return params.get(name) or []


def receipt(params: Mapping) -> str:
    receipt = params.get("ReceiptHandle")
    if receipt is None:
        raise missing("ReceiptHandle")
    if not isinstance(receipt, str) or not receipt:
        raise handles.invalid(str(receipt))
    return receipt


def entries(params: Mapping, action: str) -> list[dict]:
    """The entries of the batch action ``action``, checked as SQS does."""
    entries = params.get("Entries")
    if entries is None or entries == []:
        entry_type = ACTIONS[action].input.members["Entries"].shape.item
        raise SQSError(
            "EmptyBatchRequest", f"There should be at least one {entry_type} in the request."
        )
    if len(entries) > MAX_BATCH:
        raise SQSError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _BATCH_ID.match(entry_id):
            raise SQSError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SQSError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


def make_token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii")


def read_token(token: object) -> str | None:
    if token is None:
        return None
    try:
        name = base64.urlsafe_b64decode(str(token).encode("ascii")).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeError):
        raise invalid("Invalid NextToken value.") from None
    if not qs.stored_name(name):
        raise invalid("Invalid NextToken value.")
    return name

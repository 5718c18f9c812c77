"""Work queues on SQLite: reserve, ack, release, extend and reopen.

Every call is one job of a write transaction (``BEGIN IMMEDIATE``, through
:class:`~.group_commit.GroupCommit`: calls waiting at the same time share
one commit), so it holds the file's write lock from its first statement:
two reservations, in this process or another sharing the file, never see
the same message available, and a lease is exact to the microsecond of the
caller's clock.

A subscription keeps, per partition and priority, the newest message it has
handed out (``positions``), and a ``leases`` row per message it delivered:

========== =================================================================
state      meaning
========== =================================================================
leased     delivered with ``token``; available again once ``visible_at`` passed
released   released (token cleared); available again at ``visible_at``
claimed    claimed for dead-lettering with ``token`` until ``visible_at``
acked      finished by an ack (``token`` kept, so a repeated ack answers acked)
dead       finished as dead-lettered (the claim was acked)
========== =================================================================

:class:`SqliteWorkQueue` hands each call to the group commit; each path is its own
module: the reservation (:mod:`.reservation`), what a receipt's holder does
(:mod:`.receipts`), dead letters and reopen (:mod:`.deadletters`), on the
lease vocabulary they share (:mod:`.leases`); statistics are :mod:`.stats`.
"""

from __future__ import annotations

from collections.abc import Sequence

from queuey.model import (
    DeadLetter,
    Delivery,
    MessageRef,
    QueueMeta,
    ReceiptStatus,
    Reserved,
    make_receipt,
)
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.sqlite import deadletters, receipts, reservation
from queuey.storage.sqlite.group_commit import GroupCommit
from queuey.storage.sqlite.schema import row_to_message


class SqliteWorkQueue:
    """The work-queue half of :class:`~queuey.storage.sqlite.SQLiteStorage`:
    each call one job of the group commit, around its path."""

    def __init__(self, commits: GroupCommit) -> None:
        self.commits = commits

    def reserve(self, queue: QueueMeta, subscription: str, ask: ReserveAsk) -> Reserved:
        """Lease messages and claim due dead letters (see :meth:`Storage.reserve`)."""
        leased, letters = self.commits.run(
            lambda txn: reservation.reserve(txn, queue, subscription, ask)
        )
        # Messages and receipts are made once the write lock is released.
        deliveries = []
        for row, attempts, token, first in leased:
            message = row_to_message(row)
            receipt = make_receipt(message.partition, message.id, token)
            deliveries.append(Delivery(message, attempts, receipt, first))
        return Reserved(deliveries, letters)

    def ack(
        self, queue: QueueMeta, subscription: str, given: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        """Finish leases and dead-letter claims (see :meth:`Storage.ack`);
        receipts are parsed before the write lock is taken."""
        answer, parsed = receipts.parse(queue, subscription, given)
        if not parsed:
            return answer
        self.commits.run(lambda txn: receipts.ack(txn.conn, parsed, answer))
        return answer

    def release(
        self, queue: QueueMeta, subscription: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        """End leases now (see :meth:`Storage.release`)."""
        return self.commits.run(lambda txn: receipts.release(txn.conn, queue, subscription, ask))

    def extend(
        self, queue: QueueMeta, subscription: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        """Move current leases' ends (see :meth:`Storage.extend`)."""
        return self.commits.run(lambda txn: receipts.extend(txn.conn, queue, subscription, ask))

    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        """Make finished live messages available again with 0 attempts."""
        return self.commits.run(
            lambda txn: deadletters.reopen(txn.conn, queue, subscription, refs, now)
        )

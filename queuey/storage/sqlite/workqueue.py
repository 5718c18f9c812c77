"""Work queues on SQLite: reserve, ack, release, extend and reopen.

Every call is one short write transaction (``BEGIN IMMEDIATE``, through
:meth:`Database.write`), so it holds the file's write lock from its first
statement: two reservations, in this process or another sharing the file,
never see the same message available, and a lease is exact to the
microsecond of the caller's clock.

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

:class:`SqliteWorkQueue` holds the transactions; each path is its own
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
from queuey.storage.sqlite.database import Database


class SqliteWorkQueue:
    """The work-queue half of :class:`~queuey.storage.sqlite.SQLiteStorage`:
    each call one write transaction around its path."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def reserve(self, queue: QueueMeta, subscription: str, ask: ReserveAsk) -> Reserved:
        """Lease messages and claim due dead letters (see :meth:`Storage.reserve`)."""
        with self.db.write() as conn:
            leased, letters = reservation.reserve(conn, queue, subscription, ask)
        # Receipts are made once the write lock is released.
        deliveries = [
            Delivery(message, attempts, make_receipt(message.partition, message.id, token), first)
            for message, attempts, token, first in leased
        ]
        return Reserved(deliveries, letters)

    def ack(
        self, queue: QueueMeta, subscription: str, given: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        """Finish leases and dead-letter claims (see :meth:`Storage.ack`);
        receipts are parsed before the write lock is taken."""
        answer, parsed = receipts.parse(queue, subscription, given)
        if not parsed:
            return answer
        with self.db.write() as conn:
            receipts.ack(conn, parsed, answer)
        return answer

    def release(
        self, queue: QueueMeta, subscription: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        """End leases now (see :meth:`Storage.release`)."""
        with self.db.write() as conn:
            return receipts.release(conn, queue, subscription, ask)

    def extend(
        self, queue: QueueMeta, subscription: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        """Move current leases' ends (see :meth:`Storage.extend`)."""
        with self.db.write() as conn:
            return receipts.extend(conn, queue, subscription, ask)

    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        """Make finished live messages available again with 0 attempts."""
        with self.db.write() as conn:
            return deadletters.reopen(conn, queue, subscription, refs, now)

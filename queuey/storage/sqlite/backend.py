"""The SQLite backend: :class:`SQLiteStorage` (``load_from_config`` is in :mod:`.config`).

The storage interface over one file, and the expiry sweep; queue metadata
goes through :mod:`.queues`, writes of messages through :mod:`.group_commit`,
reads and deletes through :mod:`.messages`, work queues through
:mod:`queuey.storage.sqlite.workqueue` and :mod:`.stats`, consumers' checkpoints through
:mod:`.checkpoints`, connections through :mod:`.database`, and the sweep runs
in the background (:mod:`.sweeper`), never on a request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from queuey import ids
from queuey.clock import Clock
from queuey.errors import StorageUnavailable
from queuey.model import (
    DeadLetter,
    Message,
    MessageRef,
    MessageState,
    NewMessage,
    QueueMeta,
    QueueStats,
    ReadQuery,
    ReceiptStatus,
    Reserved,
)
from queuey.storage import Storage
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.sqlite.batches import BatchDeleter, batch_delete
from queuey.storage.sqlite.checkpoints import SqliteCheckpoints
from queuey.storage.sqlite.database import Database, SharedCounter
from queuey.storage.sqlite.group_commit import GroupCommit, MessageWriter
from queuey.storage.sqlite.leases import in_flight as count_in_flight
from queuey.storage.sqlite.leases import message_state as read_message_state
from queuey.storage.sqlite.messages import delete_by_refs, fence, get_by_refs, read_snapshot
from queuey.storage.sqlite.queues import SqliteQueues
from queuey.storage.sqlite.schedules import SqliteSchedules
from queuey.storage.sqlite.schema import migrate
from queuey.storage.sqlite.stats import queue_stats, subscription_names
from queuey.storage.sqlite.sweeper import Sweeper
from queuey.storage.sqlite.workqueue import SqliteWorkQueue

log = logging.getLogger(__name__)

#: Largest TTL whose expiry (microseconds since the epoch) still fits SQLite's
#: 64-bit INTEGER for every timestamp an id can carry.
MAX_TTL = (2**63 - 1 - ids.MAX_MICROS) // ids.MICROS
#: Expired rows deleted per transaction: the sweep releases the write lock
#: between batches, so posts never wait long behind it.
SWEEP_BATCH = 5000
#: The sweep's deletions, in order: expired messages (the count it returns),
#: their leases, dedup ids past their window.
SWEEPS = (
    batch_delete("messages", "expires <= ?"),
    batch_delete("leases", "expires <= ?"),
    batch_delete("dedup", "until <= ?"),
)


class SQLiteStorage(SqliteQueues, SqliteCheckpoints, SqliteSchedules, Storage):
    """Queues, messages, subscriptions and checkpoints in one SQLite file.

    Expired rows (messages, their leases, dedup ids past the window) are
    deleted by a background thread every ``sweep_interval`` seconds (0 turns
    it off), started on the first write and stopped by :meth:`close`; which
    rows have expired is decided by ``clock``.

    Reads and delayed messages: ordinary ids are minted under the write lock
    above the file's ``last_ts``, so every committed message at or below
    ``last_ts`` (as a read snapshot sees it) is final. A delayed message's id
    sits above ``last_ts`` until ordinary posts pass it, and a write still in
    flight may yet commit an id below it; a stream read that would return such
    a message first takes a *fence* (a write transaction raising ``last_ts``
    to the reader's ``now``, which waits for any write in flight, in any
    process) and reads again, so no reader passes a message committed later.
    Fences happen only while a due delayed message is above ``last_ts``, that
    is until the next post or fence.

    Queues, checkpoints and schedules are mixed in
    (:mod:`queuey.storage.sqlite.queues`, :mod:`queuey.storage.sqlite.checkpoints`,
    :mod:`queuey.storage.sqlite.schedules`). Purge and delete never hold the
    write lock for a whole queue: one short transaction switches the queue to
    a new incarnation (or removes it) and records the old incarnation in
    ``retired``, so its rows are unreachable at once; the request then removes
    them in batches, one transaction each, letting waiting writers in between
    (:mod:`.batches`). If that is cut short (a crash, the store closing, a
    busy lock), the next sweep finishes it.
    """

    write_timeout_seconds = 0.0
    max_ttl = MAX_TTL

    def __init__(
        self,
        path: str | Path,
        clock: Clock,
        busy_timeout: float = 10.0,
        sweep_interval: float = 60.0,
        dedup_window: int = 300,
    ) -> None:
        self.path = str(path)
        self.clock = clock
        self.busy_timeout = busy_timeout
        self.sweep_interval = sweep_interval
        self.dedup_window = dedup_window
        self._db = Database(self.path, busy_timeout)
        self._metadata_changes: SharedCounter | None = None
        self._commits = GroupCommit(self._db)
        self._posts = MessageWriter(self._commits, clock, dedup_window)
        self._work = SqliteWorkQueue(self._commits)
        # A lambda, not the bound method: the sweep is looked up at each run.
        self._sweeper = Sweeper(
            lambda: self.sweep_expired(), sweep_interval, f"queuey-sqlite-sweeper {self.path}"
        )
        self._batches = BatchDeleter(self._db, lambda: self._sweeper.stopping)
        with self._db.write() as conn:
            migrate(conn)

    # -- queues (the rest in :mod:`.queues`) ------------------------------------------
    def delete_queue(self, application: str, name: str) -> None:
        """Remove the queue at once; its rows go afterwards, in batches (see the class)."""
        self._reclaim_after_change(self._remove_queue(application, name))

    def purge_queue(self, application: str, name: str) -> QueueMeta:
        """Switch the queue to a new incarnation at once; the old one's rows go
        afterwards, in batches (see the class)."""
        fresh, retired = self._switch_incarnation(application, name)
        self._reclaim_after_change(retired)
        return fresh

    def _reclaim_after_change(self, incarnation: str) -> None:
        """Tell every process's metadata cache, then remove the old incarnation's rows.

        The cache hears first: a process still holding the old incarnation
        would otherwise read a half-removed queue, or post into it, for as
        long as the removal takes. A removal cut short is left to the sweep
        (the purge or delete itself has happened).
        """
        counter = self.metadata_changes()
        if counter is not None:
            counter.bump()
        try:
            self._batches.reclaim(incarnation)
        except StorageUnavailable as exc:
            log.warning("sqlite: rows of incarnation %s left to the sweep: %s", incarnation, exc)

    # -- messages -----------------------------------------------------------------
    def put_messages(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages; concurrent callers share one commit (see :mod:`.group_commit`)."""
        self._sweeper.start()
        return self._posts.put(queue, messages)

    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        """One snapshot; read again behind a fence when it returned a message
        above its ``last_ts`` (see the class)."""
        found, last = read_snapshot(self._db, queue, query)
        if any(m.timestamp > last for m in found):
            self._fence(query.now_micros)
            found, _ = read_snapshot(self._db, queue, query)
        return found

    def _fence(self, now_micros: int) -> None:
        fence(self._db, now_micros)

    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        return get_by_refs(self._db, queue, refs, now_micros)

    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        delete_by_refs(self._db, queue, refs)

    def sweep_expired(self) -> int:
        """Delete every message expired by now (``clock``); returns how many went.

        The leases of expired messages and dedup ids past their window go too
        (not counted), and so do the rows of purged or deleted queues that
        their purge or delete left behind. Works in batches of
        :data:`SWEEP_BATCH`, one transaction each, and ends early once the
        storage is closing.
        """
        for incarnation in self._batches.retired():
            if not self._sweeper.stopping:
                self._batches.reclaim(incarnation)
        now = self.clock.now_micros()
        removed = [self._batches.run(sweep, (now,), SWEEP_BATCH) for sweep in SWEEPS]
        return removed[0]

    # -- work queues --------------------------------------------------------------
    def reserve_ask(self, queue: QueueMeta, subscription: str, ask: ReserveAsk) -> Reserved:
        """``settled_micros`` is not needed on SQLite (:mod:`.reservation` says
        why) and ``max_in_flight`` is exact (checked inside the write
        transaction)."""
        return self._work.reserve(queue, subscription, ask)

    def in_flight(self, queue: QueueMeta, subscription: str, now_micros: int) -> int:
        """Exact, as the stats count it, from one indexed count on a read
        connection (:func:`.leases.in_flight`)."""
        return self._db.read(lambda conn: count_in_flight(conn, queue, subscription, now_micros))

    def ack(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str], now_micros: int
    ) -> dict[str, ReceiptStatus]:
        return self._work.ack(queue, subscription, receipts, now_micros)

    def release_ask(
        self, queue: QueueMeta, subscription: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        return self._work.release(queue, subscription, ask)

    def extend_ask(
        self, queue: QueueMeta, subscription: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        return self._work.extend(queue, subscription, ask)

    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now_micros: int
    ) -> int:
        return self._work.reopen(queue, subscription, refs, now_micros)

    def message_state(
        self, queue: QueueMeta, subscription: str, message: Message, now_micros: int
    ) -> MessageState:
        return self._db.read(lambda conn: read_message_state(conn, queue, subscription, message))

    def stats(self, queue: QueueMeta, now_micros: int) -> QueueStats:
        """Exact counts from one read snapshot (:mod:`.stats`)."""
        return self._db.read(lambda conn: queue_stats(conn, queue, now_micros), snapshot=True)

    # -- operations ---------------------------------------------------------------
    def ping(self) -> None:
        self._db.read(lambda conn: conn.execute("SELECT 1").fetchone())

    def metadata_changes(self) -> SharedCounter | None:
        """A counter in shared memory beside the file (``<file>-queues.version``),
        so server processes sharing the file drop cached metadata at once."""
        if self.path == ":memory:":
            return None
        if self._metadata_changes is None:
            self._metadata_changes = SharedCounter(self.path, "queues.version")
        return self._metadata_changes

    def subscriptions(self, queue: QueueMeta) -> list[str]:
        """From the subscriptions table (one indexed read)."""
        return self._db.read(lambda conn: subscription_names(conn, queue))

    def flow_state_path(self) -> str | None:
        """``<file>.limits`` beside the database, which every process sharing
        the file can reach; ``None`` for an in-memory database."""
        if self.path in ("", ":memory:"):
            return None
        return f"{self.path}.limits"

    def close(self) -> None:
        self._sweeper.stop()
        self._db.close()
        if self._metadata_changes is not None:
            self._metadata_changes.close()
            self._metadata_changes = None

"""The producer's durable spool: a message is the producer's until the queue acknowledges it.

``Spool.post`` appends the message to a local file (:mod:`queuey.client.spoolfile`)
and returns once the record is fsynced; a sender thread forwards spooled
messages with ``POST /queue/{name}/batch`` and marks those the service stored,
so nothing is lost when the service is down longer than the client's retries,
or when the producer dies. Guarantees, settings and figures: docs/producers.rst.

* **Group commit.** Posts from many threads write their records under one lock
  and then wait for an fsync that covers them: one thread syncs while the
  others queue behind it, so one fsync makes a whole group durable.
* **Stored once.** Every record carries ``dedup_id = <spool id>-<sequence>``,
  minted when it is spooled and resent unchanged, so a batch whose answer was
  lost (or that a killed producer sent) is stored once when sent again within
  the service's ``queuey.dedup_window``.
* **Order.** One batch is in flight at a time and a queue's batch always starts
  at its oldest unacknowledged record: a later record is never sent before an
  earlier one of the same queue is acknowledged.
* **Bounded.** ``max_bytes`` bounds the unacknowledged records; a post that
  would pass it raises :class:`SpoolFull`. Acknowledged records are dropped by
  compaction: the live records are copied to a new file, fsynced, and renamed
  over the old one, once the dead bytes outweigh the live ones.
* **Refused for good.** A message the service refuses with 400, 404 or 413 is
  appended to ``<file>.rejected`` (JSON lines, fsynced), handed to
  ``on_reject`` if given, marked, and counted; most bad input already fails
  :meth:`Spool.post` (:func:`~queuey.client.spoolentry.entry_json`).
* **Its own files.** Every file the spool creates is mode ``0600`` and none
  is opened through a symbolic link (:mod:`queuey.client.spooldisk`); a
  file with a malformed record raises
  :class:`~queuey.client.spoolfile.BadSpoolFile` when opened.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queuey.client import spooldisk, spoolfile
from queuey.client.errors import ClientError
from queuey.client.spoolentry import entry_json
from queuey.client.spoolsend import Rejected, Sender
from queuey.clock import SYSTEM_CLOCK, Clock
from queuey.tracing import context_attributes, with_context

log = logging.getLogger(__name__)

#: Most unacknowledged bytes by default.
DEFAULT_MAX_BYTES = 64 * 2**20
#: Dead bytes always tolerated before a compaction.
COMPACT_MIN = 4 * 2**20


class SpoolFull(ClientError):
    """The spool holds ``max_bytes`` of unacknowledged messages: the message was
    not spooled. Nothing was dropped; post again once the sender has caught up."""


class SpoolLocked(ClientError):
    """Another open :class:`Spool` (this process or another) owns the file."""


@dataclass(frozen=True)
class SpoolStats:
    """A spool's figures (``queuey spool status`` reads them from the file).
    ``spooled``/``bytes``: unacknowledged messages and their record bytes;
    ``oldest_age``: seconds since the oldest was spooled (None when empty);
    ``send_rate``: acks per second over the last ``window`` seconds; ``sent``,
    ``rejected``, ``torn``: totals over the file's life; ``tail_bytes``: an
    incomplete last record; ``last_error``: why an open spool's sender waits."""

    path: str
    spool_id: str
    spooled: int
    bytes: int
    file_bytes: int
    oldest_age: float | None
    send_rate: float
    sent: int
    rejected: int
    torn: int
    tail_bytes: int = 0
    last_error: str | None = None


class Spool:
    """A durable spool on ``path`` in front of ``client`` (see the module doc).

    ``max_bytes``: bound of unacknowledged record bytes; ``batch_messages`` /
    ``batch_bytes``: most entries / record bytes per batch (keep them at or under
    the service's ``queuey.max_batch_messages`` / ``queuey.max_batch_size``);
    ``linger``: seconds the sender waits for a batch to fill before sending a
    smaller one; ``backoff`` / ``max_backoff``: waits after a failed send (full
    jitter, doubling, capped); ``max_message_size``: the service's
    ``queuey.max_message_size``, checked at post time; ``on_reject``: called
    with a :class:`Rejected` for each message refused for good; ``clock``: the
    time records are stamped with; ``pause``: how the sender waits (tests);
    ``start``: start the sender now (else call :meth:`start`).

    Opening raises :class:`SpoolLocked` (the file is in use),
    :class:`~queuey.client.spoolfile.BadSpoolFile` (a malformed record: the
    spool refuses to start rather than drop it) or ``OSError`` (a symbolic
    link in place of the file or of a sidecar, refused).
    """

    def __init__(
        self,
        client: Any,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        batch_messages: int = 1000,
        batch_bytes: int = 2 * 2**20,
        linger: float = 0.05,
        backoff: float = 0.1,
        max_backoff: float = 30.0,
        max_message_size: int = 2**20,
        on_reject: Callable[[Rejected], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        pause: Callable[[float], None] | None = None,
        start: bool = True,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self.clock = clock
        self._cond = threading.Condition()
        self._syncing = False
        self._closed = False
        spooldisk.guard(*(spooldisk.sidecar(self.path, s) for s in spooldisk.SIDECARS))
        self._lock_fd = _lock(self.path)
        with spooldisk.closed_on_error(self._lock_fd):
            self._open()
        self.sender = Sender(
            self,
            client,
            batch_messages=batch_messages,
            batch_bytes=batch_bytes,
            linger=linger,
            backoff=backoff,
            max_backoff=max_backoff,
            on_reject=on_reject,
            pause=pause,
        )
        if start:
            self.start()

    # ------------------------------------------------------------ opening

    def _open(self) -> None:
        """Open (or create) the file and read it back; a malformed record
        raises :class:`~queuey.client.spoolfile.BadSpoolFile` and changes
        nothing."""
        try:
            self._fd = spooldisk.open_file(self.path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            self._fd = spoolfile.create(self.path, uuid.uuid4().hex[:16])
        with spooldisk.closed_on_error(self._fd):
            image = spoolfile.scan_fd(self._fd, str(self.path))
            if image.torn_bytes:
                self._drop_tail(image)
        self.spool_id = image.spool_id
        self._next_seq = image.next_seq
        self._durable_seq = image.next_seq - 1
        self._pending: dict[int, spoolfile.Pending] = dict(image.pending)
        self._queues: dict[str, deque[spoolfile.Pending]] = {}
        for p in self._pending.values():
            self._queues.setdefault(p.queue, deque()).append(p)
        self._size = image.end + (len(spoolfile.torn_record(0)) if image.torn_bytes else 0)
        self._live = image.live_bytes
        self._dead = image.dead_bytes
        self.sent, self.rejected, self.torn = image.sent, image.rejected, image.torn
        if image.torn_bytes:
            self.torn += 1
        self.replayed = len(self._pending)

    def _drop_tail(self, image: spoolfile.SpoolImage) -> None:
        """Keep the torn tail's bytes in ``<file>.torn``, cut it off, and note it."""
        tail = os.pread(self._fd, image.torn_bytes, image.end)
        spooldisk.append_durably(spooldisk.sidecar(self.path, ".torn"), tail)
        os.ftruncate(self._fd, image.end)
        os.write(self._fd, spoolfile.torn_record(self._now()))
        os.fsync(self._fd)
        log.warning("spool %s: dropped a torn last record (%d bytes)", self.path, len(tail))

    # ------------------------------------------------------------ posting

    def post(
        self,
        queue: str,
        body: Mapping[str, Any],
        *,
        partition: int | None = None,
        partition_key: str | None = None,
        ttl: int | None = None,
        delay: int | None = None,
        priority: int | None = None,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
    ) -> str:
        """Spool one message; returns its ``dedup_id`` once the record is on disk.

        Raises ``ValueError`` for a message the service would refuse (checked
        here: queue name, JSON object, size, fields), :class:`SpoolFull` when
        the spool is full, ``OSError`` when the disk refuses the write.
        """
        text = entry_json(
            queue,
            body,
            self.max_message_size,
            partition=partition,
            partition_key=partition_key,
            ttl=ttl,
            delay=delay,
            priority=priority,
            # Sent later, from another thread: the context is recorded now.
            attributes=with_context(attributes, context_attributes()),
            dedup_id=dedup_id,
        )
        with self._cond:
            if self._closed:
                raise ClientError("the spool is closed")
            seq = self._next_seq
            did = dedup_id or f"{self.spool_id}-{seq}"
            data = f'{{"q":"{queue}","e":{{"dedup_id":{json.dumps(did)},{text[1:]}}}'
            payload = spoolfile.MESSAGE_HEAD.pack(seq, self._now()) + data.encode()
            record = spoolfile.frame(spoolfile.MESSAGE, payload)
            if self._live + len(record) > self.max_bytes:
                raise SpoolFull(
                    f"the spool {self.path} holds {self._live} bytes of unacknowledged "
                    f"messages; this one would pass max_bytes={self.max_bytes}",
                    error_msg={"spool": "full"},
                )
            self._append(record)
            pending = spoolfile.Pending(seq, queue, self._now(), self._size, len(record))
            self._next_seq = seq + 1
            self._size += len(record)
            self._live += len(record)
            self._pending[seq] = pending
            self._queues.setdefault(queue, deque()).append(pending)
            self._wait_durable(seq)
        return did

    def _append(self, record: bytes) -> None:
        """Write under the lock; a failed write is cut off so no later record
        follows a partial one."""
        try:
            written = os.write(self._fd, record)
            if written != len(record):
                raise OSError(f"short write to {self.path}: {written} of {len(record)} bytes")
        except OSError:
            os.ftruncate(self._fd, self._size)
            raise

    def _wait_durable(self, seq: int) -> None:
        """Group commit (called holding the lock): the first waiter syncs for
        everyone written so far; the others wait for a sync that covers them."""
        while self._durable_seq < seq:
            if self._syncing:
                self._cond.wait()
                continue
            self._syncing = True
            target, fd = self._next_seq - 1, self._fd
            self._cond.release()
            try:
                os.fdatasync(fd)
            finally:
                self._cond.acquire()
                self._syncing = False
                self._cond.notify_all()
            self._durable_seq = max(self._durable_seq, target)
        self.sender.wake()

    # ------------------------------------------------ used by the sender

    def _now(self) -> float:
        return self.clock.now_micros() / 1e6

    def durable_heads(self) -> dict[str, deque[spoolfile.Pending]]:
        """(Under the lock) the queues with a durable record waiting."""
        return {q: d for q, d in self._queues.items() if d and d[0].seq <= self._durable_seq}

    def read_entries(self, records: list[spoolfile.Pending]) -> list[dict]:
        """(Under the lock: compaction moves records) the batch entries of ``records``."""
        if self._closed:
            raise ClientError("the spool is closed")
        entries = []
        for p in records:
            raw = os.pread(self._fd, p.size, p.offset)
            entries.append(spoolfile.decode_message(raw[spoolfile.FRAME.size :])[3])
        return entries

    def mark(self, kind: bytes, records: list[spoolfile.Pending]) -> None:
        """(Under the lock) drop ``records`` as acknowledged (``A``) or rejected
        (``R``). The mark is not fsynced: were it lost, the messages would be
        sent again with their ``dedup_id`` and stored once."""
        if not records or self._closed:
            return
        record = spoolfile.marks_record(kind, self._now(), [p.seq for p in records])
        self._append(record)
        self._size += len(record)
        self._dead += len(record)
        for p in records:
            del self._pending[p.seq]
            line = self._queues[p.queue]
            if line[0] is p:
                line.popleft()
            else:
                line.remove(p)
            if not line:
                del self._queues[p.queue]
            self._live -= p.size
            self._dead += p.size
        if kind == spoolfile.ACKED:
            self.sent += len(records)
        else:
            self.rejected += len(records)
        if self._dead > max(self._live, COMPACT_MIN):
            self._compact()
        self._cond.notify_all()

    def _compact(self) -> None:
        """(Under the lock) rewrite the file with the live records only."""
        while self._syncing:
            self._cond.wait()
        totals = {"sent": self.sent, "rejected": self.rejected, "torn": self.torn}
        header = spoolfile.header_record(self.spool_id, self._next_seq, totals)
        live = list(self._pending.values())
        started = time.monotonic()
        offsets, fd = spoolfile.rewrite(self.path, self._fd, header, live)
        os.close(self._fd)
        self._fd = fd
        for p in live:
            p.offset = offsets[p.seq]
        self._size = os.fstat(self._fd).st_size
        self._dead = len(header)
        self._durable_seq = self._next_seq - 1
        took = time.monotonic() - started
        log.info("spool %s compacted to %d bytes in %.3fs", self.path, self._size, took)

    # ------------------------------------------------------------ control

    def start(self) -> None:
        self.sender.start()

    def stats(self) -> SpoolStats:
        with self._cond:
            oldest = next(iter(self._pending.values()), None)
            return SpoolStats(
                path=str(self.path),
                spool_id=self.spool_id,
                spooled=len(self._pending),
                bytes=self._live,
                file_bytes=self._size,
                oldest_age=None if oldest is None else max(0.0, self._now() - oldest.spooled),
                send_rate=self.sender.rate(),
                sent=self.sent,
                rejected=self.rejected,
                torn=self.torn,
                last_error=self.sender.last_error,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every spooled message is acknowledged or rejected; False
        if ``timeout`` seconds passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float | None = 0.0) -> bool:
        """Stop the sender and close the file, after waiting up to ``timeout``
        seconds (None: as long as it takes) for the spool to empty. Whatever
        is left stays in the file for the next :class:`Spool` on it. True if
        the spool was empty."""
        empty = self.flush(timeout) if timeout != 0 else not self._pending
        self.sender.stop()
        with self._cond:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
                os.close(self._lock_fd)
        return empty

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _lock(path: Path) -> int:
    """An exclusive lock on ``<file>.lock`` for as long as the spool is open
    (a lock on the file itself would not survive the compaction's rename)."""
    fd = spooldisk.open_file(spooldisk.sidecar(path, ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SpoolLocked(f"{path} is in use by another spool") from None
    return fd

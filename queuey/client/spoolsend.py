"""The spool's sender: the thread that forwards spooled messages in batches.

It sends one batch at a time (``POST /queue/{name}/batch`` through the
:class:`~queuey.client.http.QueueyClient`), taking the queues with durable
records in turn; a queue's batch always starts at its oldest unacknowledged
record, so per-queue order is kept. What an answer means:

* ``201``: the batch's records are marked acknowledged.
* no answer, ``5xx``, ``401``, ``403``, ``408``, ``429``: the service (or its
  configuration) will come back; the sender waits (full jitter, doubling from
  ``backoff`` up to ``max_backoff``) and sends the same records again, with
  the same ``dedup_id`` s.
* ``400`` naming entries (``messages[3].partition``): those entries are
  rejected, the others go in the next batch. ``400`` or ``413`` for a batch
  without a named entry: the queue's batches are halved until the refused
  message is alone, and then it is rejected. ``404`` (no such queue): the
  batch is rejected.

A rejected message goes to ``<spool file>.rejected`` (one JSON line each,
fsynced before the mark; mode ``0600``, never through a symbolic link: a
refused file leaves the records in the spool and says so in ``last_error``)
and to the ``on_reject`` callback.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from queuey.client import spooldisk, spoolfile
from queuey.client.errors import ClientError
from queuey.client.models import OutgoingMessage
from queuey.client.retry import full_jitter

log = logging.getLogger(__name__)

#: Statuses that say "later", not "never": the sender keeps the records.
TRANSIENT = frozenset({401, 403, 408, 429})
ENTRY = re.compile(r"messages\[(\d+)\]")
#: Seconds of acknowledgements :meth:`Sender.rate` averages over.
RATE_WINDOW = 10.0


@dataclass(frozen=True)
class Rejected:
    """A message the service refused for good: its queue, its batch entry
    (``dedup_id`` included), the status and the service's ``error_msg``."""

    queue: str
    entry: dict
    status: int | None
    error_msg: dict[str, str]


def is_permanent(exc: ClientError) -> bool:
    status = exc.status
    return status is not None and 400 <= status < 500 and status not in TRANSIENT


@dataclass(eq=False)
class Sender:
    """One background thread per :class:`~queuey.client.spool.Spool` (see the
    module doc), with the spool's settings of the same names."""

    spool: Any
    client: Any
    _: KW_ONLY
    batch_messages: int
    batch_bytes: int
    linger: float
    backoff: float
    max_backoff: float
    on_reject: Callable[[Rejected], None] | None
    pause: Callable[[float], None] | None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._pause = self.pause or self._stop.wait
        self._thread: threading.Thread | None = None
        self._acks: deque[tuple[float, int]] = deque()
        self._limits: dict[str, int] = {}
        self._turn = 0
        self._lingered = False
        self.failures = 0  # consecutive failed sends
        self.last_error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="spool-sender", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop after the batch in flight (whose answer may take the client's timeout)."""
        self._stop.set()
        with self.spool._cond:
            self.spool._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wake(self) -> None:
        """(Under the spool's lock) new durable records are there."""
        self.spool._cond.notify_all()

    def rate(self) -> float:
        now = time.monotonic()
        while self._acks and now - self._acks[0][0] > RATE_WINDOW:
            self._acks.popleft()
        return round(sum(n for _, n in self._acks) / RATE_WINDOW, 1)

    # ------------------------------------------------------------- loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                job = self._next()
                if job is not None:
                    self._send(*job)
            except OSError as exc:  # the disk, or a refused file: the records stay
                log.error("spool %s: the sender failed: %s", self.spool.path, exc)
                self._failed(f"disk: {exc}")
            except Exception:  # a bug: log it, wait, go on
                log.exception("spool %s: the sender failed", self.spool.path)
                self._failed("internal error (see the log)")

    def _next(self) -> tuple[str, list[spoolfile.Pending], list[dict]] | None:
        """The next batch to send, or None after waiting for one to be ready."""
        cond = self.spool._cond
        with cond:
            if self._stop.is_set():
                return None
            heads = self.spool.durable_heads()
            if not heads:
                cond.wait(1.0)
                return None
            names = sorted(heads)
            batches = {q: self._take(q, heads[q]) for q in names}
            full = [q for q in names if batches[q][1]]
            if not full and not self._lingered and self.linger > 0:
                self._lingered = True
                cond.wait(self.linger)
                return None
            self._lingered = False
            ready = full or names
            queue = ready[self._turn % len(ready)]
            self._turn += 1
            records = batches[queue][0]
            return queue, records, self.spool.read_entries(records)

    def _take(self, queue: str, line: deque) -> tuple[list[spoolfile.Pending], bool]:
        """The durable records a batch of ``queue`` takes now, and whether it is full."""
        limit = self._limits.get(queue, self.batch_messages)
        durable = self.spool._durable_seq
        taken: list[spoolfile.Pending] = []
        size = 0
        for p in line:
            if p.seq > durable or len(taken) >= limit:
                break
            if taken and size + p.size > self.batch_bytes:
                return taken, True
            taken.append(p)
            size += p.size
        return taken, len(taken) >= limit

    def _send(self, queue: str, records: list[spoolfile.Pending], entries: list[dict]) -> None:
        try:
            self.client.post_batch(queue, [OutgoingMessage(**e) for e in entries])
        except ClientError as exc:
            if is_permanent(exc):
                self._refused(queue, records, entries, exc)
            else:
                self._failed(f"{exc.status or 'no answer'}: {exc}")
            return
        with self.spool._cond:
            self.spool.mark(spoolfile.ACKED, records)
            self._acks.append((time.monotonic(), len(records)))
            if queue in self._limits:
                self._limits[queue] = min(self.batch_messages, self._limits[queue] * 2)
            self.failures = 0
            self.last_error = None

    def _failed(self, reason: str) -> None:
        wait = full_jitter(min(self.failures, 30), self.backoff, self.max_backoff)
        self.failures += 1
        self.last_error = reason
        log.warning(
            "spool %s: send failed (%s); attempt %d, next in %.2fs",
            self.spool.path,
            reason,
            self.failures,
            wait,
        )
        self._pause(wait)

    def _refused(
        self, queue: str, records: list[spoolfile.Pending], entries: list[dict], exc: ClientError
    ) -> None:
        named = {int(m.group(1)) for key in exc.error_msg if (m := ENTRY.match(key))}
        if exc.status == 400 and named and max(named) < len(records):
            bad = sorted(named)
        elif len(records) == 1 or exc.status == 404:
            bad = list(range(len(records)))
        else:
            self._limits[queue] = max(1, len(records) // 2)
            return
        refused = [Rejected(queue, entries[i], exc.status, exc.error_msg) for i in bad]
        self._write_aside(refused)
        with self.spool._cond:
            self.spool.mark(spoolfile.REJECTED, [records[i] for i in bad])
        log.error(
            "spool %s: %d message(s) of %s refused (%s), moved aside",
            self.spool.path,
            len(bad),
            queue,
            exc.status,
        )
        for item in refused:
            if self.on_reject is not None:
                try:
                    self.on_reject(item)
                except Exception:
                    log.exception("spool %s: on_reject failed", self.spool.path)

    def _write_aside(self, refused: list[Rejected]) -> None:
        path = spooldisk.sidecar(self.spool.path, ".rejected")
        now = time.time()
        lines = "".join(
            json.dumps(
                {
                    "queue": r.queue,
                    "status": r.status,
                    "error_msg": r.error_msg,
                    "rejected_at": now,
                    "entry": r.entry,
                }
            )
            + "\n"
            for r in refused
        )
        spooldisk.append_durably(path, lines.encode())

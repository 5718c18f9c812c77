"""The lease keeper: extends the leases of reserved messages still being processed.

A message reserved from a work queue is leased to this worker for a
visibility timeout; if its job runs longer, the server would hand it to
another worker. The keeper, a thread of the reserve-mode worker, extends each
lease it holds once half of it has passed, for another visibility timeout,
until the worker drops the receipt (it acks or releases the message).

Lease ends are kept on the worker's monotonic clock and counted from the
moment *before* the call that granted or renewed them, so the keeper's idea
of a lease always ends no later than the server's. A receipt the server says
is no longer this worker's (``expired``: another worker has the message now)
is marked lost: the worker skips its job if it has not started, and does not
ack it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from queuey.client.errors import ClientError
from queuey.client.http import QueueyClient
from queuey.limits import MAX_RECEIPTS

log = logging.getLogger(__name__)

#: Longest the keeper sleeps between looks, and its pause after a failed call.
MAX_TICK = 1.0
ERROR_PAUSE = 0.25


@dataclasses.dataclass
class _Held:
    queue: str
    timeout: int  # seconds each grant lasts
    ends: float  # monotonic; the lease ends no later than this


@dataclasses.dataclass(eq=False)
class LeaseKeeper:
    """Keeps the leases of held receipts alive (see the module doc)."""

    client: QueueyClient
    subscription: str
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.extended = 0  # leases renewed
        self.lost = 0  # leases the server said were gone
        self._held: dict[str, _Held] = {}
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ the worker's side

    def hold(self, queue: str, receipts: Iterable[str], timeout: int, granted_at: float) -> None:
        """Keep these leases alive: granted for ``timeout`` s at or after ``granted_at``."""
        with self._lock:
            for receipt in receipts:
                self._held[receipt] = _Held(queue, timeout, granted_at + timeout)
        self._wake.set()

    def drop(self, receipts: Iterable[str]) -> None:
        """Stop extending these leases (the worker is about to ack or release them)."""
        with self._lock:
            for receipt in receipts:
                self._held.pop(receipt, None)
                self._lost.discard(receipt)

    def is_lost(self, receipt: str) -> bool:
        """True if the server said the message is no longer leased to this worker."""
        with self._lock:
            return receipt in self._lost

    def holding(self) -> int:
        with self._lock:
            return len(self._held)

    # ------------------------------------------------------------------ thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            pause = self.renew_due()
            self._wake.wait(pause)
            self._wake.clear()

    def renew_due(self) -> float:
        """Extend every lease past half its time; seconds until the next one is due."""
        now = self.clock()
        due: dict[tuple[str, int], list[str]] = defaultdict(list)
        with self._lock:
            for receipt, held in self._held.items():
                if held.ends - held.timeout / 2 <= now:
                    due[(held.queue, held.timeout)].append(receipt)
        failed = False
        for (queue, timeout), receipts in due.items():
            for start in range(0, len(receipts), MAX_RECEIPTS):
                chunk = receipts[start : start + MAX_RECEIPTS]
                failed |= not self._extend(queue, timeout, chunk)
        with self._lock:
            nexts = [h.ends - h.timeout / 2 for h in self._held.values()]
        pause = min([MAX_TICK, *(n - self.clock() for n in nexts)])
        return max(ERROR_PAUSE if failed else 0.01, pause)

    def _extend(self, queue: str, timeout: int, receipts: list[str]) -> bool:
        asked_at = self.clock()
        try:
            result = self.client.extend(
                queue, receipts, visibility_timeout=timeout, subscription=self.subscription
            )
        except ClientError as exc:
            log.warning("extending %d lease(s) of %s failed: %s", len(receipts), queue, exc)
            return False
        with self._lock:
            for receipt in receipts:
                held = self._held.get(receipt)
                if held is None:
                    continue  # acked or released meanwhile: its status does not matter
                if receipt in result.failed:
                    log.warning(
                        "lease %s of %s is gone (%s): another consumer may have the message",
                        receipt,
                        queue,
                        result.failed[receipt],
                    )
                    self._held.pop(receipt)
                    self._lost.add(receipt)
                    self.lost += 1
                else:
                    held.ends = asked_at + timeout
                    self.extended += 1
        return True

"""The SQLite expiry sweep, in a background thread of its own.

Reads already hide expired messages (expiry is decided from the reader's
clock); the sweep only reclaims their rows. It therefore never runs on a
request's thread: a post is answered once its commit is durable, and a sweep
that fails or takes long must not turn that answer into an error or delay it.
Errors are logged and the next sweep comes ``interval`` seconds later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Sweeper:
    """Calls ``sweep`` every ``interval`` seconds in a daemon thread.

    Started by :meth:`start` (idempotent; the backend starts it on its first
    write) and ended by :meth:`stop`. An ``interval`` of 0 or less turns
    background sweeping off.
    """

    def __init__(self, sweep: Callable[[], int], interval: float, name: str) -> None:
        self.interval = interval
        self.name = name
        self._sweep = sweep
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (a sweep in progress should end early)."""
        return self._stopping.is_set()

    def start(self) -> None:
        if self._thread is not None or self.interval <= 0:
            return
        with self._lock:
            if self._thread is None and not self._stopping.is_set():
                thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # no thread to spare: try again next write
                    log.error("%s: cannot start: %s", self.name, exc)
                    return
                self._thread = thread

    def stop(self, timeout: float = 30.0) -> None:
        """Stop sweeping; waits up to ``timeout`` for a sweep in progress to end."""
        with self._lock:
            self._stopping.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s: a sweep still runs after %.0fs; leaving it", self.name, timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                removed = self._sweep()
            except Exception as exc:  # noqa: BLE001 - logged; a sweep must never end the thread
                log.warning("%s: sweep failed: %s: %s", self.name, type(exc).__name__, exc)
            else:
                if removed:
                    log.info("%s: removed %d expired messages", self.name, removed)

"""Wake-ups across API processes: "this queue has new messages".

A long poll sleeps on its process's signal for the queue; a post through
another process would reach it only at its next poll. With owned work queues
every process already has a peer port, so the process that stored messages
(or released or redrove them) tells the others, and their long polls wake at
once. Announcements are coalesced: while one round of calls is out, the
queues announced meanwhile wait and go together in the next round (one call
per peer per round), so the cost follows the rounds, not the posts. They are
hints: a lost one costs a poll interval, never a message. A peer that did not
answer is skipped for :data:`QUIET` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds a peer that failed to answer is left out.
QUIET = 5.0
#: Most queues named in one round.
ROUND = 1000
#: Seconds one announcement call may take.
TIMEOUT = 0.5


class Announcer:
    """Sends ``available`` calls to every peer, one round at a time."""

    def __init__(
        self,
        send: Callable[[str, list[list[str]]], None],
        peers: Callable[[], list[str]],
    ) -> None:
        self._send = send
        self._peers = peers
        self._pending: dict[tuple[str, str], None] = {}
        self._cond = threading.Condition()
        self._quiet: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def announce(self, application: str, queue: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending[(application, queue)] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queuey-announce", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                names = list(self._pending)[:ROUND]
                for name in names:
                    del self._pending[name]
            now = time.monotonic()
            for address in self._peers():
                if self._quiet.get(address, 0.0) > now:
                    continue
                try:
                    self._send(address, [list(n) for n in names])
                except Exception:  # noqa: BLE001 - a hint: the poll catches up
                    self._quiet[address] = time.monotonic() + QUIET
                    log.debug("announcement to %s failed", address, exc_info=True)

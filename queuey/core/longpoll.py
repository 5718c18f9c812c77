"""Long polls of ``reserve``: bounded, and woken by posts on this process.

WSGI cannot park a request without its thread, so each waiting ``reserve``
holds one of the server's threads. So that waiting calls never starve posts
and reads, at most ``queuey.reserve.max_waiting`` calls wait at once per
process; one more answers at once (with what storage has, maybe nothing), and
the server's ``threads`` leave room above that (see ``development.ini``).
So that one application cannot hold every slot, each application has a cap of
its own (``max_waiting_polls``, :mod:`queuey.core.quotas`): past it, its next call
answers at once too, and the remaining slots stay free for the others.

A waiting call sleeps on its queue's signal: a post, a release without delay
or a redrive through this process wakes it at once; otherwise it asks storage
again every ``poll_interval`` seconds (delayed messages falling due, posts
through other API nodes) until its deadline.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class _Signal:
    """A queue's wake-up: a condition and a counter bumped on every notify, so a
    notify between a check and the wait is not lost."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.generation = 0
        self.users = 0


class LongPolls:
    """The long polls of one process, and their bound."""

    def __init__(
        self,
        max_waiting: int,
        poll_interval: float,
        on_refused: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        on_waiting: Callable[[int], None] = lambda waiting: None,
        per_application: Callable[[str], int] = lambda application: 0,
    ) -> None:
        self.max_waiting = max_waiting
        #: An application's own cap of waiting calls (0: only ``max_waiting``).
        self.per_application = per_application
        self.poll_interval = poll_interval
        self.on_refused = on_refused
        #: Told the number of waiting calls whenever it changes (a gauge).
        self.on_waiting = on_waiting
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._signals: dict[tuple[str, str], _Signal] = {}
        self._waiting = 0
        self._waiting_by_app: dict[str, int] = {}

    @property
    def waiting(self) -> int:
        """Calls waiting right now."""
        return self._waiting

    def waiting_of(self, application: str) -> int:
        """Calls of ``application`` waiting right now."""
        return self._waiting_by_app.get(application, 0)

    def notify(self, application: str, queue: str) -> None:
        """Wake the calls waiting on ``queue`` (cheap when there are none)."""
        with self._lock:
            signal = self._signals.get((application, queue))
        if signal is not None:
            with signal.condition:
                signal.generation += 1
                signal.condition.notify_all()

    def wait_for(
        self,
        application: str,
        queue: str,
        attempt: Callable[[], T],
        found: Callable[[T], bool],
        wait: float,
        waiter: str | None = None,
    ) -> T:
        """``attempt()`` until ``found`` holds for its result or ``wait`` seconds pass.

        Answers the last result. Without a free waiting slot, or with no
        ``wait``, ``attempt`` runs once. The slot is the ``waiter``'s (the
        application that asks, when it is not the queue's, ``application``).
        """
        waiter = waiter or application
        signal = self._enter((application, queue), waiter) if wait > 0 else None
        if signal is None:
            if wait > 0:
                self.on_refused()
            return attempt()
        try:
            deadline = self.monotonic() + wait
            while True:
                seen = signal.generation
                result = attempt()
                remaining = deadline - self.monotonic()
                if found(result) or remaining <= 0:
                    return result
                # Jitter spreads the storage checks of many waiters over time.
                pause = min(self.poll_interval * random.uniform(0.8, 1.0), remaining)
                with signal.condition:
                    if signal.generation == seen:
                        signal.condition.wait(pause)
        finally:
            self._leave((application, queue), signal, waiter)

    def hold(self, application: str, seconds: float) -> bool:
        """Park a refused call of ``application`` for ``seconds`` on one of its
        waiting slots (a throttled request, :mod:`queuey.core.quotas`): a client
        that loops on refusals then mostly waits instead of costing CPU.
        Without a free slot, answers False at once."""
        if seconds <= 0:
            return False
        key = (application, "\0held")  # no queue has this name
        signal = self._enter(key, application)
        if signal is None:
            return False
        try:
            time.sleep(seconds)
            return True
        finally:
            self._leave(key, signal, application)

    def _enter(self, key: tuple[str, str], application: str) -> _Signal | None:
        own_cap = self.per_application(application)
        with self._lock:
            if self._waiting >= self.max_waiting:
                return None
            held = self._waiting_by_app.get(application, 0)
            if own_cap and held >= own_cap:
                return None
            self._waiting_by_app[application] = held + 1
            self._waiting += 1
            self.on_waiting(self._waiting)
            signal = self._signals.get(key)
            if signal is None:
                signal = self._signals[key] = _Signal()
            signal.users += 1
            return signal

    def _leave(self, key: tuple[str, str], signal: _Signal, application: str) -> None:
        with self._lock:
            held = self._waiting_by_app[application] - 1
            if held:
                self._waiting_by_app[application] = held
            else:
                del self._waiting_by_app[application]
            self._waiting -= 1
            self.on_waiting(self._waiting)
            signal.users -= 1
            if signal.users == 0:
                self._signals.pop(key, None)

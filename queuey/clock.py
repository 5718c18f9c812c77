"""Injectable time.

Everything that depends on "now" (message ids, TTL, the read delay, timeouts)
takes a :class:`Clock`, so tests move time instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from queuey.ids import MICROS


class Clock(Protocol):
    def now_micros(self) -> int:
        """Microseconds since the Unix epoch."""


class SystemClock:
    """The wall clock."""

    def now_micros(self) -> int:
        return time.time_ns() // 1000


class ManualClock:
    """A clock that only moves when told to (for tests)."""

    def __init__(self, start_micros: int | None = None) -> None:
        self._lock = threading.Lock()
        self._now = start_micros if start_micros is not None else time.time_ns() // 1000

    def now_micros(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += int(round(seconds * MICROS))

    def set(self, micros: int) -> None:
        with self._lock:
            self._now = micros


SYSTEM_CLOCK = SystemClock()

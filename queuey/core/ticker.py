"""The schedule ticker: its thread, and what one pass of it may spend on whom.

One pass must not let one application's schedules take the time or the
bytes of every other application's (``docs/schedules.rst``, *The ticker's
fairness*):

* applications take turns, round-robin: one due schedule of each in turn
  (:class:`FairPasses`). Who goes first: an application the last pass's time
  budget left without a visit, then one it cut short, then the one whose
  turn cost least last pass, so an application with costly schedules (large
  templates to read, large messages to build) delays none that are cheap;
  an application's own schedules go oldest due first;
* each application has a :class:`Share` of every pass: a number of
  schedules, of messages and of body bytes (one batch's worth);
* a pass stops visiting after :data:`PASS_SECONDS`; whoever did not get a
  full turn goes first next pass;
* a schedule flow control refused waits, in this process's memory, before it
  is tried again (:class:`Backoff`): no store write per refusal.

Nothing here knows what a schedule is: :mod:`queuey.core.schedules` reads the
due ones and posts them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds one pass may spend visiting schedules; the applications it did not
#: finish with go first in the next pass.
PASS_SECONDS = 2.0
#: A refused schedule's first wait, seconds; it doubles with each refusal...
FIRST_BACKOFF = 1.0
#: ...up to this (or the refusal's ``Retry-After`` when that is longer).
MAX_BACKOFF = 60.0


@dataclass
class Share:
    """What one application may still spend of the current pass."""

    schedules: int
    messages: int
    bytes: int
    #: Whether the application has posted anything this pass.
    spent: bool = False

    @property
    def exhausted(self) -> bool:
        return self.schedules <= 0 or self.messages <= 0 or self.bytes <= 0

    def fit(self, size: int) -> int:
        """How many messages of ``size`` body bytes the share still holds: at
        least one while nothing was spent, so a message larger than a whole
        share is still posted, alone."""
        room = min(self.messages, self.bytes // max(1, size))
        return max(room, 0 if self.spent else 1)

    def spend(self, messages: int, size: int) -> None:
        self.messages -= messages
        self.bytes -= size
        self.spent = True


class Backoff:
    """How long each refused schedule waits before it is tried again.

    Kept in memory by application and name (with the schedule's creation
    time, so a schedule made again under the same name starts afresh); an
    entry lives until the schedule posts, is deleted or its application goes.
    """

    def __init__(self, first: float = FIRST_BACKOFF, most: float = MAX_BACKOFF) -> None:
        self.first = first
        self.most = most
        # application -> name -> (created, the wait last chosen, waiting until)
        self._waits: dict[str, dict[str, tuple[int, float, float]]] = {}

    def waiting(self, application: str, name: str, created: int, now: float) -> bool:
        entry = self._waits.get(application, {}).get(name)
        return entry is not None and entry[0] == created and now < entry[2]

    def refused(
        self, application: str, name: str, created: int, now: float, retry_after: float | None
    ) -> float:
        """Record a refusal at ``now``; the seconds the schedule now waits:
        twice its last wait (:data:`FIRST_BACKOFF` the first time), at most
        :data:`MAX_BACKOFF`, or ``retry_after`` when that is longer."""
        entry = self._waits.get(application, {}).get(name)
        delay = self.first if entry is None or entry[0] != created else entry[1] * 2
        delay = min(delay, self.most)
        wait = max(delay, float(retry_after or 0))
        self._waits.setdefault(application, {})[name] = (created, delay, now + wait)
        return wait

    def succeeded(self, application: str, name: str) -> None:
        waits = self._waits.get(application)
        if waits is not None and waits.pop(name, None) is not None and not waits:
            del self._waits[application]

    def keep(self, application: str, names: Iterable[str]) -> None:
        """Forget the waits of ``application``'s schedules not in ``names``."""
        waits = self._waits.get(application)
        if waits:
            known = set(names)
            for name in [n for n in waits if n not in known]:
                del waits[name]
            if not waits:
                del self._waits[application]

    def keep_applications(self, applications: Iterable[str]) -> None:
        known = set(applications)
        for application in [a for a in self._waits if a not in known]:
            del self._waits[application]

    def __len__(self) -> int:
        return sum(len(waits) for waits in self._waits.values())


@dataclass
class PassFigures:
    """What the last pass did (for the log and for tests)."""

    visits: int = 0
    posted: int = 0
    seconds: float = 0.0
    #: Applications whose turn the time budget cut short.
    cut: tuple[str, ...] = ()


class FairPasses:
    """The order of one pass's visits (see the module docstring).

    ``share()`` gives each application its :class:`Share` at the start of its
    turn; ``timer()`` is monotonic seconds, ``seconds`` the pass's budget.
    """

    def __init__(
        self,
        share: Callable[[], Share],
        *,
        seconds: float = PASS_SECONDS,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share
        self.seconds = seconds
        self.timer = timer
        self._passes = 0
        #: application -> the pass in which it last finished its turn (0: never)
        self._turns: dict[str, int] = {}
        #: applications the last pass cut short after a visit (behind those it never visited)
        self._begun: set[str] = set()
        #: application -> the seconds its turn took in the last pass it had one
        self._cost: dict[str, float] = {}
        self.last = PassFigures()

    def run(
        self,
        applications: Iterable[str],
        due: Callable[[str], Sequence[T]],
        visit: Callable[[T, Share], int],
    ) -> int:
        """One pass: ``due(application)`` reads an application's due items,
        in the order to visit them, when its first turn comes;
        ``visit(item, share)`` fires one and returns what it posted. Returns
        the sum of the visits'."""
        self._passes += 1
        started = self.timer()
        names = list(dict.fromkeys(applications))
        for memory in (self._turns, self._cost):
            for gone in [a for a in memory if a not in names]:
                del memory[gone]
        order = sorted(
            names,
            key=lambda a: (self._turns.get(a, 0), a in self._begun, self._cost.get(a, 0.0), a),
        )
        waiting: dict[str, deque[T]] = {}
        shares: dict[str, Share] = {}
        spent: dict[str, float] = {}
        turn = deque(order)
        figures = PassFigures()
        while turn:
            began = self.timer()
            if figures.visits and began - started >= self.seconds:
                break
            application = turn.popleft()
            if application not in waiting:
                waiting[application] = deque(due(application))
                shares[application] = self._share()
            items, share = waiting[application], shares[application]
            if items and not share.exhausted:
                figures.posted += visit(items.popleft(), share)
                figures.visits += 1
                share.schedules -= 1
            if items and not share.exhausted:
                turn.append(application)
            else:
                self._turns[application] = self._passes
            spent[application] = spent.get(application, 0.0) + self.timer() - began
        self._cost.update(spent)
        figures.cut = tuple(turn)
        self._begun = {a for a in figures.cut if a in waiting}
        figures.seconds = self.timer() - started
        if figures.cut:
            log.info(
                "schedule pass stopped after %.1f s: %d applications first next pass",
                figures.seconds,
                len(figures.cut),
            )
        self.last = figures
        return figures.posted


class Ticker:
    """The thread that calls ``tick`` every ``interval`` seconds (0: never).

    One per API node: the app starts it only in the process that measures
    queues (:mod:`queuey.server`), never in every worker. It outlives any
    failure of a pass (logged, at most once a minute, and tried next pass).
    """

    def __init__(self, tick: Callable[[], int], interval: float) -> None:
        self._tick = tick
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_error = -60.0

    def start(self) -> None:
        """Start the thread (once; nothing when ``interval`` is 0)."""
        with self._lock:
            if self._thread is not None or self.interval <= 0 or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="queuey-schedules", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - the ticker must outlive any failure
                if time.monotonic() - self._last_error > 60:
                    self._last_error = time.monotonic()
                    log.warning("schedules not ticked this pass: %s", exc, exc_info=exc)
            # Passes start every ``interval`` seconds, however long one took.
            self._stop.wait(max(0.01, self.interval - (time.monotonic() - began)))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

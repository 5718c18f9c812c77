"""Isolation between applications: each application's share of the service.

Limits per application, defaults in the settings (``queuey.limits.*``)
and overrides per application in the applications file
(:mod:`queuey.applications`); 0 turns a limit off:

* **requests per second** (``max_requests_per_second``, ``max_burst``; off by
  default): a token bucket holding up to ``max_burst`` tokens (0: one second
  of the rate), refilled at ``max_requests_per_second``. Every
  *authenticated* request takes one token (a caller that gave no valid key or
  signature costs its application nothing, so knowing a public name is not
  enough to throttle it); a request that finds none is refused with
  :class:`Throttled` before it reads its body or touches storage, and refused
  requests take no token. A refusal is held up to
  ``queuey.limits.throttle_hold`` seconds first, on one of the application's
  waiting slots (below): refusals cost CPU too, and a client looping on them
  would otherwise take the server's CPU from everyone.
* **waiting long polls** (``max_waiting_polls``): most ``reserve`` /
  ``ReceiveMessage`` calls of one application long-polling at once in one
  server process (:class:`queuey.core.longpoll.LongPolls` asks
  :meth:`Quotas.max_waiting_polls`). One more answers at once, as when the
  process-wide ``queuey.reserve.max_waiting`` is reached, so another
  application's long poll still finds a free slot.
* **queues** (``max_queues``): creating a queue past the limit raises
  :class:`TooManyQueues`. Dead-letter queues the service makes on its own are
  not refused (a message must not loop because its application is full); at
  most one per queue, they are bounded by the limit too.
* **subscriptions per queue** (``max_subscriptions``): a reserve naming a new
  subscription, or settings for one, past the limit is refused
  (:mod:`queuey.core.subscriptions`, naming ``max_subscriptions``).
* **posts and what is stored** (``max_posts_per_second``, ``max_messages``,
  ``max_bytes``): :class:`Quotas.limits` carries them; flow control checks
  them on every post (:mod:`queuey.core.flow`), the posts the service makes
  for the application (dead letters, redrives, moves) included, against the
  stored messages and bytes the operators' overview measured plus the posts
  counted since (:mod:`queuey.core.lengths`).

Across the server's worker processes (:mod:`queuey.server`), the request
buckets live in the tables of the server's own directory
(:class:`~queuey.core.buckets.Buckets`, one per application), so an
application's rate is its rate for the whole server, whichever worker each
connection lands on. Long-poll slots are per process, like
``queuey.reserve.max_waiting``: the scarce thing they guard is each
process's threads. Without a shared directory (one process: waitress,
tests) the buckets live in memory.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from queuey.applications import Application
from queuey.clock import Clock
from queuey.core.buckets import Buckets
from queuey.errors import Catalogued
from queuey.ids import MICROS
from queuey.settings import Settings

#: Queues counted per storage call when checking ``max_queues``.
_COUNT_PAGE = 1000
#: The request bucket's key in an application's table.
REQUESTS = "requests"


@dataclass(frozen=True)
class Limits:
    """One application's limits (0: no limit)."""

    requests_per_second: float
    burst: int
    waiting_polls: int
    queues: int
    #: Subscriptions one queue may have (0: no limit).
    subscriptions: int = 0
    #: Messages posted per second, messages and bytes stored (0: no limit).
    posts_per_second: float = 0.0
    messages: int = 0
    bytes: int = 0


class Throttled(Catalogued, entry="throttled"):
    """The application has used its requests per second; retry after ``retry_after`` s."""

    def __init__(self, application: str, limit: float, retry_after: int) -> None:
        super().__init__(
            f"application {application} is over its limit of {limit:g} requests per "
            f"second; retry after {retry_after} s"
        )
        self.application = application
        self.retry_after = retry_after


class TooManyQueues(Catalogued, entry="too_many_queues"):
    """The application has ``limit`` queues already."""

    def __init__(self, application: str, limit: int) -> None:
        super().__init__(
            f"application {application} has reached its limit of {limit} queues; delete one first"
        )
        self.application = application
        self.limit = limit


class Quotas:
    """Every application's limits, and the checks each door calls."""

    def __init__(
        self,
        defaults: Limits,
        applications: Callable[[], Mapping[str, Application]],
        clock: Clock,
        buckets: Buckets | None = None,
        hold_seconds: float = 0.0,
    ) -> None:
        self.defaults = defaults
        #: Longest pause before a refusal (``queuey.limits.throttle_hold``), and
        #: where a refused request waits it out: ``hold(application, seconds)``,
        #: False without a free slot (:meth:`queuey.core.longpoll.LongPolls.hold`).
        self.hold_seconds = hold_seconds
        self.hold: Callable[[str, float], bool] = lambda application, seconds: False
        #: The configured applications as they are now (asked on every call).
        self.applications = applications
        self.clock = clock
        self.buckets = buckets if buckets is not None else Buckets()
        self._limits: dict[str, tuple[Application, Limits]] = {}

    def limits(self, application: str) -> Limits:
        """``application``'s limits (the defaults for a name not configured)."""
        app = self.applications().get(application)
        if app is None:
            return self.defaults
        cached = self._limits.get(application)
        if cached is None or cached[0] is not app:
            cached = self._limits[application] = (app, limits_of(app, self.defaults))
        return cached[1]

    def _now(self) -> float:
        return self.clock.now_micros() / MICROS

    def admit(self, application: str) -> None:
        """Charge one request to ``application`` (an authenticated caller);
        :class:`Throttled` when its bucket is empty."""
        limits = self.limits(application)
        rate = limits.requests_per_second
        if not rate:
            return
        burst = limits.burst or max(1, math.ceil(rate))
        taken, wait = self.buckets.take(application, REQUESTS, self._now, rate, burst, 1, True)
        if not taken:
            retry_after = max(1, math.ceil(wait))
            self.hold(application, min(self.hold_seconds, retry_after))
            raise Throttled(application, rate, retry_after)

    def max_waiting_polls(self, application: str) -> int:
        """Most long polls of ``application`` waiting at once in this process (0: no own cap)."""
        return self.limits(application).waiting_polls

    def check_new_queue(self, storage, application: str) -> None:
        """Before creating a queue of ``application``: :class:`TooManyQueues`
        when it has its ``max_queues`` already. Concurrent creates may each
        pass at ``max_queues - 1``; the limit bounds an application, it is not
        an exact count."""
        limit = self.limits(application).queues
        if not limit:
            return
        counted, after = 0, None
        while True:
            want = min(_COUNT_PAGE, limit - counted)
            page = storage.list_queues(application, want, after)
            counted += len(page)
            if counted >= limit:
                raise TooManyQueues(application, limit)
            if len(page) < want:
                return
            after = page[-1].name


def limits_of(app: Application, defaults: Limits) -> Limits:
    """``app``'s limits: its own where the applications file gives them
    (``max_<limit>``), else the defaults."""
    own = {f.name: getattr(app, f"max_{f.name}") for f in dataclasses.fields(Limits)}
    return dataclasses.replace(defaults, **{k: v for k, v in own.items() if v is not None})


def default_limits(settings: Settings) -> Limits:
    """The ``queuey.limits.max_<limit>`` settings."""
    return Limits(
        **{f.name: getattr(settings, f"limits_max_{f.name}") for f in dataclasses.fields(Limits)}
    )


def load_quotas(
    settings: Settings,
    applications: Callable[[], Mapping[str, Application]],
    clock: Clock,
    buckets: Buckets | None = None,
) -> Quotas:
    """The quotas of this process, their request buckets in ``buckets``
    (shared by the server's processes when the buckets' tables are)."""
    return Quotas(
        default_limits(settings),
        applications,
        clock,
        buckets,
        hold_seconds=settings.limits_throttle_hold,
    )

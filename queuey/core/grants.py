"""What a reserve may lease now: a subscription's pause, in-flight cap and rate.

:class:`Grants` answers each reserve with a :class:`Grant` (see
:mod:`queuey.core.flow`, "A reserve"): a paused subscription gets none, a
capped one ``max_in_flight`` minus what is in flight (counted and reserved
as one step per process: the reserve holds the subscription's *turn*), a
rate-limited one the tokens its bucket has. Tokens a reserve took and did
not use go back when it says how many it used (:meth:`Grant.done`).

The same limits bound how many consumers a subscription can keep busy
(:meth:`Grants.usable_consumers`, the gauge an autoscaler reads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from queuey.clock import Clock
from queuey.core.buckets import Buckets
from queuey.ids import MICROS
from queuey.model import QueueMeta
from queuey.model.flow import SubscriptionFlow, subscription_flow


@dataclass
class Grant:
    """What one reserve may lease: ``count`` messages (fewer than asked
    because of ``reason``: ``paused``, ``max_in_flight`` or ``rate``)."""

    count: int
    reason: str | None = None
    #: The subscription's ``max_in_flight`` (0: none), for the store to check too.
    cap: int = 0
    _finish: Callable[[int], None] | None = None

    def done(self, used: int) -> None:
        """The reserve leased ``used`` messages: return the rest, free the turn."""
        finish, self._finish = self._finish, None
        if finish is not None:
            finish(used)


def _deliver_key(queue: QueueMeta, subscription: str) -> str:
    return f"deliver\x1f{queue.name}\x1f{subscription}"


class Grants:
    """The reserve side of flow control for one process.

    ``scaled(rate, burst)``: a rate and burst as this process's part of them;
    ``in_flight(queue, subscription, now_micros)``: the store's count;
    ``on_throttled(queue, reason)``: a reserve answered short.
    """

    def __init__(
        self,
        clock: Clock,
        buckets: Buckets,
        scaled: Callable[[float, int], tuple[float, int]],
        in_flight: Callable[[QueueMeta, str, int], int] | None,
        on_throttled: Callable[[QueueMeta, str], None],
    ) -> None:
        self.clock = clock
        self.buckets = buckets
        self._scaled = scaled
        self.in_flight = in_flight
        self.on_throttled = on_throttled
        self._turns: dict[tuple[str, str, str], threading.Lock] = {}
        self._turns_lock = threading.Lock()

    def _now(self) -> float:
        return self.clock.now_micros() / MICROS

    def grant(self, queue: QueueMeta, subscription: str, limit: int) -> Grant:
        """How many messages a reserve of ``limit`` may lease now (call
        :meth:`Grant.done` with what it leased, also on failure)."""
        flow = subscription_flow(queue, subscription)
        if not flow.limited:
            return Grant(limit)
        if flow.paused:
            return self._short(queue, Grant(0, "paused"))
        turn = None
        room = limit
        if flow.max_in_flight and self.in_flight is not None:
            turn = self._turn(queue, subscription)
            turn.acquire()
            try:
                busy = self.in_flight(queue, subscription, self.clock.now_micros())
            except BaseException:
                turn.release()
                raise
            room = min(limit, flow.max_in_flight - busy)
            if room <= 0:
                turn.release()
                return self._short(queue, Grant(0, "max_in_flight"))
        taken, key, capacity = room, "", 0
        if flow.rate:
            rate, capacity = self._scaled(flow.rate, flow.burst)
            key = _deliver_key(queue, subscription)
            try:
                taken, _ = self.buckets.take(
                    queue.application, key, self._now, rate, capacity, room, False
                )
            except BaseException:
                if turn is not None:
                    turn.release()
                raise
            if not taken:
                if turn is not None:
                    turn.release()
                return self._short(queue, Grant(0, "rate"))

        def finish(used: int) -> None:
            try:
                if key and used < taken:
                    self.buckets.give_back(queue.application, key, taken - used, capacity)
            finally:
                if turn is not None:
                    turn.release()

        reason = None
        if taken < limit:
            reason = "rate" if taken < room else "max_in_flight"
        return Grant(taken, reason, flow.max_in_flight, finish)

    def usable_consumers(
        self,
        queue: QueueMeta,
        subscription: str,
        flow: SubscriptionFlow,
        available: int,
        in_flight: int,
    ) -> int:
        """How many consumers, each working on one message, the subscription
        can keep busy now; a consumer beyond them would only wait.

        None while it is paused. Otherwise its messages to work on (available
        plus in flight), at most ``max_in_flight``; and, while its rate binds
        (its delivery bucket has no whole token: consumers already take every
        message the rate lets out), the consumers holding messages now (in
        flight, at least 1), which are as many as the rate feeds (Little's
        law: rate times the time a message is held). A rate with tokens to
        spare does not bind, and caps nothing."""
        if flow.paused:
            return 0
        usable = available + in_flight
        if flow.max_in_flight:
            usable = min(usable, flow.max_in_flight)
        if flow.rate and usable > in_flight and self._rate_binds(queue, subscription, flow):
            usable = min(usable, max(1, in_flight))
        return usable

    def holds(self, queue: QueueMeta, subscription: str) -> list[tuple[str, dict]]:
        """What would keep a reserve of the subscription from leasing one
        message now, by the rules of :meth:`grant`, taking nothing: each
        ``(reason, values)``, ``paused``, ``max_in_flight`` (``in_flight``,
        ``max_in_flight``) or ``rate`` (``rate``, ``retry_after`` seconds)."""
        flow = subscription_flow(queue, subscription)
        found: list[tuple[str, dict]] = []
        if flow.paused:
            found.append(("paused", {}))
        if flow.max_in_flight and self.in_flight is not None:
            busy = self.in_flight(queue, subscription, self.clock.now_micros())
            if busy >= flow.max_in_flight:
                cap = {"in_flight": busy, "max_in_flight": flow.max_in_flight}
                found.append(("max_in_flight", cap))
        if flow.rate:
            wait = self._rate_wait(queue, subscription, flow)
            if wait > 0:
                found.append(("rate", {"rate": flow.rate, "retry_after": round(wait, 3)}))
        return found

    def _rate_binds(self, queue: QueueMeta, subscription: str, flow: SubscriptionFlow) -> bool:
        return self._rate_wait(queue, subscription, flow) > 0

    def _rate_wait(self, queue: QueueMeta, subscription: str, flow: SubscriptionFlow) -> float:
        """Seconds until the subscription's delivery bucket has a whole token."""
        rate, capacity = self._scaled(flow.rate, flow.burst)
        key = _deliver_key(queue, subscription)
        return self.buckets.peek(queue.application, key, self._now, rate, capacity, 1)

    def _short(self, queue: QueueMeta, grant: Grant) -> Grant:
        self.on_throttled(queue, grant.reason or "")
        return grant

    def _turn(self, queue: QueueMeta, subscription: str) -> threading.Lock:
        key = (queue.application, queue.name, subscription)
        with self._turns_lock:
            turn = self._turns.get(key)
            if turn is None:
                if len(self._turns) >= 10_000:
                    self._turns = {k: v for k, v in self._turns.items() if v.locked()}
                turn = self._turns[key] = threading.Lock()
            return turn

"""A schedule's ticks: when they fall, the message each posts, firing the due ones.

Once per tick, across every API node: a node that finds a tick due posts the
tick's message through the one post path (:meth:`WorkQueues.post
<queuey.core.workqueues.WorkQueues.post>`: the same rules, metrics, overview
counts and long-poll wake-ups as a REST post) with the ``dedup_id``
``schedule:<name>:<tick>``, *then* advances the schedule's ``next_tick`` by a
compare-and-set (:meth:`Storage.update_schedule
<queuey.storage.Storage.update_schedule>`). Two nodes on the same tick both
post; the store keeps the first and answers the second with it. A node that
dies between its post and its compare-and-set leaves the tick due, and the
next node's identical post is answered by the dedup id, as long as that
happens within the dedup window (``queuey.dedup_window``) of the first post.

A tick at most :data:`LATE_GRACE` seconds overdue is late, not missed: every
policy posts it (a pass that runs a little late posts each tick it finds).
Missed ticks (older: every node down, the store unreachable, the queue
refusing posts): ``latest`` posts the most recent due tick only; ``all``
posts every due tick, oldest first, at most :data:`MAX_CATCH_UP` per schedule
and pass. Resuming a paused schedule starts from the first tick at or after
the moment it resumes. A schedule whose queue is gone, or whose template no
longer passes the message rules, is paused with the reason in its ``error``.

A pass (:meth:`TickFiring.tick`) reads each application's due schedules when
its turn comes (:mod:`queuey.core.ticker` says who goes when); a visit of
one schedule then

1. takes the ticks to post by its ``missed`` policy, at most
   :data:`MAX_CATCH_UP` and at most what its application's share of the pass
   still holds (the template's body size times the ticks);
2. asks flow control whether such a post would be refused now
   (``refusal``): if so, nothing is built and the schedule backs off
   (:class:`queuey.core.ticker.Backoff`), as after any refused post;
3. builds the messages, posts them in writes each within
   ``queuey.max_batch_messages`` and ``queuey.max_batch_size`` (body bytes),
   then advances the schedule past what was posted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import SimpleNamespace

from queuey import jsonio
from queuey.clock import Clock
from queuey.core import cron
from queuey.core.flow import FlowRefused, PriorityOnFairQueue
from queuey.core.messages import InvalidFields, InvalidMessage, MessageRules
from queuey.core.queues import Queues
from queuey.core.ticker import Backoff, FairPasses, Share
from queuey.errors import QueueNotFound, StorageUnavailable
from queuey.ids import MICROS
from queuey.model import Message, NewMessage, QueueMeta
from queuey.model.schedules import (
    INTEGER_FIELDS,
    SCHEDULE_ATTRIBUTE,
    TICK_ATTRIBUTE,
    Schedule,
    dedup_id,
)
from queuey.placement import random_partition
from queuey.storage import Storage

log = logging.getLogger("queuey.core.schedules")

#: Most due schedules of one application one pass of one node visits (the
#: oldest due first).
MAX_PER_PASS = 500
#: Most missed ticks one schedule posts per pass under the ``all`` policy.
MAX_CATCH_UP = 100
#: Seconds a tick may be overdue and still be posted under every policy: the
#: passes of a node's ticker drift and may stall for a moment under load.
LATE_GRACE = 5


def timetable(schedule: Schedule) -> cron.Timetable:
    """When ``schedule`` ticks (its fields were checked when it was made)."""
    return cron.Timetable(
        cron=cron.parse_cron(schedule.cron) if schedule.cron is not None else None,
        interval=schedule.interval,
        zone=cron.time_zone(schedule.timezone),
        anchor=schedule.start if schedule.start is not None else schedule.created,
        end=schedule.end,
    )


class TickFiring:
    """Firing due ticks: mixed into :class:`queuey.core.schedules.Schedules`,
    whose store, queues, rules, clock, post path, flow check, batch limits,
    back-off and pass planner it uses."""

    storage: Storage
    queues: Queues
    rules: MessageRules
    clock: Clock
    post: Callable[[QueueMeta, list[NewMessage]], list[Message]]
    applications: Callable[[], Iterable[str]]
    #: Flow control's refusal of a post of so many messages and body bytes, now.
    refusal: Callable[[QueueMeta, int, int], FlowRefused | None]
    max_batch_messages: int
    max_batch_size: int
    backoff: Backoff
    passes: FairPasses

    def _now(self) -> int:
        return self.clock.now_micros() // MICROS

    def _message(self, meta: QueueMeta, schedule: Schedule, tick: int) -> NewMessage:
        """The message of ``tick``, by the rules a REST post follows."""
        template = schedule.message
        attributes = dict(template.get("attributes") or {})
        attributes[SCHEDULE_ATTRIBUTE] = schedule.name
        attributes[TICK_ATTRIBUTE] = str(tick)
        # A Placement (queuey.core.messages) of the template's fields, as a
        # REST post's query gives one.
        placement = SimpleNamespace(
            **{k: template.get(k) for k in (*INTEGER_FIELDS, "partition_key")},
            dedup_id=dedup_id(schedule.name, tick),
            attributes=attributes,
        )
        return self.rules.from_json(
            meta, template.get("body"), placement, random_partition(meta.partitions)
        )

    def tick(self) -> int:
        """One pass: fire the due ticks of every application's schedules, each
        application in turn within its share (:mod:`queuey.core.ticker`);
        returns the ticks this call posted and recorded. A storage failure
        skips what it touches until the next pass."""
        now = self._now()
        applications = list(self.applications())
        self.backoff.keep_applications(applications)
        return self.passes.run(
            applications,
            lambda application: self._due(application, now),
            lambda schedule, share: self._visit(schedule, now, share),
        )

    def _due(self, application: str, now: int) -> list[Schedule]:
        """``application``'s schedules due at ``now`` and not backing off, oldest first."""
        try:
            found = self.storage.list_schedules(application)
        except StorageUnavailable as exc:
            log.warning("schedules of %s not read this pass: %s", application, exc)
            return []
        self.backoff.keep(application, (s.name for s in found))
        moment = self.clock.now_micros() / MICROS
        due = [
            s
            for s in found
            if not s.paused
            and s.next_tick is not None
            and s.next_tick <= now
            and not self.backoff.waiting(application, s.name, s.created, moment)
        ]
        due.sort(key=lambda s: s.next_tick)
        return due

    def _visit(self, schedule: Schedule, now: int, share: Share) -> int:
        """Fire ``schedule`` within ``share``; a refusal backs it off."""
        name = f"{schedule.application}/{schedule.name}"
        try:
            return self._fire(schedule, now, share)
        except StorageUnavailable as exc:
            log.warning("schedule %s not fired: %s", name, exc)
        except FlowRefused as exc:  # paused, full, over a quota or a rate
            wait = self.backoff.refused(
                schedule.application,
                schedule.name,
                schedule.created,
                self.clock.now_micros() / MICROS,
                exc.retry_after,
            )
            log.debug("schedule %s held by flow control for %.0f s: %s", name, wait, exc)
        return 0

    def _ticks(self, schedule: Schedule, table: cron.Timetable, now: int, most: int) -> list[int]:
        """The ticks to post now by the schedule's ``missed`` policy, at most ``most``."""
        assert schedule.next_tick is not None
        if schedule.missed == "all":
            return table.due(schedule.next_tick, now, most)
        late = table.at_or_after(max(schedule.next_tick, now - LATE_GRACE))
        ticks = table.due(late, now, most) if late is not None else []
        # Only missed ones: the most recent stands for them.
        return ticks or [table.latest(schedule.next_tick, now) or schedule.next_tick]

    def _fire(self, schedule: Schedule, now: int, share: Share) -> int:
        """Post what ``share`` allows of ``schedule``'s due ticks, in writes
        within the batch limits, then advance it by compare-and-set. Flow
        control is asked first: a refused schedule builds no message."""
        size = len(jsonio.dumps_bytes(schedule.message.get("body")))
        most = min(MAX_CATCH_UP, share.fit(size))
        if most <= 0:
            return 0
        table = timetable(schedule)
        ticks = self._ticks(schedule, table, now, most)
        try:
            meta = self.queues.get(schedule.application, schedule.queue)
        except QueueNotFound:
            return self._stop(schedule, f"its queue {schedule.queue} no longer exists")
        refusal = self.refusal(meta, len(ticks), len(ticks) * size)
        if isinstance(refusal, PriorityOnFairQueue):
            return self._stop(schedule, f"its message no longer passes the rules: {refusal}")
        if refusal is not None:
            raise refusal
        try:
            messages = [self._message(meta, schedule, tick) for tick in ticks]
        except (InvalidFields, InvalidMessage) as exc:
            return self._stop(schedule, f"its message no longer passes the rules: {exc}")
        share.spend(len(messages), len(messages) * size)
        per_write = max(1, min(self.max_batch_messages, self.max_batch_size // max(1, size)))
        posted = 0
        try:
            for first in range(0, len(messages), per_write):
                write = messages[first : first + per_write]
                self.post(meta, write)
                posted += len(write)
        except QueueNotFound:
            stopped = self._advance(schedule, table, ticks[:posted])
            return self._stop(stopped, f"its queue {schedule.queue} no longer exists")
        except (InvalidFields, InvalidMessage, PriorityOnFairQueue) as exc:
            stopped = self._advance(schedule, table, ticks[:posted])
            return self._stop(stopped, f"its message no longer passes the rules: {exc}")
        except (FlowRefused, StorageUnavailable):
            self._advance(schedule, table, ticks[:posted])
            raise
        self.backoff.succeeded(schedule.application, schedule.name)
        return posted if self._advance(schedule, table, ticks) is not schedule else 0

    def _advance(self, schedule: Schedule, table: cron.Timetable, ticks: list[int]) -> Schedule:
        """``schedule`` past ``ticks`` (posted), by compare-and-set: the one
        stored, or ``schedule`` itself when nothing was posted or it lost."""
        if not ticks:
            return schedule
        advanced = replace(
            schedule,
            next_tick=table.after(ticks[-1]),
            last_tick=ticks[-1],
            posted=schedule.posted + len(ticks),
        )
        return self.storage.update_schedule(advanced) or schedule

    def _stop(self, schedule: Schedule, why: str) -> int:
        log.warning("schedule %s/%s stopped: %s", schedule.application, schedule.name, why)
        self.storage.update_schedule(replace(schedule, paused=True, error=why))
        return 0

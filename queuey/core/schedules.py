"""Messages on a schedule: validation and the service every door calls.

Every door (REST, admin, command line) creates, lists, pauses, resumes and
deletes schedules through :class:`Schedules`, which checks every rule. Firing
the due ticks is :mod:`queuey.core.ticks` (mixed into :class:`Schedules`);
the ticker thread, and how a pass shares its time and bytes between
applications, :mod:`queuey.core.ticker`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from queuey.clock import Clock
from queuey.core import cron
from queuey.core.flow import FlowRefused
from queuey.core.messages import InvalidFields, InvalidMessage, MessageRules
from queuey.core.queues import Queues
from queuey.core.ticker import PASS_SECONDS, Backoff, FairPasses, Share, Ticker
from queuey.core.ticks import LATE_GRACE, MAX_CATCH_UP, MAX_PER_PASS, TickFiring, timetable
from queuey.errors import QueueNotFound, ServiceError
from queuey.model import Message, NewMessage, QueueMeta
from queuey.model.schedules import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    MISSED_POLICIES,
    NAME,
    NAME_WORDS,
    Schedule,
    check_template,
    is_integer,
)
from queuey.storage import Storage

#: Also here: the ticks' bounds, and the ticker thread the app starts.
__all__ = [
    "LATE_GRACE",
    "MAX_CATCH_UP",
    "MAX_PER_PASS",
    "ScheduleConflict",
    "Schedules",
    "Ticker",
    "TooManySchedules",
]

log = logging.getLogger(__name__)

#: Tries of a pause, resume or error note racing the ticker's compare-and-set.
MAX_TRIES = 5
#: Longest queue name a schedule may name (the SQS endpoint's longest).
MAX_QUEUE_NAME = 80


class ScheduleConflict(ServiceError, entry="schedule_conflict"):
    """A change lost :data:`MAX_TRIES` races in a row (503: try again)."""


class TooManySchedules(ServiceError, entry="too_many_schedules"):
    """The application has as many schedules as it may (``queuey.schedules.limit``)."""


class Schedules(TickFiring):
    """Create, list, pause, resume and delete schedules; fire due ticks.

    ``post`` stores messages in a queue (the core's one post path);
    ``applications`` names the applications whose schedules :meth:`tick`
    fires; ``limit`` is the most schedules one application may have.
    ``check(queue, count, size)`` is the refusal flow control would give a
    post of ``count`` messages of ``size`` body bytes now, taking nothing
    (:meth:`queuey.core.flow.FlowControl.refusal`). ``max_batch_messages``
    and ``max_batch_size`` bound each write and each application's share of
    a pass; ``pass_seconds`` and ``timer`` (monotonic seconds) a pass's time.
    """

    def __init__(
        self,
        storage: Storage,
        queues: Queues,
        rules: MessageRules,
        clock: Clock,
        post: Callable[[QueueMeta, list[NewMessage]], list[Message]],
        applications: Callable[[], Iterable[str]],
        *,
        limit: int = 100,
        interval: float = 1.0,
        check: Callable[[QueueMeta, int, int], FlowRefused | None] = (
            lambda queue, count, size: None
        ),
        max_batch_messages: int = 1000,
        max_batch_size: int = 4_194_304,
        pass_seconds: float = PASS_SECONDS,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage = storage
        self.queues = queues
        self.rules = rules
        self.clock = clock
        self.post = post
        self.applications = applications
        self.limit = limit
        self.refusal = check
        self.max_batch_messages = max_batch_messages
        self.max_batch_size = max_batch_size
        self.backoff = Backoff()
        self.passes = FairPasses(
            lambda: Share(MAX_PER_PASS, max_batch_messages, max_batch_size),
            seconds=pass_seconds,
            timer=timer,
        )
        self.ticker = Ticker(self.tick, interval)

    # -- validation -------------------------------------------------------------
    def check(self, application: str, fields: Mapping[str, Any]) -> Schedule:
        """The schedule ``fields`` describe, every field checked (its first
        ``next_tick`` set), or :class:`InvalidFields` naming every bad one."""
        if not isinstance(fields, Mapping):
            raise InvalidFields({"body": "must be a JSON object"})
        errors: dict[str, str] = {}
        now = self._now()
        name = fields.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            errors["name"] = NAME_WORDS
        queue = fields.get("queue")
        meta = None
        if not isinstance(queue, str) or not 1 <= len(queue) <= MAX_QUEUE_NAME:
            errors["queue"] = f"must be the name of a queue (1 to {MAX_QUEUE_NAME} characters)"
        else:
            try:
                meta = self.queues.fresh(application, queue)
            except QueueNotFound:
                errors["queue"] = f"the application has no queue named {queue}"
        expression, interval = fields.get("cron"), fields.get("interval")
        parsed = None
        if (expression is None) == (interval is None):
            errors["cron"] = "give either cron or interval (not both)"
        elif expression is not None:
            try:
                parsed = cron.parse_cron(expression)
            except cron.CronError as exc:
                errors["cron"] = str(exc)
        elif not is_integer(interval) or not MIN_INTERVAL <= interval <= MAX_INTERVAL:
            errors["interval"] = f"must be whole seconds from {MIN_INTERVAL} to {MAX_INTERVAL}"
        zone_name = fields.get("timezone", "UTC")
        try:
            zone = cron.time_zone(zone_name)
        except ValueError as exc:
            errors["timezone"] = str(exc)
            zone = None
        bounds = {}
        for key in ("start", "end"):
            value = fields.get(key)
            if isinstance(value, str):
                try:
                    value = cron.instant(value, zone_name)
                except ValueError as exc:
                    errors[key] = str(exc)
                    continue
            if value is not None and (not is_integer(value) or not 0 <= value <= cron.MAX_EPOCH):
                errors[key] = cron.EPOCH_ERROR
            else:
                bounds[key] = value
        start, end = bounds.get("start"), bounds.get("end")
        if start is not None and end is not None and end < start:
            errors["end"] = "must not be before start"
        missed = fields.get("missed", "latest")
        if missed not in MISSED_POLICIES:
            errors["missed"] = "must be latest or all"
        paused = fields.get("paused", False)
        if not isinstance(paused, bool):
            errors["paused"] = "must be true or false"
        template = check_template(fields.get("message"), errors)
        if meta is not None and template and not any(k.startswith("message") for k in errors):
            draft = Schedule(application, str(name), queue, None, None, "UTC", None, None, template)
            try:
                self._message(meta, draft, now)
            except InvalidFields as exc:
                errors.update({f"message.{k}": v for k, v in exc.errors.items()})
            except InvalidMessage as exc:
                errors[f"message.{exc.field}"] = str(exc)
        if errors:
            raise InvalidFields(errors)
        schedule = Schedule(
            application=application,
            name=name,
            queue=queue,
            cron=expression,
            interval=interval,
            timezone=zone_name,
            start=start,
            end=end,
            message=template,
            missed=missed,
            paused=paused,
            created=now,
        )
        assert zone is not None and (parsed is not None or interval is not None)
        first = timetable(schedule).at_or_after(max(now, start or now))
        if first is None:
            raise InvalidFields({"end" if end is not None else "cron": "no tick is ever due"})
        return replace(schedule, next_tick=first)

    # -- the service -------------------------------------------------------------
    def create(self, application: str, fields: Mapping[str, Any]) -> Schedule:
        """Check and store a new schedule (``ScheduleExists``, :class:`TooManySchedules`)."""
        schedule = self.check(application, fields)
        if len(self.storage.list_schedules(application)) >= self.limit:
            raise TooManySchedules(
                f"the application has {self.limit} schedules, the most it may have"
            )
        return self.storage.create_schedule(schedule)

    def list(self, application: str) -> list[Schedule]:
        return self.storage.list_schedules(application)

    def get(self, application: str, name: str) -> Schedule:
        return self.storage.get_schedule(application, name)

    def _change(
        self, application: str, name: str, change: Callable[[Schedule], Schedule]
    ) -> Schedule:
        """Apply ``change`` by compare-and-set, reading again after each lost race."""
        for _ in range(MAX_TRIES):
            current = self.storage.get_schedule(application, name)
            wanted = change(current)
            if wanted == current:
                return current
            stored = self.storage.update_schedule(wanted)
            if stored is not None:
                return stored
        raise ScheduleConflict(f"schedule {name} changed {MAX_TRIES} times meanwhile; retry")

    def pause(self, application: str, name: str) -> Schedule:
        """Stop ticking until :meth:`resume` (idempotent)."""
        return self._change(application, name, lambda s: replace(s, paused=True))

    def resume(self, application: str, name: str) -> Schedule:
        """Tick again from now on (ticks missed while paused are not posted);
        clears an ``error``. :class:`InvalidFields` when its queue is gone."""

        def resumed(current: Schedule) -> Schedule:
            if not current.paused and current.error is None:
                return current
            try:
                self.queues.fresh(application, current.queue)
            except QueueNotFound:
                raise InvalidFields(
                    {"queue": f"the application has no queue named {current.queue}"}
                ) from None
            first = timetable(current).at_or_after(self._now())
            return replace(current, paused=False, error=None, next_tick=first)

        return self._change(application, name, resumed)

    def delete(self, application: str, name: str) -> None:
        self.storage.delete_schedule(application, name)

    def close(self) -> None:
        self.ticker.close()

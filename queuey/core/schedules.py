"""Messages on a schedule: validation, the service every door calls, the ticker.

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
Missed ticks (older: every node down, the store unreachable): ``latest``
posts the most recent due tick only; ``all`` posts every due tick, oldest
first, at most :data:`MAX_CATCH_UP` per schedule and pass. Resuming a paused schedule starts
from the first tick at or after the moment it resumes. A schedule whose queue
is gone, or whose template no longer passes the message rules, is paused by
the service with the reason in its ``error``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from queuey.clock import Clock
from queuey.core import cron
from queuey.core.flow import FlowRefused, PriorityOnFairQueue
from queuey.core.messages import InvalidFields, InvalidMessage, MessageRules
from queuey.core.queues import Queues
from queuey.errors import QueueNotFound, ServiceError, StorageUnavailable
from queuey.ids import MICROS
from queuey.model import Message, NewMessage, QueueMeta
from queuey.model.schedules import (
    INTEGER_FIELDS,
    MAX_INTERVAL,
    MIN_INTERVAL,
    MISSED_POLICIES,
    NAME,
    SCHEDULE_ATTRIBUTE,
    TICK_ATTRIBUTE,
    Schedule,
    check_template,
    dedup_id,
    is_integer,
)
from queuey.placement import random_partition
from queuey.storage import Storage

log = logging.getLogger(__name__)

#: Most due schedules one pass of one node fires (the oldest due first).
MAX_PER_PASS = 500
#: Most missed ticks one schedule posts per pass under the ``all`` policy.
MAX_CATCH_UP = 100
#: Seconds a tick may be overdue and still be posted under every policy: the
#: passes of a node's ticker drift and may stall for a moment under load.
LATE_GRACE = 5
#: Tries of a pause, resume or error note racing the ticker's compare-and-set.
MAX_TRIES = 5
#: Longest queue name a schedule may name (the SQS endpoint's longest).
MAX_QUEUE_NAME = 80


class ScheduleConflict(ServiceError):
    """A change lost :data:`MAX_TRIES` races in a row (503: try again)."""


class TooManySchedules(ServiceError):
    """The application has as many schedules as it may (``queuey.schedules.limit``)."""


@dataclass(frozen=True)
class _Placement:
    """A template's placement, as :meth:`MessageRules.from_json` reads one."""

    partition: int | None = None
    partition_key: str | None = None
    ttl: int | None = None
    delay: int | None = None
    priority: int | None = None
    dedup_id: str | None = None
    attributes: Mapping[str, str] | None = None


def timetable(schedule: Schedule) -> cron.Timetable:
    """When ``schedule`` ticks (its fields were checked when it was made)."""
    return cron.Timetable(
        cron=cron.parse_cron(schedule.cron) if schedule.cron is not None else None,
        interval=schedule.interval,
        zone=cron.time_zone(schedule.timezone),
        anchor=schedule.start if schedule.start is not None else schedule.created,
        end=schedule.end,
    )


class Schedules:
    """Create, list, pause, resume and delete schedules; fire due ticks.

    ``post`` stores messages in a queue (the core's one post path);
    ``applications`` names the applications whose schedules :meth:`tick`
    fires; ``limit`` is the most schedules one application may have.
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
    ) -> None:
        self.storage = storage
        self.queues = queues
        self.rules = rules
        self.clock = clock
        self.post = post
        self.applications = applications
        self.limit = limit
        self.ticker = Ticker(self.tick, interval)

    def _now(self) -> int:
        return self.clock.now_micros() // MICROS

    # -- validation -------------------------------------------------------------
    def _message(self, meta: QueueMeta, schedule: Schedule, tick: int) -> NewMessage:
        """The message of ``tick``, by the rules a REST post follows."""
        template = schedule.message
        attributes = dict(template.get("attributes") or {})
        attributes[SCHEDULE_ATTRIBUTE] = schedule.name
        attributes[TICK_ATTRIBUTE] = str(tick)
        placement = _Placement(
            **{k: template.get(k) for k in (*INTEGER_FIELDS, "partition_key")},
            dedup_id=dedup_id(schedule.name, tick),
            attributes=attributes,
        )
        return self.rules.from_json(
            meta, template.get("body"), placement, random_partition(meta.partitions)
        )

    def check(self, application: str, fields: Mapping[str, Any]) -> Schedule:
        """The schedule ``fields`` describe, every field checked (its first
        ``next_tick`` set), or :class:`InvalidFields` naming every bad one."""
        if not isinstance(fields, Mapping):
            raise InvalidFields({"body": "must be a JSON object"})
        errors: dict[str, str] = {}
        now = self._now()
        name = fields.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            errors["name"] = "must be 1 to 64 letters, digits, '_' or '-'"
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

    # -- ticking -----------------------------------------------------------------
    def tick(self) -> int:
        """Fire every due tick of every application's schedules now (at most
        :data:`MAX_PER_PASS` schedules, the longest due first); returns the
        ticks this call posted and recorded. A storage failure skips what it
        touches until the next pass."""
        now = self._now()
        due: list[Schedule] = []
        for application in list(self.applications()):
            try:
                found = self.storage.list_schedules(application)
            except StorageUnavailable as exc:
                log.warning("schedules of %s not read this pass: %s", application, exc)
                continue
            due += [
                s for s in found if not s.paused and s.next_tick is not None and s.next_tick <= now
            ]
        due.sort(key=lambda s: s.next_tick)
        posted = 0
        for schedule in due[:MAX_PER_PASS]:
            try:
                posted += self._fire(schedule, now)
            except StorageUnavailable as exc:
                name = f"{schedule.application}/{schedule.name}"
                log.warning("schedule %s not fired: %s", name, exc)
            except FlowRefused as exc:  # paused, full, over a rate: due again next pass
                name = f"{schedule.application}/{schedule.name}"
                log.debug("schedule %s held by flow control: %s", name, exc)
        return posted

    def _fire(self, schedule: Schedule, now: int) -> int:
        """Post ``schedule``'s due ticks, then advance it by compare-and-set."""
        table = timetable(schedule)
        assert schedule.next_tick is not None
        if schedule.missed == "all":
            ticks = table.due(schedule.next_tick, now, MAX_CATCH_UP)
        else:
            late = table.at_or_after(max(schedule.next_tick, now - LATE_GRACE))
            ticks = table.due(late, now, MAX_CATCH_UP) if late is not None else []
            if not ticks:  # only missed ones: the most recent stands for them
                ticks = [table.latest(schedule.next_tick, now) or schedule.next_tick]
        try:
            meta = self.queues.get(schedule.application, schedule.queue)
            self.post(meta, [self._message(meta, schedule, tick) for tick in ticks])
        except QueueNotFound:
            return self._stop(schedule, f"its queue {schedule.queue} no longer exists")
        except (InvalidFields, InvalidMessage, PriorityOnFairQueue) as exc:
            return self._stop(schedule, f"its message no longer passes the rules: {exc}")
        advanced = replace(
            schedule,
            next_tick=table.after(ticks[-1]),
            last_tick=ticks[-1],
            posted=schedule.posted + len(ticks),
        )
        return len(ticks) if self.storage.update_schedule(advanced) is not None else 0

    def _stop(self, schedule: Schedule, why: str) -> int:
        log.warning("schedule %s/%s stopped: %s", schedule.application, schedule.name, why)
        self.storage.update_schedule(replace(schedule, paused=True, error=why))
        return 0

    def close(self) -> None:
        self.ticker.close()


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

"""Messages on a schedule: the value every layer passes around.

A :class:`Schedule` posts its message template to a queue of its application
once per *tick*. Ticks come from a cron expression (wall-clock fields in the
schedule's time zone) or from a fixed interval; :mod:`queuey.core.cron` does
the arithmetic and :mod:`queuey.core.schedules` the validation, the posting
and the ticker. Storage backends keep schedules as they are given and change
them only by compare-and-set on :attr:`Schedule.version`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuey.limits import MAX_ATTRIBUTE_NAME, MAX_ATTRIBUTE_VALUE, MAX_ATTRIBUTES, MAX_PARTITION_KEY

#: A schedule's name: unique per application.
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
NAME = re.compile(NAME_PATTERN)
NAME_WORDS = "must be 1 to 64 letters, digits, '_' or '-'"
#: Longest and shortest ``interval``, seconds (a year).
MIN_INTERVAL = 1
MAX_INTERVAL = 31_536_000
#: What happens to ticks missed while no node ran (:attr:`Schedule.missed`).
MISSED_POLICIES = ("latest", "all")
#: A template's integer fields (besides them: ``body``, ``partition_key``,
#: ``attributes``; other fields are ignored).
INTEGER_FIELDS = ("partition", "ttl", "priority", "delay")
#: The template's own attributes, leaving room for the two a tick adds.
MAX_TEMPLATE_ATTRIBUTES = MAX_ATTRIBUTES - 2
#: Attributes every posted tick carries, so consumers (and filters) can tell
#: which schedule and which tick a message is: the name and the tick's epoch seconds.
SCHEDULE_ATTRIBUTE = "schedule.name"
TICK_ATTRIBUTE = "schedule.tick"


def dedup_id(name: str, tick: int) -> str:
    """The ``dedup_id`` of ``name``'s message for ``tick``: the same on every
    API node and every retry, so a tick posted twice is stored once."""
    return f"schedule:{name}:{tick}"


def is_integer(value: Any) -> bool:
    """A JSON integer (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_template(fields: Any, errors: dict[str, str]) -> dict[str, Any]:
    """A message template's known fields, their types and sizes checked; each
    bad one is added to ``errors`` as ``message.<field>``. The message rules
    (:class:`queuey.core.messages.MessageRules`) are checked against the queue
    by the core."""
    if not isinstance(fields, Mapping):
        errors["message"] = "must be a JSON object with a body"
        return {}
    template: dict[str, Any] = {}
    if "body" not in fields:
        errors["message.body"] = "is required"
    else:
        template["body"] = fields["body"]
    for key in INTEGER_FIELDS:
        if fields.get(key) is not None:
            if not is_integer(fields[key]):
                errors[f"message.{key}"] = "must be an integer"
            else:
                template[key] = fields[key]
    key = fields.get("partition_key")
    if key is not None:
        if not isinstance(key, str) or len(key) > MAX_PARTITION_KEY:
            errors["message.partition_key"] = (
                f"must be text of at most {MAX_PARTITION_KEY} characters"
            )
        else:
            template["partition_key"] = key
    attributes = fields.get("attributes")
    if attributes is not None:
        if not isinstance(attributes, Mapping) or len(attributes) > MAX_TEMPLATE_ATTRIBUTES:
            errors["message.attributes"] = (
                f"must be an object of at most {MAX_TEMPLATE_ATTRIBUTES} attributes"
            )
        elif not all(
            isinstance(k, str)
            and isinstance(v, str)
            and 1 <= len(k) <= MAX_ATTRIBUTE_NAME
            and len(v) <= MAX_ATTRIBUTE_VALUE
            and not k.startswith("schedule.")
            for k, v in attributes.items()
        ):
            errors["message.attributes"] = (
                f"names must be 1 to {MAX_ATTRIBUTE_NAME} characters (not starting with "
                f"'schedule.'), values text of at most {MAX_ATTRIBUTE_VALUE}"
            )
        elif attributes:
            template["attributes"] = dict(attributes)
    return template


@dataclass(frozen=True)
class Schedule:
    """One schedule of an application (see the module and ``docs/schedules.rst``).

    Exactly one of ``cron`` and ``interval`` is set. Times are epoch seconds.
    ``next_tick`` is ``None`` once no tick is left before ``end``. ``error``
    says why the service stopped the schedule (its queue was deleted, its
    template no longer passes the message rules); such a schedule is paused.
    ``version`` grows by one with every stored change: the compare-and-set
    token of :meth:`queuey.storage.Storage.update_schedule`.
    """

    application: str
    name: str
    queue: str
    cron: str | None
    interval: int | None
    timezone: str
    start: int | None
    end: int | None
    message: Mapping[str, Any]
    missed: str = "latest"
    paused: bool = False
    next_tick: int | None = None
    last_tick: int | None = None
    posted: int = 0
    created: int = 0
    error: str | None = None
    version: int = 0

    @property
    def state(self) -> str:
        """``active``, ``paused``, ``stopped`` (paused by the service, see
        :attr:`error`) or ``ended`` (no tick left)."""
        if self.error:
            return "stopped"
        if self.paused:
            return "paused"
        return "ended" if self.next_tick is None else "active"

    def to_json(self) -> dict[str, Any]:
        """The answer shape of the REST API, the admin pages and the command line."""
        return {
            "name": self.name,
            "queue": self.queue,
            "cron": self.cron,
            "interval": self.interval,
            "timezone": self.timezone,
            "start": self.start,
            "end": self.end,
            "message": dict(self.message),
            "missed": self.missed,
            "paused": self.paused,
            "state": self.state,
            "error": self.error,
            "next_tick": self.next_tick,
            "last_tick": self.last_tick,
            "posted": self.posted,
            "created": self.created,
        }


#: The stored columns a change may set, in :func:`changeable_values` order
#: (both storage backends name their columns so).
CHANGEABLE_COLUMNS = (
    "queue",
    "cron",
    "interval_seconds",
    "timezone",
    "start_at",
    "end_at",
    "message",
    "missed",
    "paused",
    "next_tick",
    "last_tick",
    "posted",
    "error",
)
#: Every stored column, in :func:`from_row` order: the key, the changeable
#: columns, then the two set once (``created``) or only by compare-and-set.
COLUMNS = ("application", "name", *CHANGEABLE_COLUMNS, "created", "version")
#: The pieces of both backends' statements (CQL and SQLite both mark a value
#: ``?``): the column list, its value marks, and the ``SET`` of a change.
SELECT_LIST = ", ".join(COLUMNS)
VALUE_MARKS = ", ".join("?" for _ in COLUMNS)
SET_CHANGEABLE = ", ".join(f"{column} = ?" for column in CHANGEABLE_COLUMNS)


def changeable_values(s: Schedule) -> tuple:
    """``s``'s values for :data:`CHANGEABLE_COLUMNS` (the template as compact JSON)."""
    return (
        s.queue,
        s.cron,
        s.interval,
        s.timezone,
        s.start,
        s.end,
        json.dumps(dict(s.message), ensure_ascii=False, separators=(",", ":")),
        s.missed,
        s.paused,
        s.next_tick,
        s.last_tick,
        s.posted,
        s.error,
    )


def to_row(s: Schedule) -> tuple:
    """``s``'s values for :data:`COLUMNS`."""
    return (s.application, s.name, *changeable_values(s), s.created, s.version)


def from_row(row: Sequence[Any]) -> Schedule:
    """The schedule a row of :data:`COLUMNS` holds (a column added to an older
    row reads as ``None``: counters as 0)."""
    (application, name, queue, cron, interval, zone, start, end, message, missed) = row[:10]
    (paused, next_tick, last_tick, posted, error, created, version) = row[10:]
    return Schedule(
        application=application,
        name=name,
        queue=queue,
        cron=cron,
        interval=interval,
        timezone=zone,
        start=start,
        end=end,
        message=json.loads(message),
        missed=missed,
        paused=bool(paused),
        next_tick=next_tick,
        last_tick=last_tick,
        posted=posted or 0,
        created=created or 0,
        error=error,
        version=version,
    )

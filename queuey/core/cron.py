"""Cron expressions, time zones and tick arithmetic for schedules.

A tick is an instant, in whole epoch seconds. An interval schedule ticks at
``anchor + k * interval`` (``k >= 0``; the anchor is its ``start``, or the
moment it was created). A cron schedule ticks at the start of every minute
whose wall-clock time in its time zone matches the expression.

The expression is the standard five fields, ``minute hour day-of-month month
day-of-week``, each a comma list of ``*``, a number, a range ``a-b``, any of
those with a step ``/n`` (``5/15`` means ``5-59/15``), and names ``jan``-``dec``
and ``sun``-``sat`` (either case; day-of-week 0 and 7 are Sunday). As in Vixie
cron, when both day fields are restricted (neither starts with ``*``) a day
matches either one; otherwise both must match.

Daylight saving time, the rule: a wall time that does not exist (the clock
jumps over it) ticks as if the clock had not jumped, that is one gap later by
the new clock (``30 2 * * *`` ticks at 03:30 on the spring-forward day), and a
wall time that occurs twice ticks once, at its first occurrence. Two wall
times landing on one instant make one tick.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Longest cron expression taken (checked before any parsing).
MAX_CRON = 200
#: Latest instant a schedule may name or tick at (the year 3000), so every
#: tick's wall-clock arithmetic stays inside ``datetime``'s years.
MAX_EPOCH = 32_503_680_000
#: A cron expression that matches no minute within this many years never will
#: (29 February after a non-leap century year is 8 years away at most).
SEARCH_YEARS = 9
#: Widest span of wall-clock time over which a DST change can reorder ticks.
_LOOKAHEAD = timedelta(hours=3)
_MINUTE = timedelta(minutes=1)

MONTHS = {
    name: number
    for number, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
WEEKDAYS = {
    name: number for number, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])
}
#: (name, lowest, highest, names) of the five fields, in order.
FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 7, WEEKDAYS),
)
_ITEM = re.compile(r"^(\*|[A-Za-z0-9]{1,3}(?:-[A-Za-z0-9]{1,3})?)(?:/([0-9]{1,2}))?$")
#: What a time zone name looks like (then it must be one the system knows).
ZONE_PATTERN = r"^[A-Za-z0-9_+\-]{1,32}(?:/[A-Za-z0-9_+\-]{1,32}){0,2}$"
_ZONE = re.compile(ZONE_PATTERN)


class CronError(ValueError):
    """A cron expression that cannot be parsed; the message names the field."""


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the values each field matches."""

    minutes: tuple[int, ...]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # the day-of-month field starts with "*"
    any_weekday: bool  # the day-of-week field starts with "*"

    def day_matches(self, day: datetime) -> bool:
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    if text.isdigit():
        value = int(text)
    elif text.lower() in names:
        value = names[text.lower()]
    else:
        raise CronError(f"{name} field: {text!r} is not a number or a name")
    if not low <= value <= high:
        raise CronError(f"{name} field: {value} is not between {low} and {high}")
    return value


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM.match(item)
        if not match:
            raise CronError(f"{name} field: {item[:20]!r} is not a value, a range or a step")
        span, step_text = match.groups()
        step = int(step_text) if step_text else 1
        if not 1 <= step <= high:
            raise CronError(f"{name} field: the step must be between 1 and {high}")
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, b = span.split("-")
            first, last = _value(a, name, low, high, names), _value(b, name, low, high, names)
            if first > last:
                raise CronError(f"{name} field: the range {span} runs backwards")
        else:
            first = _value(span, name, low, high, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return values


def parse_cron(text: str) -> Cron:
    """Parse a five-field expression, or raise :class:`CronError` naming what is wrong."""
    if not isinstance(text, str) or len(text) > MAX_CRON:
        raise CronError(f"must be text of at most {MAX_CRON} characters")
    parts = text.split()
    if len(parts) != 5:
        raise CronError("must have five fields: minute hour day-of-month month day-of-week")
    fields = [_field(part, *spec) for part, spec in zip(parts, FIELDS, strict=True)]
    minutes, hours, days, months, weekdays = fields
    weekdays = {day % 7 for day in weekdays}
    return Cron(
        minutes=tuple(sorted(minutes)),
        hours=frozenset(hours),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        any_day=parts[2].startswith("*"),
        any_weekday=parts[4].startswith("*"),
    )


@functools.lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def time_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name`` (e.g. ``Europe/Paris``, ``UTC``), or ``ValueError``."""
    if not isinstance(name, str) or not _ZONE.match(name) or name not in _zone_names():
        raise ValueError("must be an IANA time zone name, such as UTC or Europe/Paris")
    return zoneinfo.ZoneInfo(name)


#: Why a number is no ``start`` or ``end``.
EPOCH_ERROR = f"must be seconds since the epoch, from 0 to {MAX_EPOCH}"
#: Longest text :func:`instant` reads.
MAX_INSTANT_TEXT = 64
#: Why :func:`instant` refused a text (every door shows it next to the field).
INSTANT_ERROR = (
    "must be an ISO time such as 2026-12-01T09:00 or 2026-12-01T08:00:00Z (in the "
    "schedule's time zone unless it gives an offset) or seconds since the epoch"
)


def instant(text: str, zone: str) -> int:
    """Epoch seconds of a schedule's ``start`` or ``end`` as a person writes it:
    seconds since the epoch, or an ISO 8601 time; one without an offset is
    wall-clock time in ``zone``, as the cron fields are (UTC when ``zone`` is
    not a known name: the ``timezone`` field reports that). ``ValueError``
    (:data:`INSTANT_ERROR`) otherwise. Bounds are the caller's to check."""
    if len(text) > MAX_INSTANT_TEXT:
        raise ValueError(INSTANT_ERROR)
    if text.isdigit() and text.isascii():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            try:
                moment = moment.replace(tzinfo=time_zone(zone))
            except ValueError:
                moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp())
    except (ValueError, OverflowError):
        raise ValueError(INSTANT_ERROR) from None


def _next_wall(cron: Cron, wall: datetime) -> datetime | None:
    """The first naive wall-clock minute at or after ``wall`` the fields match."""
    last_year = wall.year + SEARCH_YEARS
    while wall.year <= last_year:
        if wall.month not in cron.months:
            year, month = (wall.year + 1, 1) if wall.month == 12 else (wall.year, wall.month + 1)
            wall = datetime(year, month, 1)
        elif not cron.day_matches(wall):
            wall = datetime(wall.year, wall.month, wall.day) + timedelta(days=1)
        elif wall.hour not in cron.hours:
            wall = wall.replace(minute=0) + timedelta(hours=1)
        else:
            minute = next((m for m in cron.minutes if m >= wall.minute), None)
            if minute is not None:
                return wall.replace(minute=minute)
            wall = wall.replace(minute=0) + timedelta(hours=1)
    return None


def _instant(wall: datetime, zone: zoneinfo.ZoneInfo) -> int:
    """The epoch second of a wall time by the DST rule (the module says which)."""
    return int(wall.replace(tzinfo=zone, fold=0).timestamp())


def cron_after(cron: Cron, zone: zoneinfo.ZoneInfo, after: int) -> int | None:
    """The first tick of ``cron`` in ``zone`` strictly after ``after``, or ``None``."""
    wall = datetime.fromtimestamp(after, zone).replace(tzinfo=None, second=0, microsecond=0)
    candidate = _next_wall(cron, wall + _MINUTE)
    # Wall times of a repeated hour map to their first occurrence: they may
    # lie before ``after`` (bounded: one repeated hour of minutes).
    while candidate is not None and _instant(candidate, zone) <= after:
        candidate = _next_wall(cron, candidate + _MINUTE)
    if candidate is None:
        return None
    best = _instant(candidate, zone)
    probe = datetime.fromtimestamp(best, UTC)
    if zone.utcoffset(probe) == zone.utcoffset(probe + _LOOKAHEAD):
        return best
    # A clock change is near: a later wall time may be an earlier instant.
    limit = candidate + _LOOKAHEAD
    later = _next_wall(cron, candidate + _MINUTE)
    while later is not None and later <= limit:
        instant = _instant(later, zone)
        if after < instant < best:
            best = instant
        later = _next_wall(cron, later + _MINUTE)
    return best


@dataclass(frozen=True)
class Timetable:
    """When one schedule ticks: its cron or interval, zone, anchor and end."""

    cron: Cron | None
    interval: int | None
    zone: zoneinfo.ZoneInfo
    #: No tick before it (the schedule's ``start``, or its creation).
    anchor: int
    end: int | None

    def after(self, moment: int) -> int | None:
        """The first tick strictly after ``moment``; ``None`` when none is left."""
        if self.interval is not None:
            if moment < self.anchor:
                tick = self.anchor
            else:
                tick = self.anchor + ((moment - self.anchor) // self.interval + 1) * self.interval
        else:
            assert self.cron is not None
            tick = cron_after(self.cron, self.zone, max(moment, self.anchor - 1))
        if tick is None or tick > MAX_EPOCH or (self.end is not None and tick > self.end):
            return None
        return tick

    def at_or_after(self, moment: int) -> int | None:
        """The first tick at or after ``moment``."""
        return self.after(moment - 1)

    def latest(self, first: int, now: int) -> int | None:
        """The last tick from ``first`` (a tick) to ``now``, or ``None``.

        A binary search over :meth:`after`, never a walk over the ticks
        between: at most some 35 calls whatever the window (``* * * 1 *``
        stuck in January has 44,640 ticks in one month)."""
        limit = now if self.end is None else min(now, self.end)
        if first > limit:
            return None
        if self.interval is not None:
            return self.anchor + (limit - self.anchor) // self.interval * self.interval
        tick = self.after(first - 1)
        if tick is None or tick > limit:
            return None
        # The first tick after ``low`` is at most ``limit``; the first after
        # ``high`` is not. They meet at the last tick minus one second.
        low, high = tick - 1, limit
        while high - low > 1:
            middle = (low + high) // 2
            tick = self.after(middle)
            if tick is not None and tick <= limit:
                low = tick - 1
            else:
                high = middle
        return low + 1

    def due(self, first: int, now: int, most: int) -> list[int]:
        """The ticks from ``first`` (a tick) to ``now``, at most ``most`` of
        them: ``most`` calls of :meth:`after` at most."""
        ticks: list[int] = []
        tick: int | None = first
        while tick is not None and tick <= now and len(ticks) < most:
            ticks.append(tick)
            tick = self.after(tick)
        return ticks

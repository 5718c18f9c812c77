"""Tick arithmetic stays cheap whatever the expression (issue 39, defect 5).

``Timetable.latest`` (the most recent due tick, which a ``missed=latest``
schedule posts after downtime) walked every tick of its window: ``* * * 1 *``
stuck in January walked 44,640 ticks, about a second per call, every pass.
It is now a binary search over ``after``; it must agree with a walk on every
window small enough to walk, and take milliseconds on the January case.
``after``, ``at_or_after`` and ``due`` are bounded too: ``after`` skips whole
months, days and hours (at most nine years of them), ``due`` makes at most
``most`` calls of it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuey.core import cron

pytestmark = pytest.mark.unit


def at(*fields: int) -> int:
    return int(datetime(*fields, tzinfo=UTC).timestamp())


def table(expression: str, zone: str = "UTC", anchor: int = 0, end: int | None = None):
    return cron.Timetable(
        cron=cron.parse_cron(expression),
        interval=None,
        zone=cron.time_zone(zone),
        anchor=anchor,
        end=end,
    )


def walked(timetable: cron.Timetable, first: int, now: int) -> int | None:
    """The last tick from ``first`` to ``now``, one tick at a time (the reference)."""
    limit = now if timetable.end is None else min(now, timetable.end)
    tick = timetable.after(first - 1)
    if tick is None or tick > limit:
        return None
    while (following := timetable.after(tick)) is not None and following <= limit:
        tick = following
    return tick


def timed(call) -> tuple[object, float]:
    """The call's result and the CPU seconds this thread spent on it: the
    work it did, which other processes and threads beside a parallel run
    (the suite's workers, Cassandra, Spark) cannot inflate as they do the
    wall clock."""
    began = time.thread_time()
    result = call()
    return result, time.thread_time() - began


def test_latest_of_a_january_schedule_in_february_takes_milliseconds():
    january = table("* * * 1 *")
    first, now = at(2026, 1, 1), at(2026, 2, 10)
    latest, seconds = timed(lambda: january.latest(first, now))
    assert latest == at(2026, 1, 31, 23, 59)
    assert seconds < 0.05, seconds  # was ~1 s: 44,640 ticks walked
    # Ten years of downtime is no worse.
    latest, seconds = timed(lambda: january.latest(first, at(2036, 6, 1)))
    assert latest == at(2036, 1, 31, 23, 59) and seconds < 0.05, seconds


@pytest.mark.parametrize(
    ("expression", "zone", "moment"),
    [
        ("0 0 29 2 *", "UTC", at(2097, 3, 1)),  # next: 2104 (2100 is no leap year)
        ("0 0 29 2 1", "UTC", at(2024, 3, 1)),  # either day field: every Monday
        ("* * * * *", "America/New_York", at(2026, 11, 1, 5)),  # in the repeated hour
        ("*/7 2 * * *", "America/New_York", at(2026, 3, 8, 6)),  # the skipped hour
        ("59 23 31 12 *", "Australia/Lord_Howe", at(2026, 1, 1)),  # half-hour DST
        ("* * 31 2 mon", "UTC", at(2026, 1, 1)),  # 31 February or Mondays
    ],
)
def test_after_due_and_latest_are_bounded_on_hard_expressions(expression, zone, moment):
    timetable = table(expression, zone)
    _, seconds = timed(lambda: timetable.at_or_after(moment))
    assert seconds < 0.05, seconds
    first = timetable.at_or_after(moment)
    assert first is not None
    ticks, seconds = timed(lambda: timetable.due(first, first + 20 * 365 * 86400, 100))
    assert len(ticks) >= 1 and seconds < 0.2, seconds
    latest, seconds = timed(lambda: timetable.latest(first, first + 20 * 365 * 86400))
    assert latest is not None and latest >= ticks[-1] and seconds < 0.05, seconds


minutes = st.sampled_from(["*", "*/5", "0", "30", "0,15,45", "59", "10-20/3"])
hours = st.sampled_from(["*", "*/3", "0", "1", "2", "23", "1-3"])
days = st.sampled_from(["*", "1", "15", "29", "31", "1-7"])
months = st.sampled_from(["*", "1", "2", "3", "10", "11", "*/4", "feb,mar"])
weekdays = st.sampled_from(["*", "0", "mon", "1-5", "6,0"])
zones = st.sampled_from(
    ["UTC", "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kathmandu"]
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    fields=st.tuples(minutes, hours, days, months, weekdays),
    zone=zones,
    # Around the DST changes of 2026 (March, October-November) and elsewhere.
    start=st.sampled_from([at(2026, 3, 7), at(2026, 3, 28), at(2026, 10, 24), at(2026, 6, 1)]),
    offset=st.integers(0, 3 * 86400),
    window=st.integers(0, 4 * 86400),
    end=st.none() | st.integers(0, 6 * 86400),
)
def test_latest_agrees_with_a_walk(fields, zone, start, offset, window, end):
    timetable = table(
        " ".join(fields), zone, anchor=start, end=None if end is None else start + end
    )
    first = timetable.at_or_after(start + offset)
    if first is None:
        return
    now = first + window
    assert timetable.latest(first, now) == walked(timetable, first, now)
    # From a moment that is no tick, too (the caller may pass a stale next tick).
    assert timetable.latest(first - 30, now) == walked(timetable, first - 30, now)


@given(
    interval=st.integers(1, 10_000),
    anchor=st.integers(0, 10**9),
    steps=st.integers(0, 50),
    extra=st.integers(0, 10_000),
)
@settings(max_examples=200, derandomize=True, database=None)
def test_latest_of_an_interval_agrees_with_a_walk(interval, anchor, steps, extra):
    timetable = cron.Timetable(None, interval, cron.time_zone("UTC"), anchor, None)
    first = anchor + steps * interval
    now = first + extra
    assert timetable.latest(first, now) == walked(timetable, first, now)

"""The example job of docs/spark.rst, run on the test session's Spark."""

from __future__ import annotations

import collections
import importlib.util
from datetime import UTC, datetime, timedelta

import pytest

from tests.spark.conftest import REPO

pytestmark = pytest.mark.spark


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hourly_counts(spark, target):
    hourly = load_example("hourly_counts")
    meta = target.queue(partitions=3, ttl=86400)
    # Start on an hour boundary, then three hours of messages, 20 minutes apart.
    now = target.clock.now_micros()
    target.clock.set(now - now % 3_600_000_000 - 4 * 3_600_000_000)
    expected = collections.Counter()
    signatures = ["OOM", "segv", "OOM", None, "abort"]
    for i in range(9):
        signature = signatures[i % len(signatures)]
        body = {"n": i} if signature is None else {"signature": signature, "n": i}
        stored = target.post(meta, [body, body])
        hour = datetime.fromtimestamp(stored[0].timestamp // 3_600_000_000 * 3600, tz=UTC)
        expected[(hour, signature)] += 2
        target.clock.advance(1200)
    options = {**target.options(), "queue": meta.name}
    rows = hourly.hourly_counts(spark, options, "signature").collect()
    got = {(r["hour"].replace(tzinfo=UTC), r["signature"]): r["messages"] for r in rows}
    assert got == dict(expected)
    hours = [r["hour"] for r in rows]
    assert hours == sorted(hours)
    # The middle hour only, through the pushed-down where.
    middle = sorted({h for h, _ in expected})[1]
    since = middle - timedelta(microseconds=1)
    until = middle + timedelta(hours=1) - timedelta(microseconds=1)
    rows = hourly.hourly_counts(spark, options, "signature", since, until).collect()
    got = {(r["hour"].replace(tzinfo=UTC), r["signature"]): r["messages"] for r in rows}
    assert got == {k: v for k, v in expected.items() if k[0] == middle}
    assert sum(got.values()) == 6


def test_hourly_counts_reads_times_as_a_user_types_them():
    hourly = load_example("hourly_counts")
    assert hourly.instant("1795280000") == datetime(2026, 11, 21, 16, 53, 20, tzinfo=UTC)
    assert hourly.instant("2026-11-21T00:00:00+01:00") == datetime(2026, 11, 20, 23, tzinfo=UTC)
    with pytest.raises(Exception, match="no time zone"):
        hourly.instant("2026-11-21T00:00:00")

"""Filter push-down (PySpark 4.1+): a ``where`` on the message columns reads only
what it selects, and selects exactly what Spark would have kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey import ids

pytestmark = pytest.mark.spark

datasource = pytest.importorskip("pyspark.sql.datasource")
if not hasattr(datasource, "EqualTo"):
    pytest.skip("filter push-down needs PySpark 4.1 or later", allow_module_level=True)

from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import StructType  # noqa: E402

from queuey.spark.arrow import DEFAULT_SCHEMA  # noqa: E402
from queuey.spark.pushdown import push_filters  # noqa: E402

ROUNDS, PER_ROUND, PARTITIONS = 6, 60, 4


def fill(target, meta) -> list:
    """``PER_ROUND`` messages at each of ``ROUNDS`` seconds, round robin over partitions."""
    out = []
    for r in range(ROUNDS):
        out += target.post_many(meta, PER_ROUND, round=r)
        target.clock.advance(1)
    return out


def at(message) -> datetime:
    return ids.micros_to_datetime(message.timestamp)


def read(spark, target, queue: str, **options):
    reader = spark.read.format("queuey").options(**target.options()).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_where_on_timestamp_partition_and_id_returns_what_spark_would_keep(spark, target):
    meta = target.queue(partitions=PARTITIONS)
    posted = fill(target, meta)
    frame = read(spark, target, meta.name)
    start, end = at(posted[PER_ROUND * 2]), at(posted[PER_ROUND * 4])
    chosen = frame.where(
        (frame.timestamp >= start) & (frame.timestamp < end) & frame.partition.isin(1, 3)
    )
    got = sorted(r.message_id for r in chosen.select("message_id").collect())
    want = sorted(m.id.hex for m in posted if start <= at(m) < end and m.partition in (1, 3))
    assert got == want and len(want) == PER_ROUND  # 2 rounds, half the partitions
    one = posted[7]
    assert [r.message_id for r in frame.where(frame.message_id == one.id.hex).collect()] == [
        one.id.hex
    ]
    assert frame.where(frame.message_id == "not an id").count() == 0
    assert frame.where(frame.partition > PARTITIONS).count() == 0
    # Several queues in one read: a where on ``queue`` reads only that one.
    other = target.queue(partitions=2)
    target.post_many(other, 10)
    both = read(spark, target, f"{meta.name},{other.name}")
    assert both.where(both.queue == other.name).count() == 10


def test_a_pushed_where_makes_the_store_send_only_what_it_selects(target):
    """What the store served, counted in this process by reading the data source's
    own reader the way Spark's planner and executors call it."""
    from queuey.spark.datasource import QueueyDataSource
    from queuey.spark.sources import served

    meta = target.queue(partitions=PARTITIONS)
    posted = fill(target, meta)
    start, end = at(posted[PER_ROUND * 2]), at(posted[PER_ROUND * 3])

    def scan(filters) -> tuple[int, int, int, list]:
        reader = QueueyDataSource({**target.options(), "queue": meta.name}).reader(DEFAULT_SCHEMA)
        remaining = list(reader.pushFilters(filters))
        served.reset()
        rows = sum(b.num_rows for part in reader.partitions() for b in reader.read(part))
        return rows, served.rows, served.bytes, remaining

    everything = scan([])
    where = [
        IsNotNull(("timestamp",)),
        GreaterThanOrEqual(("timestamp",), start),
        LessThan(("timestamp",), end),
        EqualTo(("partition",), 2),
    ]
    pushed = scan(where)
    print(
        f"\npush-down on {target.kind}: whole queue {everything[0]} rows, "
        f"{everything[2]} bytes served; where timestamp in one second and partition = 2: "
        f"{pushed[0]} rows, {pushed[1]} rows and {pushed[2]} bytes served "
        f"({pushed[2] / everything[2]:.1%})"
    )
    assert everything[0] == everything[1] == len(posted)
    assert pushed[3] == []  # every filter handled by the read
    assert pushed[0] == pushed[1] == PER_ROUND // PARTITIONS
    assert pushed[2] * PARTITIONS * ROUNDS == pytest.approx(everything[2], rel=0.05)


# -- the selection against Spark's own semantics, on generated filters ------------------

SCHEMA = StructType.fromJson(DEFAULT_SCHEMA.jsonValue())
BASE = 1_795_280_000_000_000


def _row_value(row: dict, column: str):
    return row[column]


def _holds(item, row: dict) -> bool:
    """What Spark's filter means for one row (the columns are never null)."""
    kind = type(item).__name__
    if kind == "Not":
        return not _holds(item.child, row)
    if kind == "IsNotNull":
        return True
    value = _row_value(row, item.attribute[0])
    literal = item.value
    if kind == "EqualTo":
        return value == literal
    if kind == "In":
        return value in literal
    if kind == "GreaterThan":
        return value > literal
    if kind == "GreaterThanOrEqual":
        return value >= literal
    if kind == "LessThan":
        return value < literal
    if kind == "LessThanOrEqual":
        return value <= literal
    raise AssertionError(kind)


def _row(micros: int, partition: int, node: int, queue: str) -> dict:
    message_id = ids.make_uuid(micros, node | 0x010000000000, 0x8000).hex
    return {
        "micros": micros,
        "timestamp": ids.micros_to_datetime(micros),
        "partition": partition,
        "message_id": message_id,
        "queue": queue,
    }


rows_strategy = st.lists(
    st.builds(
        _row,
        st.integers(BASE, BASE + 50),
        st.integers(1, 5),
        st.integers(0, 3),
        st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=30,
)


@st.composite
def filters_strategy(draw, rows):
    micros = st.integers(BASE - 2, BASE + 52)
    stamp = micros.map(lambda m: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=m))
    ids_seen = [r["message_id"] for r in rows] + ["x" * 32, "0" * 32]
    compare = st.sampled_from([EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual])
    one = st.one_of(
        st.builds(lambda c, v: c(("timestamp",), v), compare, stamp),
        st.builds(lambda c, v: c(("partition",), v), compare, st.integers(0, 6)),
        st.builds(lambda v: In(("partition",), v), st.lists(st.integers(0, 6), min_size=1)),
        st.builds(lambda v: EqualTo(("message_id",), v), st.sampled_from(ids_seen)),
        st.builds(
            lambda v: In(("message_id",), v), st.lists(st.sampled_from(ids_seen), min_size=1)
        ),
        st.builds(lambda v: EqualTo(("queue",), v), st.sampled_from(["a", "b", "c"])),
        st.builds(lambda v: In(("timestamp",), v), st.lists(stamp, min_size=1, max_size=3)),
        st.builds(lambda v: Not(EqualTo(("partition",), v)), st.integers(1, 5)),
        st.just(IsNotNull(("timestamp",))),
    )
    return draw(st.lists(one, max_size=5))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_selection_and_remaining_filters_keep_exactly_what_spark_would(data):
    rows = data.draw(rows_strategy)
    filters = data.draw(filters_strategy(rows))
    selection, remaining = push_filters(filters, SCHEMA)
    assert all(any(r is f for f in filters) for r in remaining)  # given back by reference
    for row in rows:
        want = all(_holds(f, row) for f in filters)
        read = (
            not selection.empty
            and selection.allows_queue(row["queue"])
            and selection.allows_partition(row["partition"])
            and (selection.after_micros is None or row["micros"] > selection.after_micros)
            and (selection.until_micros is None or row["micros"] <= selection.until_micros)
            and (selection.message_ids is None or row["message_id"] in selection.message_ids)
        )
        got = read and all(_holds(f, row) for f in remaining)
        assert got == want, (row, filters, selection, remaining)


@pytest.mark.parametrize(
    "where",
    [
        [GreaterThan(("timestamp",), datetime(9999, 12, 31, tzinfo=UTC))],
        [LessThan(("timestamp",), datetime(1, 1, 1, tzinfo=UTC))],
        [GreaterThanOrEqual(("timestamp",), datetime(1, 1, 1, tzinfo=UTC))],
        [EqualTo(("partition",), 10**30)],
        [LessThanOrEqual(("partition",), -(10**30))],
        [In(("partition",), [0, -1, 2**63])],
        [EqualTo(("message_id",), "\udcff" * 40)],
        [In(("message_id",), ["", "0" * 32, "g" * 32, "F" * 32])],
        [EqualTo(("queue",), "")],
    ],
    ids=lambda w: type(w[0]).__name__,
)
def test_extreme_literals_read_nothing_or_everything_without_failing(sqlite_target, where):
    """Literals no message can match, or every message does, plan and read cleanly."""
    from queuey.spark.datasource import QueueyDataSource

    target = sqlite_target
    meta = target.queue(partitions=2)
    target.post_many(meta, 10)
    reader = QueueyDataSource({**target.options(), "queue": meta.name}).reader(DEFAULT_SCHEMA)
    remaining = list(reader.pushFilters(where))
    rows = [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]
    everything = isinstance(where[0], GreaterThanOrEqual)
    assert remaining == [] and len(rows) == (10 if everything else 0)

"""Admission control on PySpark 4.2+: ``latestOffset(start, limit)``, read limits,
``Trigger.AvailableNow``.

The unit tests call :class:`QueueyStreamReader` the way Spark's planner does
(``getDefaultReadLimit``, ``prepareForTriggerAvailableNow``,
``latestOffset(start, limit)``); the Spark tests check each micro-batch's size
through ``query.recentProgress``.
"""

from __future__ import annotations

import json

import pytest

from queuey.clock import SYSTEM_CLOCK
from queuey.errors import ConfigurationError
from queuey.model import NewMessage
from queuey.spark.sources import open_source
from queuey.storage import load_backend
from tests.spark.test_stream_reader import make_reader, read_batch
from tests.spark.test_streaming import BatchFiles, input_rows, run_available_now, stream
from tests.support import wait_until

# Read limits and Trigger.AvailableNow for Python sources came with PySpark 4.2.
_limits = pytest.importorskip(
    "pyspark.sql.streaming.datasource", reason="admission control needs PySpark 4.2 or later"
)
ReadAllAvailable, ReadMaxBytes, ReadMaxRows = (
    _limits.ReadAllAvailable,
    _limits.ReadMaxBytes,
    _limits.ReadMaxRows,
)


def padded(n: int, size: int) -> dict:
    """A body of exactly ``size`` bytes of JSON text."""
    body = {"n": n, "pad": ""}
    body["pad"] = "x" * (size - len(json.dumps(body)))
    return body


def drain(reader, start, limit):
    """Batches (as message id lists) until ``latestOffset`` answers ``start``."""
    batches = []
    while (end := reader.latestOffset(start, limit)) != start:
        batches.append([r[0] for r in read_batch(reader, start, end)])
        start = end
    return batches


# -- the reader, driven as Spark's planner drives it ---------------------------------


@pytest.mark.unit
def test_latest_offset_counts_from_the_start_spark_gives(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=1)
    posted = target.post_many(meta, 50)
    reader = make_reader(target, meta.name, maxMessagesPerTrigger=10)
    # What PySpark 4.0 would have taught it is ignored when Spark says where to start.
    reader.partitions({"1": posted[2].id.hex}, {"1": posted[4].id.hex})
    start = {"1": posted[29].id.hex}
    assert reader.latestOffset(start, ReadMaxRows(10)) == {"1": posted[39].id.hex}
    assert reader.latestOffset(start, ReadMaxRows(5)) == {"1": posted[34].id.hex}
    # ReadAllAvailable lifts the options' limits (Trigger.Once).
    assert reader.latestOffset(start, ReadAllAvailable()) == {"1": posted[49].id.hex}
    done = {"1": posted[49].id.hex}
    assert reader.latestOffset(done, ReadMaxRows(10)) == done  # nothing new: the start


@pytest.mark.unit
def test_default_read_limit_follows_the_options(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=2)
    target.post(meta, [padded(i, 100) for i in range(40)])
    assert make_reader(target, meta.name).getDefaultReadLimit() == ReadAllAvailable()
    rows = make_reader(target, meta.name, maxMessagesPerTrigger=300)
    assert rows.getDefaultReadLimit() == ReadMaxRows(300)
    only_bytes = make_reader(target, meta.name, maxBytesPerTrigger=1000)
    assert only_bytes.getDefaultReadLimit() == ReadMaxBytes(1000)
    both = make_reader(target, meta.name, maxMessagesPerTrigger=30, maxBytesPerTrigger=1000)
    assert both.getDefaultReadLimit() == ReadMaxRows(30)
    # The byte cap still applies under Spark's ReadMaxRows...
    start = both.initialOffset()
    assert len(read_batch(both, start, both.latestOffset(start, ReadMaxRows(30)))) == 10
    # ...and the message cap under ReadMaxBytes; ReadAllAvailable lifts both.
    assert len(read_batch(both, start, both.latestOffset(start, ReadMaxBytes(10_000)))) == 30
    assert len(read_batch(both, start, both.latestOffset(start, ReadAllAvailable()))) == 40


@pytest.mark.unit
def test_max_bytes_per_trigger_bounds_each_batch_and_is_shared(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=3)
    target.post(meta, [padded(i, 100) for i in range(60)], partition=[1, 2])
    target.post(meta, [padded(i, 100) for i in range(3)], partition=3)
    reader = make_reader(target, meta.name, maxBytesPerTrigger=1000)
    start = reader.initialOffset()
    first = read_batch(reader, start, reader.latestOffset(start, ReadMaxBytes(1000)))
    by_partition = [sum(1 for r in first if r[2] == p) for p in (1, 2, 3)]
    assert by_partition == [4, 3, 3] or by_partition == [3, 4, 3]  # 10 x 100 bytes, fairly
    batches = drain(reader, start, ReadMaxBytes(1000))
    assert all(len(b) <= 10 for b in batches)
    assert sum(len(b) for b in batches) == len({i for b in batches for i in b}) == 63


@pytest.mark.unit
def test_a_message_larger_than_the_byte_budget_is_admitted_alone(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=1)
    sizes = [100, 100, 5000, 100, 100, 100]
    posted = target.post(meta, [padded(i, s) for i, s in enumerate(sizes)])
    reader = make_reader(target, meta.name, maxBytesPerTrigger=250)
    batches = drain(reader, reader.initialOffset(), ReadMaxBytes(250))
    ids = [m.id.hex for m in posted]
    assert batches == [ids[0:2], ids[2:3], ids[3:5], ids[5:6]]


@pytest.mark.unit
@pytest.mark.parametrize("value", ["0", "-5", "1k", "lots"])
def test_a_bad_max_bytes_per_trigger_is_refused(sqlite_target, value):
    meta = sqlite_target.queue()
    with pytest.raises(ConfigurationError, match="maxBytesPerTrigger"):
        make_reader(sqlite_target, meta.name, maxBytesPerTrigger=value)


@pytest.fixture
def test_clock(sqlite_target, monkeypatch):
    """The reader's store runs on the test's clock instead of the wall clock."""
    monkeypatch.setattr("queuey.spark.sources.SYSTEM_CLOCK", sqlite_target.clock)
    return sqlite_target.clock


@pytest.mark.unit
def test_available_now_reads_only_what_was_final_when_it_began(sqlite_target, test_clock):
    target = sqlite_target
    meta = target.queue(partitions=4)
    before = target.post(meta, [{"i": i} for i in range(30)], partition=[1, 2, 3])
    test_clock.advance(1)  # final now
    reader = make_reader(target, meta.name, maxMessagesPerTrigger=7)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    target_offset = reader.reportLatestOffset()

    after = target.post(meta, [{"late": i} for i in range(8)], partition=[1, 2, 3, 4])
    test_clock.advance(5)  # the late messages are final too, but came after the target
    assert reader.reportLatestOffset() == target_offset
    batches = drain(reader, start, ReadMaxRows(7))
    assert [len(b) for b in batches] == [7, 7, 7, 7, 2]
    assert sorted(i for b in batches for i in b) == sorted(m.id.hex for m in before)

    # The next run picks up where this one stopped.
    end = reader.latestOffset(start, ReadAllAvailable())
    nxt = make_reader(target, meta.name, maxMessagesPerTrigger=7)
    nxt.prepareForTriggerAvailableNow()
    rest = drain(nxt, end, ReadMaxRows(7))
    assert [len(b) for b in rest] == [7, 1]
    assert sorted(i for b in rest for i in b) == sorted(m.id.hex for m in after)


@pytest.mark.unit
def test_available_now_never_reads_below_its_target_in_a_partition(sqlite_target):
    """A message that appears later with an id below the run's cutoff (a store whose
    clock lags ours, like an API node's) waits for the next run."""
    target = sqlite_target
    meta = target.queue(partitions=1)
    before = target.post_many(meta, 5)
    reader = make_reader(target, meta.name, maxMessagesPerTrigger=3)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    target.clock.advance(1)  # still ten minutes in the past: under the wall-clock cutoff
    target.post_many(meta, 4)
    batches = drain(reader, start, ReadMaxRows(3))
    assert [i for b in batches for i in b] == [m.id.hex for m in before]


@pytest.mark.unit
def test_report_latest_offset(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=2)
    posted = target.post_many(meta, 6)
    reader = make_reader(target, meta.name, partitions="1")
    assert reader.reportLatestOffset() == {"1": posted[4].id.hex}
    empty = make_reader(target, target.queue(partitions=1).name)
    (cutoff,) = empty.reportLatestOffset().values()
    assert isinstance(cutoff, int) and cutoff < SYSTEM_CLOCK.now_micros()


# -- real streaming queries -----------------------------------------------------------


@pytest.mark.spark
def test_available_now_drains_a_backlog_in_bounded_batches(spark, target, tmp_path):
    meta = target.queue(partitions=4)
    posted = target.post_many(meta, 1000)
    sink = BatchFiles(tmp_path / "out")
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=300)
    query = run_available_now(frame, tmp_path / "checkpoint", sink)
    delivered = sink.delivered()
    print(f"{target.kind}: {len(posted)} posted, batches {input_rows(query)}")
    assert input_rows(query) == [300, 300, 300, 100]
    assert len(delivered) == len(set(delivered)) == 1000
    assert set(delivered) == {m.id.hex for m in posted}


@pytest.mark.spark
def test_max_bytes_per_trigger_bounds_each_micro_batch(spark, target, tmp_path):
    meta = target.queue(partitions=3)
    posted = target.post(meta, [padded(i, 200) for i in range(150)])
    sink = BatchFiles(tmp_path / "out")
    frame = stream(spark, target, meta.name, maxBytesPerTrigger=200 * 40)
    query = run_available_now(frame, tmp_path / "checkpoint", sink)
    print(f"{target.kind}: maxBytesPerTrigger=8000, 200-byte messages, batches {input_rows(query)}")
    assert input_rows(query) == [40, 40, 40, 30]
    assert sorted(sink.delivered()) == sorted(m.id.hex for m in posted)


@pytest.mark.spark
def test_messages_posted_during_an_available_now_run_wait_for_the_next(spark, target, tmp_path):
    meta = target.queue(partitions=3)
    before = target.post_many(meta, 90)
    late: list[str] = []
    delay = open_source(target.connection).read_delay_micros

    def post_late(frame, batch_id):
        sink(frame, batch_id)
        if batch_id != 0:
            return
        # Now, on the real clock, through another backend instance (another API node)...
        writer = load_backend(
            target.settings["queuey.storage.backend"], target.settings, SYSTEM_CLOCK
        )
        try:
            stored = writer.put_messages(
                meta, [NewMessage(json.dumps({"late": i}), i % 3 + 1, 3600) for i in range(6)]
            )
        finally:
            writer.close()
        # ...and under the run's cutoff, newer than what it found in each partition.
        target.clock.advance(1)
        stored += target.post(meta, [{"slipped": i} for i in range(3)])
        late.extend(m.id.hex for m in stored)
        newest = max(m.timestamp for m in stored)
        wait_until(lambda: SYSTEM_CLOCK.now_micros() - delay > newest, timeout=30)

    sink = BatchFiles(tmp_path / "out")
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=40)
    query = run_available_now(frame, tmp_path / "checkpoint", post_late)
    assert input_rows(query) == [40, 40, 10]
    assert sorted(sink.delivered()) == sorted(m.id.hex for m in before)

    query = run_available_now(frame, tmp_path / "checkpoint", sink)
    print(
        f"{target.kind}: first run {len(before)}, posted during it {len(late)}, next run "
        f"{input_rows(query)}"
    )
    assert input_rows(query) == [9]
    delivered = sink.delivered()
    assert len(delivered) == len(set(delivered)) == 99
    assert set(delivered) == {m.id.hex for m in before} | set(late)


@pytest.mark.spark
def test_a_restarted_query_resumes_exactly_with_a_limit(spark, target, tmp_path):
    """PySpark 4.0 needed the reader to learn its position; with the wrapper
    setting on, a restart with maxMessagesPerTrigger stopped with an error."""
    spark.conf.set("spark.sql.streaming.triggerAvailableNowWrapper.enabled", "true")
    try:
        meta = target.queue(partitions=2)
        posted = target.post_many(meta, 50)
        sink = BatchFiles(tmp_path / "out")
        frame = stream(spark, target, meta.name, maxMessagesPerTrigger=30)
        first = run_available_now(frame, tmp_path / "checkpoint", sink)
        target.clock.advance(1)
        posted += target.post_many(meta, 25)
        second = run_available_now(frame, tmp_path / "checkpoint", sink)
    finally:
        spark.conf.unset("spark.sql.streaming.triggerAvailableNowWrapper.enabled")
    assert (input_rows(first), input_rows(second)) == ([30, 20], [25])
    delivered = sink.delivered()
    assert len(delivered) == len(set(delivered)) == 75
    assert set(delivered) == {m.id.hex for m in posted}


@pytest.mark.spark
def test_trigger_once_reads_everything_whatever_the_limits(spark, target, tmp_path):
    """Spark asks for ReadAllAvailable under trigger(once=True)."""
    meta = target.queue(partitions=2)
    posted = target.post_many(meta, 100)
    sink = BatchFiles(tmp_path / "out")
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=30, maxBytesPerTrigger=500)
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(once=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert input_rows(query) == [100]
    assert sorted(sink.delivered()) == sorted(m.id.hex for m in posted)

"""The streaming reader driven the way Spark's planner process drives it.

No SparkSession: these call :class:`QueueyStreamReader` directly to pin down
offsets, admission control and the read delay (SQLite store, test clock).
"""

from __future__ import annotations

import json

import pytest

from queuey import ids
from queuey.errors import ConfigurationError
from queuey.spark.arrow import DEFAULT_SCHEMA
from queuey.spark.options import ReadOptions
from queuey.spark.stream import QueueyStreamReader

pytestmark = pytest.mark.unit


def make_reader(target, queue: str, **options) -> QueueyStreamReader:
    given = {**target.options(), "queue": queue, **{k: str(v) for k, v in options.items()}}
    return QueueyStreamReader(ReadOptions.parse(given), DEFAULT_SCHEMA)


def read_batch(reader, start, end) -> list[tuple]:
    """Plan a micro-batch and read every input partition, as rows of DEFAULT_SCHEMA."""
    rows = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            rows += [tuple(row.values()) for row in batch.to_pylist()]
    return rows


def test_offsets_are_per_partition_message_ids(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=3)
    posted = target.post_many(meta, 9)
    reader = make_reader(target, meta.name)
    start = reader.initialOffset()
    assert start == {"1": 0, "2": 0, "3": 0}
    end = reader.latestOffset()
    last = {
        p: max((m for m in posted if m.partition == p), key=lambda m: m.timestamp)
        for p in (1, 2, 3)
    }
    assert end == {str(p): last[p].id.hex for p in (1, 2, 3)}
    rows = read_batch(reader, start, end)
    assert sorted(r[0] for r in rows) == sorted(m.id.hex for m in posted)
    assert reader.latestOffset() == end  # nothing new: the same offset, same JSON
    assert reader.partitions(end, end) == []


def test_admission_control_shares_the_budget_between_partitions(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=3)
    target.post(meta, [{"i": i} for i in range(100)], partition=1)
    target.post(meta, [{"i": i} for i in range(5)], partition=2)
    reader = make_reader(target, meta.name, maxMessagesPerTrigger=30)
    start = reader.initialOffset()
    end = reader.latestOffset()
    # latestOffset does not move the reader (Spark also calls it for metrics):
    # asked again before the batch is planned, it answers the same.
    assert reader.latestOffset() == end
    rows = read_batch(reader, start, end)
    assert len(rows) == 30
    assert sorted(r[2] for r in rows).count(2) == 5  # partition 2 drained
    assert end["3"] == 0
    seen = {r[0] for r in rows}
    while True:
        nxt = reader.latestOffset()
        if nxt == end:
            break
        batch = read_batch(reader, end, nxt)
        assert 0 < len(batch) <= 30
        seen |= {r[0] for r in batch}
        end = nxt
    assert len(seen) == 105


def test_latest_offset_respects_the_read_delay(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=1)
    old = target.post_many(meta, 3)
    target.clock.advance(600 - 2)  # two seconds ago
    target.post_many(meta, 3)
    target.settings["queuey.read_delay"] = "30"
    reader = make_reader(target, meta.name)
    end = reader.latestOffset()
    assert end == {"1": old[-1].id.hex}
    rows = read_batch(reader, reader.initialOffset(), end)
    assert [r[0] for r in rows] == [m.id.hex for m in old]


def test_starting_offsets(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=2)
    posted = target.post_many(meta, 10)
    latest = make_reader(target, meta.name, startingOffsets="latest")
    assert latest.latestOffset() == latest.initialOffset()
    assert read_batch(latest, latest.initialOffset(), latest.latestOffset()) == []

    given = json.dumps({"1": posted[6].id.hex})  # partition 1 from after message 6
    reader = make_reader(target, meta.name, startingOffsets=given)
    assert reader.initialOffset() == {"1": posted[6].id.hex, "2": 0}
    rows = read_batch(reader, reader.initialOffset(), reader.latestOffset())
    expected = [m for m in posted if m.partition == 2 or m.timestamp > posted[6].timestamp]
    assert sorted(r[0] for r in rows) == sorted(m.id.hex for m in expected)

    since = make_reader(target, meta.name, since=ids.micros_to_seconds(posted[4].timestamp))
    rows = read_batch(since, since.initialOffset(), since.latestOffset())
    assert sorted(r[0] for r in rows) == sorted(m.id.hex for m in posted[5:])

    with pytest.raises(ConfigurationError, match="startingOffsets"):
        make_reader(target, meta.name, startingOffsets="{not json").initialOffset()


def test_restarted_reader_learns_its_position_from_spark(sqlite_target):
    """On restart Spark calls partitions(x, x) with the last planned offset before
    asking for the latest one; admission control counts from there."""
    target = sqlite_target
    meta = target.queue(partitions=1)
    posted = target.post_many(meta, 50)
    reader = make_reader(target, meta.name, maxMessagesPerTrigger=10)
    checkpointed = {"1": posted[29].id.hex}
    assert reader.partitions(checkpointed, checkpointed) == []
    end = reader.latestOffset()
    assert end == {"1": posted[39].id.hex}


def test_a_batch_that_would_end_before_it_starts_is_refused(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=1)
    posted = target.post_many(meta, 5)
    reader = make_reader(target, meta.name)
    with pytest.raises(ConfigurationError, match="before it starts"):
        reader.partitions({"1": posted[3].id.hex}, {"1": posted[1].id.hex})


def test_new_partitions_join_the_stream(sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=1)
    target.post_many(meta, 4)
    reader = make_reader(target, meta.name)
    start = reader.initialOffset()
    end = reader.latestOffset()
    grown = target.storage.update_queue(meta.application, meta.name, partitions=2)
    target.post(grown, [{"late": 1}], partition=2)
    later = reader.latestOffset()
    assert set(later) == {"1", "2"}
    assert len(read_batch(reader, start, end)) == 4
    assert [json.loads(r[3]) for r in read_batch(reader, end, later)] == [{"late": 1}]


def test_streaming_takes_one_queue(sqlite_target):
    with pytest.raises(ConfigurationError, match="exactly one queue"):
        make_reader(sqlite_target, "a,b")

"""``spark.read.format("queuey")`` and ``df.write.format("queuey")`` in batch."""

from __future__ import annotations

import json

import pytest

from queuey import ids
from queuey.clock import SYSTEM_CLOCK
from queuey.model import ReadQuery

pytestmark = pytest.mark.spark


def read(spark, target, queue: str, schema: str | None = None, **options):
    reader = spark.read.format("queuey").options(**target.options()).option("queue", queue)
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def stored(target, meta) -> list:
    """Every live message of the queue, read back through the storage API.

    Read at the later of the target's clock (ten minutes back, for messages the
    test posted) and the wall clock, which is what Spark's executors mint the
    ids of the messages they write with: a reader does not see ids from well
    past its own now (on Cassandra that is how delayed messages stay hidden)."""
    out, after = [], None
    now = max(target.clock.now_micros(), SYSTEM_CLOCK.now_micros())
    while True:
        page = target.storage.read_messages(
            meta,
            ReadQuery(
                partitions=list(range(1, meta.partitions + 1)),
                now_micros=now,
                limit=1000,
                order="ascending",
                after_id=after,
            ),
        )
        out += page
        if len(page) < 1000:
            return out
        after = page[-1].id


def test_read_every_message_with_exact_timestamps(spark, target):
    meta = target.queue(partitions=4)
    posted = target.post_many(meta, 777)
    frame = read(spark, target, meta.name, slicesPerPartition=3)
    assert frame.rdd.getNumPartitions() == 12
    rows = frame.selectExpr(
        "message_id", "unix_micros(timestamp) AS micros", "partition", "body", "queue"
    ).collect()
    assert len(rows) == 777
    expected = {m.id.hex: m for m in posted}
    for row in rows:
        message = expected.pop(row.message_id)
        assert row.micros == message.timestamp
        assert row.partition == message.partition
        assert json.loads(row.body) == json.loads(message.body)
        assert row.queue == meta.name
    assert expected == {}


def test_time_range_and_partition_options_are_exact(spark, target):
    meta = target.queue(partitions=3)
    posted = []
    for i in range(45):
        target.clock.advance(0.5)
        posted += target.post(meta, [{"i": i}], partition=i % 3 + 1)
    since = ids.micros_to_seconds(posted[7].timestamp)
    until = ids.micros_to_seconds(posted[37].timestamp)
    frame = read(
        spark, target, meta.name, since=since, until=until, partitions="1,3", slicesPerPartition=5
    )
    got = sorted(r.message_id for r in frame.select("message_id").collect())
    expected = sorted(m.id.hex for m in posted[8:38] if m.partition in (1, 3))
    assert got == expected
    # ISO 8601 bounds (with a zone) mean the same instants.
    iso_since = ids.micros_to_seconds(posted[7].timestamp)
    from datetime import UTC, datetime

    text = datetime.fromtimestamp(iso_since, tz=UTC).isoformat()
    frame = read(spark, target, meta.name, since=text, partitions="1,3")
    assert frame.count() == len([m for m in posted[8:] if m.partition in (1, 3)])


def test_declared_schema_selects_columns_and_body_fields(spark, target):
    meta = target.queue(partitions=2)
    posted = target.post(
        meta,
        [
            {"signature": "OOM", "count": 3, "ratio": 0.5, "tags": ["a"], "ok": True},
            {"signature": "segv", "count": "many"},
            {"other": 1},
        ],
    )
    frame = read(
        spark,
        target,
        meta.name,
        schema="message_id STRING, timestamp DOUBLE, signature STRING, count BIGINT, "
        "ratio DOUBLE, tags STRING, ok BOOLEAN, timestamp_micros BIGINT",
    )
    rows = {r.message_id: r for r in frame.collect()}
    first, second, third = (rows[m.id.hex] for m in posted)
    assert first.signature == "OOM" and first["count"] == 3 and first.ratio == 0.5
    assert first.tags == '["a"]' and first.ok is True
    assert second.signature == "segv" and second["count"] is None  # not a number
    assert third.signature is None
    assert first.timestamp_micros == posted[0].timestamp
    assert ids.seconds_to_micros(repr(first.timestamp)) == posted[0].timestamp


def test_now_option_judges_expiry(spark, target):
    meta = target.queue(partitions=1)
    short = target.post(meta, [{"short": 1}], ttl=60)
    target.clock.advance(1)
    long = target.post(meta, [{"long": 1}])
    assert [r.message_id for r in read(spark, target, meta.name).collect()] == [long[0].id.hex]
    alive = ids.micros_to_seconds(short[0].timestamp + 30 * ids.MICROS)
    got = {r.message_id for r in read(spark, target, meta.name, now=alive).collect()}
    assert got == {short[0].id.hex, long[0].id.hex}


def test_empty_queue_reads_as_an_empty_frame(spark, target):
    meta = target.queue(partitions=2)
    assert read(spark, target, meta.name).count() == 0


def test_bad_options_are_named(spark, sqlite_target):
    meta = sqlite_target.queue()
    with pytest.raises(Exception, match="maxMessagesPerTrigger"):
        read(spark, sqlite_target, meta.name, maxMessagesPerTrigger="lots").count()
    with pytest.raises(Exception, match="partitions"):
        read(spark, sqlite_target, meta.name, partitions="2").count()
    with pytest.raises(Exception, match="queue"):
        spark.read.format("queuey").options(**sqlite_target.options()).load().count()


def test_settings_from_an_ini_file(spark, sqlite_target, tmp_path):
    meta = sqlite_target.queue(partitions=2)
    sqlite_target.post_many(meta, 25)
    ini = tmp_path / "service.ini"
    ini.write_text(
        "[app:main]\nuse = egg:queuey\n"
        "queuey.storage.backend = queuey.storage.sqlite\n"
        "queuey.sqlite.path = %(here)s/queuey.sqlite3\n"
    )
    frame = (
        spark.read.format("queuey")
        .option("config", str(ini))
        .option("application", sqlite_target.application)
        .option("queue", meta.name)
        .load()
    )
    assert frame.count() == 25


# -- writes ----------------------------------------------------------------------------


def test_write_rows_with_a_json_body(spark, target):
    meta = target.queue(partitions=3)
    frame = spark.createDataFrame(
        [(json.dumps({"n": i}), i % 3 + 1) for i in range(250)], "body STRING, partition INT"
    ).repartition(3)
    (
        frame.write.format("queuey")
        .options(**target.options())
        .option("queue", meta.name)
        .option("batchSize", "40")
        .mode("append")
        .save()
    )
    messages = stored(target, meta)
    assert sorted(json.loads(m.body)["n"] for m in messages) == list(range(250))
    assert all(json.loads(m.body)["n"] % 3 + 1 == m.partition for m in messages)


def test_write_columns_as_the_message_placed_by_key(spark, target):
    from queuey.placement import partition_for_key

    meta = target.queue(partitions=5)
    frame = spark.createDataFrame(
        [(f"sig{i % 7}", i, f"user{i % 4}") for i in range(60)],
        "signature STRING, n INT, partition_key STRING",
    )
    (
        frame.write.format("queuey")
        .options(**target.options())
        .option("queue", meta.name)
        .option("ttl", "120")
        .mode("append")
        .save()
    )
    messages = stored(target, meta)
    assert len(messages) == 60
    for m in messages:
        body = json.loads(m.body)
        assert set(body) == {"signature", "n"}
        assert m.partition == partition_for_key(f"user{body['n'] % 4}", 5)
        assert m.expires - m.timestamp == 120 * ids.MICROS


def test_read_then_write_copies_a_queue(spark, target):
    source, copy = target.queue(partitions=2), target.queue(partitions=2)
    target.post_many(source, 90)
    (
        read(spark, target, source.name)
        .select("body", "partition")
        .write.format("queuey")
        .options(**target.options())
        .option("queue", copy.name)
        .mode("append")
        .save()
    )
    # Bodies are stored in the API's compact JSON form, as a POST would store them.
    original = sorted((m.partition, json.loads(m.body)["n"]) for m in stored(target, source))
    copied = sorted((m.partition, json.loads(m.body)["n"]) for m in stored(target, copy))
    assert copied == original


def test_write_refuses_overwrite_and_bad_rows(spark, sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=2)
    frame = spark.createDataFrame([("[1, 2]",)], "body STRING")
    writer = frame.write.format("queuey").options(**target.options()).option("queue", meta.name)
    with pytest.raises(Exception, match="only appends"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="must be a JSON object"):
        writer.mode("append").save()
    bad_partition = spark.createDataFrame([('{"a": 1}', 9)], "body STRING, partition INT")
    with pytest.raises(Exception, match="partition 9 not in 1..2"):
        bad_partition.write.format("queuey").options(**target.options()).option(
            "queue", meta.name
        ).mode("append").save()
    assert stored(target, meta) == []


def test_min_partitions_spreads_slices_over_partitions_with_messages(spark, sqlite_target):
    target = sqlite_target
    single = target.queue(partitions=1)
    target.post_many(single, 40)
    # Registered on local[2] with spark.default.parallelism=2: at least 4 tasks.
    assert read(spark, target, single.name).rdd.getNumPartitions() == 4
    assert read(spark, target, single.name, minPartitions=7).rdd.getNumPartitions() == 7
    wide = target.queue(partitions=6)
    target.post(wide, [{"i": i} for i in range(30)], partition=[1, 2, 5])
    frame = read(spark, target, wide.name)
    # As many queue partitions as tasks wanted: one slice each, no probe,
    # dealt into the 4 tasks.
    assert frame.rdd.getNumPartitions() == 4
    assert frame.count() == 30
    assert read(spark, target, wide.name, slicesPerPartition=1).rdd.getNumPartitions() == 6
    # More tasks than partitions: slices go to the 3 partitions holding messages.
    finer = read(spark, target, wide.name, minPartitions=12)
    assert finer.rdd.getNumPartitions() == 12
    assert finer.count() == 30

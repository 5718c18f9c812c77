"""``writeStream.format("queuey")``: every row stored once per batch id.

The end-to-end tests copy a queue into another through a streaming query,
stop it, delete Spark's record that the last batch committed (as if the query
died between the sink's write and Spark's commit log) and restart it: Spark
replays that batch into the sink, and the dedup ids keep every message once.
The unit tests pin down the ids and the options.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql.types import Row, StringType, StructField, StructType

from queuey.clock import SYSTEM_CLOCK
from queuey.errors import ConfigurationError
from queuey.model import ReadQuery
from queuey.spark.stream_writer import QueueyStreamWriter, TaskDedupIds
from queuey.spark.writer import QueueyCommitMessage, RowMessage, Sink, WriteTotals
from tests.spark.conftest import needs_available_now

BODY_SCHEMA = StructType([StructField("body", StringType())])


def read_back(target, meta) -> list[str]:
    """Every live message body of the queue, read with the real clock."""
    bodies: list[str] = []
    for p in meta.partition_numbers:
        query = ReadQuery(
            partitions=(p,), now_micros=SYSTEM_CLOCK.now_micros(), limit=1000, order="ascending"
        )
        while True:
            page = target.storage.read_messages(meta, query)
            bodies += [m.body for m in page]
            if len(page) < query.limit:
                break
            query = ReadQuery(
                partitions=(p,),
                now_micros=query.now_micros,
                limit=1000,
                order="ascending",
                after_id=page[-1].id,
            )
    return bodies


def copy_query(spark, target, source: str, dest: str, checkpoint: Path, **sink_options):
    """A query copying ``source`` into ``dest``, 40 messages a micro-batch, until caught up."""
    frame = (
        spark.readStream.format("queuey")
        .options(**target.options())
        .option("queue", source)
        .option("maxMessagesPerTrigger", "40")
        .load()
        .select("body")
    )
    writer = (
        frame.writeStream.format("queuey")
        .options(**target.options())
        .option("queue", dest)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    return query


@needs_available_now
@pytest.mark.spark
@pytest.mark.parametrize("exactly_once", [True, False], ids=["dedup", "no-dedup"])
def test_a_replayed_batch_is_stored_once(spark, target, tmp_path, exactly_once):
    source = target.queue(partitions=3)
    dest = target.queue(partitions=2)
    posted = target.post_many(source, 100)
    checkpoint = tmp_path / "checkpoint"
    options = {} if exactly_once else {"exactlyOnce": "false"}

    first = copy_query(spark, target, source.name, dest.name, checkpoint, **options)
    batches = {p["batchId"]: p["numInputRows"] for p in first.recentProgress}
    assert sum(batches.values()) == 100 and max(batches.values()) <= 40
    last = max(batches)
    # The sink wrote the last batch, but Spark "died" before recording it.
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink()

    second = copy_query(spark, target, source.name, dest.name, checkpoint, **options)
    replayed = {p["batchId"]: p["numInputRows"] for p in second.recentProgress}
    assert replayed == {last: batches[last]}  # the same batch, the same rows, again

    bodies = read_back(target, dest)
    duplicated = sum(n - 1 for n in Counter(bodies).values())
    seconds = sum(p["durationMs"].get("addBatch", 0) for p in first.recentProgress) / 1000
    print(
        f"{target.kind} exactlyOnce={exactly_once}: acknowledged {len(posted)}, "
        f"read back {len(bodies)}, duplicated {duplicated}, "
        f"replayed batch {last} ({batches[last]} rows); "
        f"sink {100 / seconds:.0f} messages/s over {len(batches)} small batches"
    )
    assert Counter(json.loads(b)["n"] for b in bodies).keys() == set(range(100))
    if exactly_once:
        assert len(bodies) == 100 and duplicated == 0
    else:  # what the dedup ids prevent: the replay posted its batch again
        assert duplicated == batches[last] and len(bodies) == 100 + batches[last]


# -- unit tests ----------------------------------------------------------------------


def row_message(body: str, partition: int | None = None) -> RowMessage:
    return RowMessage(body=body, partition=partition, partition_key=None, ttl=None)


@pytest.mark.unit
def test_dedup_ids_follow_the_rows_not_their_order():
    rows = [row_message('{"a":1}'), row_message('{"a":2}'), row_message('{"a":1}')]
    first = TaskDedupIds("q-1", 7, 3)
    ids = [first(r) for r in rows]
    assert len(set(ids)) == 3  # an identical row is still a message of its own
    assert all(i.startswith("spark:q-1:7:3:") and len(i) <= 128 for i in ids)

    replay = TaskDedupIds("q-1", 7, 3)
    assert sorted(replay(r) for r in reversed(rows)) == sorted(ids)
    assert TaskDedupIds("q-1", 8, 3)(rows[0]) != ids[0]  # another batch
    assert TaskDedupIds("q-1", 7, 4)(rows[0]) != ids[0]  # another task
    assert first(row_message('{"a":1}', partition=2)) not in ids  # another placement

    longest = TaskDedupIds("8c2d55b6-09d1-4a3c-9a4c-5a6f3a1c0e1f", 2**63 - 1, 2**31 - 1)
    assert len(longest(rows[0])) <= 128


@pytest.mark.unit
def test_write_totals_and_throughput():
    totals = WriteTotals.of(
        [
            QueueyCommitMessage(60, 0, started=100.0, seconds=2.0),
            QueueyCommitMessage(30, 10, started=101.0, seconds=3.0),
            None,  # a task that failed
        ]
    )
    assert (totals.tasks, totals.messages, totals.duplicates, totals.seconds) == (2, 90, 10, 4.0)
    assert totals.per_second == 25.0
    assert QueueyCommitMessage(30, 10, 101.0, 2.0).per_second == 20.0
    assert "90 messages stored, 10 duplicates dropped" in str(totals)


@pytest.mark.unit
def test_stream_sink_options(sqlite_target):
    options = {**sqlite_target.options(), "queue": "q"}
    assert QueueyStreamWriter(options, BODY_SCHEMA, False).exactly_once
    off = QueueyStreamWriter({**options, "exactlyOnce": "false"}, BODY_SCHEMA, False)
    assert not off.exactly_once
    with pytest.raises(ConfigurationError, match="exactlyOnce"):
        QueueyStreamWriter({**options, "exactlyOnce": "maybe"}, BODY_SCHEMA, False)
    with pytest.raises(ConfigurationError, match="append"):
        QueueyStreamWriter(options, BODY_SCHEMA, True)
    http = {"url": "http://127.0.0.1:1", "application": "a", "queue": "q"}
    assert QueueyStreamWriter(http, BODY_SCHEMA, False).exactly_once
    assert not QueueyStreamWriter({**http, "exactlyOnce": "no"}, BODY_SCHEMA, False).exactly_once


def test_the_sink_counts_the_repeats_the_store_drops(target):
    """Posting the same rows with the same ids twice stores them once."""
    meta = target.queue(partitions=2)
    sink = Sink({**target.options(), "queue": meta.name, "batchSize": "3"}, BODY_SCHEMA, False)
    rows = [Row(body=json.dumps({"n": i % 4})) for i in range(8)]
    first = sink.post(rows, TaskDedupIds("q", 0, 0))
    assert (first.messages, first.duplicates) == (8, 0) and first.seconds > 0
    again = sink.post(reversed(rows), TaskDedupIds("q", 0, 0))
    assert (again.messages, again.duplicates) == (0, 8)
    other_batch = sink.post(rows[:2], TaskDedupIds("q", 1, 0))
    assert (other_batch.messages, other_batch.duplicates) == (2, 0)
    assert len(read_back(target, meta)) == 10


def test_the_sink_posts_once_through_the_http_api(live_server):
    """Over HTTP the service drops the repeats (its dedup ids are the same)."""
    from queuey.client.http import QueueyClient

    with QueueyClient(live_server.url, live_server.application, live_server.key) as client:
        client.create_queue("sink-http", partitions=2)
        options = {
            "url": live_server.url,
            "application": live_server.application,
            "key": live_server.key,
            "queue": "sink-http",
            "batchSize": "3",
        }
        sink = Sink(options, BODY_SCHEMA, False)
        rows = [Row(body=json.dumps({"n": i % 4})) for i in range(8)]
        first = sink.post(rows, TaskDedupIds("q", 0, 0))
        again = sink.post(reversed(rows), TaskDedupIds("q", 0, 0))
        assert (first.messages, first.duplicates) == (8, 0)
        assert (again.messages, again.duplicates) == (0, 8)
        assert len(list(client.iter_messages("sink-http"))) == 8


def test_the_sink_gives_every_message_the_context_of_the_write(live_server, spans):
    """The writer is made on the driver, inside the caller's span; its tasks
    post outside it, and every message still carries that span's context."""
    from queuey import tracing
    from queuey.client.http import QueueyClient

    with QueueyClient(live_server.url, live_server.application, live_server.key) as client:
        client.create_queue("sink-traced")
        options = {
            "url": live_server.url,
            "application": live_server.application,
            "key": live_server.key,
            "queue": "sink-traced",
        }
        with tracing.tracer().start_as_current_span("nightly export") as span:
            context = span.get_span_context()
            sink = Sink(options, BODY_SCHEMA, False)
        sink.post([Row(body=json.dumps({"n": n})) for n in range(3)])
        found = {
            (m.attributes or {}).get("traceparent")
            for m in client.read("sink-traced", order="ascending")
        }
    flags = f"{int(context.trace_flags):02x}"
    assert found == {f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"}

"""Reading and writing through the HTTP API (a live waitress server on loopback),
for deployments where executors cannot reach the store."""

from __future__ import annotations

import pytest

from queuey import ids
from queuey.client.http import OutgoingMessage, QueueyClient
from queuey.spark import HttpConnection, queue_rdd

pytestmark = pytest.mark.spark


@pytest.fixture
def server(live_server):
    return live_server


@pytest.fixture
def client(server):
    with QueueyClient(server.url, server.application, server.key) as client:
        yield client


def post(client, name: str, count: int, partitions: int) -> list:
    out = []
    for start in range(0, count, 500):
        out += client.post_batch(
            name,
            [
                OutgoingMessage(body={"n": i}, partition=i % partitions + 1)
                for i in range(start, min(count, start + 500))
            ],
        )
    return out


def test_rdd_pages_through_the_api(sc, server, client):
    client.create_queue("web", partitions=3)
    posted = post(client, "web", 2345, 3)
    connection = HttpConnection((server.url,), server.application, server.key)
    rows = queue_rdd(sc, connection, server.application, "web", slices_per_partition=2).collect()
    assert sorted(r.message_id for r in rows) == sorted(m.message_id for m in posted)
    by_id = {m.message_id: m for m in posted}
    for row in rows[:20]:
        assert row.timestamp == by_id[row.message_id].timestamp
        assert row.partition == by_id[row.message_id].partition
    # A time range and a partition through the API are as exact as through storage.
    since, until = posted[100].timestamp, posted[2000].timestamp
    rows = queue_rdd(
        sc, connection, server.application, "web", since=since, until=until, partitions=[2]
    ).collect()
    expected = [m for m in posted[101:2001] if m.partition == 2]
    assert sorted(r.message_id for r in rows) == sorted(m.message_id for m in expected)


def test_data_source_reads_writes_and_streams_over_http(spark, server, client, tmp_path):
    client.create_queue("src", partitions=2)
    client.create_queue("dst", partitions=2)
    posted = post(client, "src", 300, 2)
    options = {"url": server.url, "key": server.key, "application": server.application}
    frame = spark.read.format("queuey").options(**options).option("queue", "src").load()
    rows = frame.selectExpr("message_id", "unix_micros(timestamp) AS micros").collect()
    assert {(r.message_id, r.micros) for r in rows} == {
        (m.message_id, ids.seconds_to_micros(repr(m.timestamp))) for m in posted
    }

    frame.select("body", "partition").write.format("queuey").options(**options).option(
        "queue", "dst"
    ).mode("append").save()
    copied = list(client.iter_messages("dst"))
    assert sorted(m.body["n"] for m in copied) == list(range(300))

    seen: list[str] = []
    query = (
        spark.readStream.format("queuey")
        .options(**options)
        .option("queue", "dst")
        .option("maxMessagesPerTrigger", "1000")
        .load()
        .writeStream.foreachBatch(
            lambda df, _: seen.extend(r.message_id for r in df.select("message_id").collect())
        )
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(seen) == sorted(m.message_id for m in copied)

"""One store: a queue made through the SQS endpoint is a Queuey queue that Spark
reads from storage, and what Spark writes into it reaches SQS consumers."""

from __future__ import annotations

import json

import pytest

from tests.sqs.conftest import make_client
from tests.support import wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def backend(request) -> str:
    return request.param


@pytest.fixture
def stored(request, backend, make_live_server, tmp_path):
    """A live server on ``backend`` and the data source options reaching its store."""
    if backend == "sqlite":
        path = tmp_path / "sqs-spark.sqlite3"
        server = make_live_server("sqlite", **{"queuey.sqlite.path": str(path)})
        options = {
            "queuey.storage.backend": "queuey.storage.sqlite",
            "queuey.sqlite.path": str(path),
        }
    else:
        server = make_live_server("cassandra")
        settings = request.getfixturevalue("cassandra_settings")
        options = {**settings, "queuey.cassandra.create_schema": "false"}
    sqs = make_client(server.url, server.application, "json")
    yield server, sqs, {"application": server.application, **options}
    sqs.close()


def test_spark_reads_what_boto3_sent(spark, stored):
    server, sqs, options = stored
    url = sqs.create_queue(QueueName="sqs-to-spark")["QueueUrl"]
    sent: dict[str, str] = {}
    for start in range(0, 30, 10):
        entries = [{"Id": str(i), "MessageBody": f"job {i}"} for i in range(start, start + 10)]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not answer.get("Failed")
        sent.update(
            {e["MessageId"].replace("-", ""): f"job {e['Id']}" for e in answer["Successful"]}
        )

    def complete():
        # A Cassandra source hides the newest writes for its read delay; a
        # DataFrame reads one snapshot however often it is used, so each look
        # loads the queue again.
        frame = spark.read.format("queuey").options(**options).option("queue", "sqs-to-spark")
        rows = frame.load().select("message_id", "body").collect()
        return rows if len(rows) == len(sent) else None

    rows = wait_until(complete, timeout=60, what="every message sent through SQS read by Spark")
    assert {r.message_id: json.loads(r.body) for r in rows} == sent


def test_boto3_receives_what_spark_wrote(spark, stored):
    server, sqs, options = stored
    url = sqs.create_queue(QueueName="spark-to-sqs", Attributes={"VisibilityTimeout": "60"})[
        "QueueUrl"
    ]
    frame = spark.createDataFrame([(i, f"row {i}") for i in range(25)], "n INT, label STRING")
    frame.write.format("queuey").options(**options).option("queue", "spark-to-sqs").mode(
        "append"
    ).save()

    received: dict[int, str] = {}

    def drained():
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for message in got.get("Messages", []):
            body = json.loads(message["Body"])
            assert body["n"] not in received, "a message was delivered twice"
            received[body["n"]] = body["label"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return len(received) == 25

    wait_until(drained, timeout=60, what=lambda: f"25 rows received, got {len(received)}")
    assert received == {i: f"row {i}" for i in range(25)}

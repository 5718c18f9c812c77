"""One store: SQS queues are Queuey queues, read and written through both APIs."""

from __future__ import annotations

import json

import requests

from tests.support import KEY, wait_until


def native(sqs, method: str, path: str, **kw):
    headers = {"X-Application-Name": sqs.application, "ApplicationKey": KEY}
    return requests.request(method, sqs.url + path, headers=headers, timeout=30, **kw)


def test_native_post_received_through_sqs(client, sqs):
    created = native(sqs, "POST", "/queue", json={"queue_name": "native", "partitions": 3})
    assert created.status_code == 201, created.text
    posted = native(sqs, "POST", "/queue/native", json={"event": "signup", "n": 1})
    assert posted.status_code == 201
    message_id = posted.json()["messages"][0]["message_id"]
    url = client.get_queue_url(QueueName="native")["QueueUrl"]
    got = client.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert len(got) == 1
    assert json.loads(got[0]["Body"]) == {"event": "signup", "n": 1}
    assert got[0]["MessageId"].replace("-", "") == message_id
    client.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    # Stream readers still see every message (after the read delay, 6 s on
    # Cassandra); the SQS consumer acked its own copy.
    read = wait_until(lambda: native(sqs, "GET", "/queue/native").json()["messages"], timeout=20)
    assert [m["message_id"] for m in read] == [message_id]


def test_sqs_send_read_natively(client, sqs):
    url = client.create_queue(QueueName="from-sqs.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    sent = client.send_message(
        QueueUrl=url,
        MessageBody="plain text, not JSON",
        MessageGroupId="g",
        MessageDeduplicationId="d1",
    )
    info = native(sqs, "GET", "/queue/from-sqs.fifo/info")
    assert info.status_code == 200, info.text
    messages = wait_until(
        lambda: native(sqs, "GET", "/queue/from-sqs.fifo").json()["messages"], timeout=20
    )
    assert [m["body"] for m in messages] == ["plain text, not JSON"]
    assert messages[0]["message_id"] == sent["MessageId"].replace("-", "")
    # A work-queue consumer through the native API shares the SQS subscription.
    reserved = native(sqs, "POST", "/queue/from-sqs.fifo/reserve", json={"limit": 10})
    assert reserved.json()["messages"][0]["body"] == "plain text, not JSON"

"""FIFO queues through boto3: order per message group, one group's batch in
flight at a time, deduplication, sequence numbers."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


@pytest.fixture
def fifo(client):
    return client.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]


def test_fifo_attributes(client, fifo):
    got = client.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
    assert got["FifoQueue"] == "true"
    assert got["ContentBasedDeduplication"] == "true"
    assert got["DeduplicationScope"] == "queue"
    with pytest.raises(ClientError) as exc:
        client.create_queue(QueueName="plain", Attributes={"FifoQueue": "true"})
    assert code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        client.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "false"})
    assert code(exc) == "InvalidAttributeValue"


def test_order_within_a_group_and_groups_in_flight(client, fifo):
    for group in ("a", "b"):
        for i in range(4):
            client.send_message(QueueUrl=fifo, MessageBody=f"{group}{i}", MessageGroupId=group)
    seen: dict[str, list[str]] = {"a": [], "b": []}
    first = client.receive_message(
        QueueUrl=fifo, MaxNumberOfMessages=2, AttributeNames=["MessageGroupId"]
    )["Messages"]
    assert len(first) == 2
    for m in first:
        seen[m["Attributes"]["MessageGroupId"]].append(m["Body"])
    busy = {m["Attributes"]["MessageGroupId"] for m in first}
    # While a group has messages in flight, none of its later messages is handed out.
    while True:
        more = client.receive_message(
            QueueUrl=fifo, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        ).get("Messages", [])
        if not more:
            break
        for m in more:
            group = m["Attributes"]["MessageGroupId"]
            assert group not in busy, f"{m['Body']} handed out while {group} was in flight"
            seen[group].append(m["Body"])
        for m in more:
            client.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    # Delete the first batch: their groups continue, in order.
    for m in first:
        client.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    while True:
        more = client.receive_message(
            QueueUrl=fifo, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        ).get("Messages", [])
        if not more:
            break
        for m in more:
            seen[m["Attributes"]["MessageGroupId"]].append(m["Body"])
            client.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    assert seen == {"a": [f"a{i}" for i in range(4)], "b": [f"b{i}" for i in range(4)]}


def test_redelivery_keeps_the_order(client, fifo):
    for i in range(3):
        client.send_message(QueueUrl=fifo, MessageBody=f"m{i}", MessageGroupId="g")
    got = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=2)["Messages"]
    assert [m["Body"] for m in got] == ["m0", "m1"]
    client.delete_message(QueueUrl=fifo, ReceiptHandle=got[0]["ReceiptHandle"])
    assert "Messages" not in client.receive_message(QueueUrl=fifo)  # m1 still in flight
    client.change_message_visibility(
        QueueUrl=fifo, ReceiptHandle=got[1]["ReceiptHandle"], VisibilityTimeout=0
    )
    again = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in again] == ["m1", "m2"]
    # A stale handle is refused on a FIFO queue.
    with pytest.raises(ClientError) as exc:
        client.delete_message(QueueUrl=fifo, ReceiptHandle=got[1]["ReceiptHandle"])
    assert code(exc) == "InvalidParameterValue"


def test_deduplication_and_sequence_numbers(client, fifo):
    one = client.send_message(QueueUrl=fifo, MessageBody="same", MessageGroupId="g")
    two = client.send_message(QueueUrl=fifo, MessageBody="same", MessageGroupId="g")
    assert one["MessageId"] == two["MessageId"]
    three = client.send_message(
        QueueUrl=fifo, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="explicit"
    )
    four = client.send_message(
        QueueUrl=fifo, MessageBody="other", MessageGroupId="g", MessageDeduplicationId="explicit"
    )
    assert three["MessageId"] == four["MessageId"] != one["MessageId"]
    assert int(one["SequenceNumber"]) < int(three["SequenceNumber"])
    got = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10, AttributeNames=["All"])[
        "Messages"
    ]
    assert [m["Body"] for m in got] == ["same", "same"]
    assert [m["Attributes"]["SequenceNumber"] for m in got] == [
        one["SequenceNumber"],
        three["SequenceNumber"],
    ]
    assert got[1]["Attributes"]["MessageDeduplicationId"] == "explicit"
    batch = client.send_message_batch(
        QueueUrl=fifo,
        Entries=[
            {"Id": "x", "MessageBody": "b1", "MessageGroupId": "h"},
            {"Id": "y", "MessageBody": "b2", "MessageGroupId": "h"},
        ],
    )
    assert [s["Id"] for s in batch["Successful"]] == ["x", "y"]
    assert all("SequenceNumber" in s for s in batch["Successful"])


def test_fifo_rules(client):
    url = client.create_queue(QueueName="strict.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert code(exc) == "InvalidParameterValue"  # no dedup id, no content dedup
    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert code(exc) == "MissingParameter"  # no group
    with pytest.raises(ClientError) as exc:
        client.send_message(
            QueueUrl=url,
            MessageBody="x",
            MessageGroupId="g",
            MessageDeduplicationId="d",
            DelaySeconds=5,
        )
    assert code(exc) == "InvalidParameterValue"
    standard = client.create_queue(QueueName="std")["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d")
    assert code(exc) == "InvalidParameterValue"
    dlq = client.create_queue(QueueName="std-dlq")["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    with pytest.raises(ClientError) as exc:
        client.set_queue_attributes(
            QueueUrl=url,
            Attributes={"RedrivePolicy": '{"deadLetterTargetArn":"%s","maxReceiveCount":1}' % arn},
        )
    assert code(exc) == "InvalidParameterValue"  # a FIFO queue needs a FIFO dead-letter queue

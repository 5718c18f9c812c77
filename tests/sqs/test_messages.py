"""Sending, receiving, deleting and visibility through boto3, on both protocols
and both backends. boto3 checks every MD5 digest the server answers."""

from __future__ import annotations

import threading
import time

import pytest
from botocore.exceptions import ClientError

from tests.support import wait_until


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


@pytest.fixture
def queue(client):
    return client.create_queue(QueueName="work")["QueueUrl"]


def test_send_receive_delete_with_attributes(client, queue):
    sent = client.send_message(
        QueueUrl=queue,
        MessageBody='héllo <world> & "friends"\n\t☃ 𝄞',
        MessageAttributes={
            "colour": {"DataType": "String", "StringValue": "blue"},
            "count": {"DataType": "Number", "StringValue": "-12.5e3"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
            "custom": {"DataType": "String.custom", "StringValue": "x"},
        },
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"}
        },
    )
    assert sent["MD5OfMessageAttributes"] and sent["MD5OfMessageSystemAttributes"]
    before = int(time.time() * 1000)
    got = client.receive_message(
        QueueUrl=queue,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],  # the query protocol's model knows only this name
    )["Messages"]
    assert len(got) == 1
    message = got[0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == 'héllo <world> & "friends"\n\t☃ 𝄞'
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == b"\x00\x01\xff"
    assert message["MessageAttributes"]["count"] == {"DataType": "Number", "StringValue": "-12.5e3"}
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    attributes = message["Attributes"]
    assert attributes["ApproximateReceiveCount"] == "1"
    assert attributes["AWSTraceHeader"] == "Root=1-abc"
    assert abs(int(attributes["SentTimestamp"]) - before) < 60_000
    assert abs(int(attributes["ApproximateFirstReceiveTimestamp"]) - before) < 60_000
    assert attributes["SenderId"] == client._request_signer._credentials.access_key
    client.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    assert "Messages" not in client.receive_message(QueueUrl=queue)


def test_attribute_selection(client, queue):
    client.send_message(
        QueueUrl=queue,
        MessageBody="x",
        MessageAttributes={
            "app.one": {"DataType": "String", "StringValue": "1"},
            "app.two": {"DataType": "String", "StringValue": "2"},
            "other": {"DataType": "String", "StringValue": "3"},
        },
    )
    message = client.receive_message(
        QueueUrl=queue, MessageAttributeNames=["app.*"], AttributeNames=["SentTimestamp"]
    )["Messages"][0]
    assert set(message["MessageAttributes"]) == {"app.one", "app.two"}
    assert set(message["Attributes"]) == {"SentTimestamp"}


def test_batches_with_partial_failures(client, queue):
    sent = client.send_message_batch(
        QueueUrl=queue,
        Entries=[{"Id": f"e{i}", "MessageBody": f"body {i}"} for i in range(9)]
        + [{"Id": "bad", "MessageBody": "\x00 not allowed"}],
    )
    assert sorted(s["Id"] for s in sent["Successful"]) == sorted(f"e{i}" for i in range(9))
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in sent["Failed"]] == [
        ("bad", "InvalidMessageContents", True)
    ]
    received = []
    while len(received) < 9:
        page = client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)
        received += page.get("Messages", [])
    assert sorted(m["Body"] for m in received) == sorted(f"body {i}" for i in range(9))
    entries = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)]
    entries.append({"Id": "nope", "ReceiptHandle": "1-" + "0" * 32 + "-zz"})
    deleted = client.delete_message_batch(QueueUrl=queue, Entries=entries)
    assert len(deleted["Successful"]) == 9
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("nope", "ReceiptHandleIsInvalid")]
    attributes = client.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


@pytest.mark.parametrize(
    "entries, expected",
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "same", "MessageBody": "x"}] * 2,
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "bad id!", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ],
)
def test_batch_limits(client, queue, entries, expected):
    with pytest.raises(ClientError) as exc:
        client.send_message_batch(QueueUrl=queue, Entries=entries)
    assert code(exc) == expected


def test_batch_total_size(client):
    queue = client.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]
    # Each message is held to the queue's MaximumMessageSize; the batch as a
    # whole to the service's (1 MiB), as SQS does.
    sent = client.send_message_batch(
        QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": "x" * 600} for i in range(2)]
    )
    assert len(sent["Successful"]) == 2
    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=queue, MessageBody="y" * 1025)
    assert code(exc) == "InvalidParameterValue"


@pytest.mark.parametrize(
    "attributes",
    [
        {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)},
        {"AWS.reserved": {"DataType": "String", "StringValue": "v"}},
        {"bad..name": {"DataType": "String", "StringValue": "v"}},
        {"n": {"DataType": "Number", "StringValue": "twelve"}},
        {"t": {"DataType": "Text", "StringValue": "v"}},
        {"e": {"DataType": "String", "StringValue": ""}},
    ],
)
def test_bad_message_attributes(client, queue, attributes):
    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=queue, MessageBody="x", MessageAttributes=attributes)
    assert code(exc) == "InvalidParameterValue"


def test_receive_limits(client, queue):
    for value in (0, 11):
        with pytest.raises(ClientError) as exc:
            client.receive_message(QueueUrl=queue, MaxNumberOfMessages=value)
        assert code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        client.receive_message(QueueUrl=queue, WaitTimeSeconds=21)
    assert code(exc) == "InvalidParameterValue"


def test_visibility_and_redelivery(client, queue):
    client.send_message(QueueUrl=queue, MessageBody="again")
    first = client.receive_message(QueueUrl=queue, VisibilityTimeout=30)["Messages"][0]
    assert "Messages" not in client.receive_message(QueueUrl=queue)
    # Visible again at once, with one more receive counted.
    client.change_message_visibility(
        QueueUrl=queue, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    second = client.receive_message(QueueUrl=queue, VisibilityTimeout=1, AttributeNames=["All"])[
        "Messages"
    ][0]
    assert second["MessageId"] == first["MessageId"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # The 1 s visibility timeout ends by itself.
    third = wait_until(
        lambda: client.receive_message(QueueUrl=queue, AttributeNames=["All"]).get("Messages"),
        timeout=15,
        what="the message to become visible again",
    )[0]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    assert (
        third["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == second["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )
    # A stale receipt cannot change visibility; on a standard queue its delete
    # succeeds (as in SQS) but leaves the message.
    with pytest.raises(ClientError) as exc:
        client.change_message_visibility(
            QueueUrl=queue, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=10
        )
    assert code(exc) == "InvalidParameterValue"
    client.delete_message(QueueUrl=queue, ReceiptHandle=first["ReceiptHandle"])
    client.change_message_visibility(
        QueueUrl=queue, ReceiptHandle=third["ReceiptHandle"], VisibilityTimeout=0
    )
    fourth = client.receive_message(QueueUrl=queue)["Messages"][0]
    assert fourth["MessageId"] == first["MessageId"]
    client.delete_message(QueueUrl=queue, ReceiptHandle=fourth["ReceiptHandle"])
    with pytest.raises(ClientError) as exc:
        client.delete_message(QueueUrl=queue, ReceiptHandle="garbage")
    assert code(exc) == "ReceiptHandleIsInvalid"


def test_change_visibility_batch(client, queue):
    client.send_message_batch(
        QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)]
    )
    got = []
    while len(got) < 3:
        got += client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    result = client.change_message_visibility_batch(
        QueueUrl=queue,
        Entries=[
            {"Id": "zero", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "long", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 600},
            {"Id": "bad", "ReceiptHandle": "x", "VisibilityTimeout": 5},
        ],
    )
    assert sorted(s["Id"] for s in result["Successful"]) == ["long", "zero"]
    assert [f["Id"] for f in result["Failed"]] == ["bad"]
    again = client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert [m["MessageId"] for m in again] == [got[0]["MessageId"]]


def test_long_poll_wakes_on_send(client, sqs, queue):
    other = sqs.client()
    answers = {}

    def receive():
        started = time.monotonic()
        answers["got"] = client.receive_message(QueueUrl=queue, WaitTimeSeconds=10)
        answers["took"] = time.monotonic() - started

    waiter = threading.Thread(target=receive)
    waiter.start()
    wait_until(lambda: sqs.app.registry.queuey.long_polls.waiting == 1, what="the receive to wait")
    other.send_message(QueueUrl=queue, MessageBody="wake up")
    waiter.join(timeout=30)
    assert [m["Body"] for m in answers["got"]["Messages"]] == ["wake up"]
    assert answers["took"] < 5


def test_long_poll_times_out_empty(client, queue):
    started = time.monotonic()
    assert "Messages" not in client.receive_message(QueueUrl=queue, WaitTimeSeconds=1)
    assert 0.9 <= time.monotonic() - started < 5


def test_delay(client, queue):
    client.send_message(QueueUrl=queue, MessageBody="later", DelaySeconds=2)
    client.send_message(QueueUrl=queue, MessageBody="now")
    assert [m["Body"] for m in client.receive_message(QueueUrl=queue)["Messages"]] == ["now"]
    attributes = client.get_queue_attributes(
        QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"
    later = wait_until(
        lambda: client.receive_message(QueueUrl=queue, AttributeNames=["SentTimestamp"]).get(
            "Messages"
        ),
        timeout=15,
        what="the delayed message",
    )
    assert later[0]["Body"] == "later"


def test_dead_letters_and_move_task(client, queue):
    dead = client.create_queue(QueueName="work-dlq")["QueueUrl"]
    dead_arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    policy = '{"deadLetterTargetArn":"%s","maxReceiveCount":2}' % dead_arn
    client.set_queue_attributes(QueueUrl=queue, Attributes={"RedrivePolicy": policy})
    assert (
        client.get_queue_attributes(QueueUrl=queue, AttributeNames=["RedrivePolicy"])["Attributes"][
            "RedrivePolicy"
        ]
        == policy
    )
    assert client.list_dead_letter_source_queues(QueueUrl=dead)["queueUrls"] == [queue]
    client.send_message(
        QueueUrl=queue,
        MessageBody="poison",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "bad"}},
    )
    for _ in range(2):
        got = client.receive_message(QueueUrl=queue)["Messages"][0]
        client.change_message_visibility(
            QueueUrl=queue, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in client.receive_message(QueueUrl=queue)
    letter = wait_until(
        lambda: client.receive_message(
            QueueUrl=dead, MessageAttributeNames=["All"], AttributeNames=["All"]
        ).get("Messages"),
        what="the dead letter",
    )[0]
    assert letter["Body"] == "poison"
    assert letter["MessageAttributes"]["kind"]["StringValue"] == "bad"
    assert letter["Attributes"]["DeadLetterQueueSourceArn"].endswith(":work")
    client.change_message_visibility(
        QueueUrl=dead, ReceiptHandle=letter["ReceiptHandle"], VisibilityTimeout=0
    )
    # The dead letter is readable as soon as it is stored, a moment before its
    # source is finished with it (its claim acknowledged): a move in between
    # leaves it where it is. Start the move once the source holds nothing in flight.
    wait_until(
        lambda: (
            client.get_queue_attributes(
                QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
            )["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
            == "0"
        ),
        what="the source to finish dead-lettering",
    )
    handle = client.start_message_move_task(SourceArn=dead_arn)["TaskHandle"]
    task = wait_until(
        lambda: [
            t
            for t in client.list_message_move_tasks(SourceArn=dead_arn)["Results"]
            if t["Status"] != "RUNNING"
        ],
        what="the move task to finish",
    )[0]
    assert task["TaskHandle"] == handle
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 1
    back = client.receive_message(QueueUrl=queue, MessageAttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in back] == ["poison"]
    with pytest.raises(ClientError) as exc:
        client.cancel_message_move_task(TaskHandle=handle)
    assert code(exc) == "InvalidParameterValue"


def test_move_task_to_a_destination_and_cancel(client):
    source = client.create_queue(QueueName="from")["QueueUrl"]
    target = client.create_queue(QueueName="to")["QueueUrl"]
    arns = [
        client.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for u in (source, target)
    ]
    client.send_message_batch(
        QueueUrl=source, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)]
    )
    client.start_message_move_task(
        SourceArn=arns[0], DestinationArn=arns[1], MaxNumberOfMessagesPerSecond=100
    )
    task = wait_until(
        lambda: [
            t
            for t in client.list_message_move_tasks(SourceArn=arns[0])["Results"]
            if t["Status"] != "RUNNING"
        ],
        what="the move",
    )[0]
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 5)
    assert task["DestinationArn"] == arns[1]
    moved = []
    while len(moved) < 5:
        moved += client.receive_message(QueueUrl=target, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(m["Body"] for m in moved) == [f"m{i}" for i in range(5)]
    # A slow task can be cancelled.
    client.send_message_batch(
        QueueUrl=source, Entries=[{"Id": str(i), "MessageBody": f"n{i}"} for i in range(10)]
    )
    handle = client.start_message_move_task(
        SourceArn=arns[0], DestinationArn=arns[1], MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    client.cancel_message_move_task(TaskHandle=handle)
    task = wait_until(
        lambda: [
            t
            for t in client.list_message_move_tasks(SourceArn=arns[0])["Results"]
            if t["Status"] not in ("RUNNING", "CANCELLING")
        ],
        what="the cancellation",
    )[0]
    assert task["Status"] == "CANCELLED"
    assert task["ApproximateNumberOfMessagesMoved"] < 10


def test_move_task_needs_a_dead_letter_queue(client, queue):
    arn = client.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    with pytest.raises(ClientError) as exc:
        client.start_message_move_task(SourceArn=arn)
    assert code(exc) == "InvalidParameterValue"


def test_binary_base64_on_the_wire(client, queue):
    raw = bytes(range(256))
    client.send_message(
        QueueUrl=queue,
        MessageBody="b",
        MessageAttributes={"raw": {"DataType": "Binary.image", "BinaryValue": raw}},
    )
    got = client.receive_message(QueueUrl=queue, MessageAttributeNames=["raw"])["Messages"][0]
    assert got["MessageAttributes"]["raw"] == {"DataType": "Binary.image", "BinaryValue": raw}

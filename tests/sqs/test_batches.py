"""SQS's batch actions refuse a whole request before looking at any entry, in
Amazon's order: no entries (``EmptyBatchRequest``), more than 10
(``TooManyEntriesInBatchRequest``), an entry id that is not one
(``InvalidBatchEntryId``) or repeated (``BatchEntryIdsNotDistinct``), and for
SendMessageBatch the total length of its entries (``BatchRequestTooLong``);
only then does each entry fail or succeed on its own. Through boto3, on both
protocols and both backends; the codes and texts are Amazon's (the query code
is what boto3 reports as ``Error.Code``)."""

from __future__ import annotations

import base64

import pytest
from botocore.exceptions import ClientError

MIB = 1_048_576
TOO_LONG = "AWS.SimpleQueueService.BatchRequestTooLong"
TOO_MANY = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
NOT_DISTINCT = "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
BAD_ID = "AWS.SimpleQueueService.InvalidBatchEntryId"
BAD_ID_TEXT = (
    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
    "It can be at most 80 letters long."
)


def refused(call, **kwargs) -> tuple[str, str]:
    with pytest.raises(ClientError) as exc:
        call(**kwargs)
    return exc.value.response["Error"]["Code"], exc.value.response["Error"]["Message"]


def too_long(total: int) -> tuple[str, str]:
    return (
        TOO_LONG,
        f"Batch requests cannot be longer than {MIB} bytes. You have sent {total} bytes.",
    )


def nothing_stored(client, url: str) -> bool:
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return got["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_one_entry_over_a_mebibyte_refuses_the_whole_batch(client):
    url = client.create_queue(QueueName="one-big")["QueueUrl"]
    entries = [{"Id": "big", "MessageBody": "x" * (MIB + 1)}]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=entries) == too_long(MIB + 1)
    # Even on a queue whose MaximumMessageSize the entry would fail on its own.
    small = client.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})
    assert refused(
        client.send_message_batch, QueueUrl=small["QueueUrl"], Entries=entries
    ) == too_long(MIB + 1)
    assert nothing_stored(client, url) and nothing_stored(client, small["QueueUrl"])


def test_the_total_counts_entries_that_would_fail_on_their_own(client):
    url = client.create_queue(QueueName="mixed")["QueueUrl"]
    half = 600 * 1024
    entries = [
        {"Id": "ok", "MessageBody": "a" * half},
        {"Id": "late", "MessageBody": "b" * half, "DelaySeconds": 901},
    ]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=entries) == too_long(2 * half)
    assert nothing_stored(client, url)
    # Under the total, the same bad entry fails alone and the other is sent.
    entries[0]["MessageBody"] = "a" * 10
    sent = client.send_message_batch(QueueUrl=url, Entries=entries)
    assert [s["Id"] for s in sent["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in sent["Failed"]] == [("late", "InvalidParameterValue")]


def test_the_total_counts_message_attributes_as_sqs_does(client):
    url = client.create_queue(QueueName="attributed")["QueueUrl"]
    raw = b"\x00\x01" * 8  # 16 bytes, counted decoded
    attributes = {
        "colour": {"DataType": "String", "StringValue": "x" * 10},  # 6 + 6 + 10
        "blob": {"DataType": "Binary", "BinaryValue": raw},  # 4 + 6 + 16
    }
    body = MIB - 40
    entries = [{"Id": "one", "MessageBody": "z" * body, "MessageAttributes": attributes}]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=entries) == too_long(
        body + 22 + 26
    )
    entries[0]["MessageBody"] = "z" * (MIB - 48)
    sent = client.send_message_batch(QueueUrl=url, Entries=entries)
    assert [s["Id"] for s in sent["Successful"]] == ["one"]
    message = client.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert len(message["Body"]) == MIB - 48
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == raw
    assert base64.b64encode(raw)  # the wire carried it as base64; the length counts bytes


def test_the_batch_rules_before_the_total(client):
    url = client.create_queue(QueueName="ordered")["QueueUrl"]
    big = "y" * (MIB // 9)  # 10 of them are over the total, 11 within the request's body limit
    eleven = [{"Id": f"e{i}", "MessageBody": big} for i in range(11)]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=eleven) == (
        TOO_MANY,
        "Maximum number of entries per request are 10. You have sent 11.",
    )
    twice = [{"Id": f"e{i}", "MessageBody": big} for i in range(9)] + [
        {"Id": "e3", "MessageBody": big}
    ]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=twice) == (
        NOT_DISTINCT,
        "Id e3 repeated.",
    )
    bad = [{"Id": f"e{i}", "MessageBody": big} for i in range(9)] + [
        {"Id": "not ok", "MessageBody": big}
    ]
    assert refused(client.send_message_batch, QueueUrl=url, Entries=bad) == (BAD_ID, BAD_ID_TEXT)
    assert nothing_stored(client, url)


@pytest.mark.parametrize("action", ["delete_message_batch", "change_message_visibility_batch"])
def test_the_settling_batches_refuse_as_sqs_does_before_any_entry(client, action):
    url = client.create_queue(QueueName="settled")["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="m")
    handle = client.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0][
        "ReceiptHandle"
    ]
    call = getattr(client, action)

    def entry(entry_id: str, receipt: str = handle) -> dict:
        made = {"Id": entry_id, "ReceiptHandle": receipt}
        if action == "change_message_visibility_batch":
            made["VisibilityTimeout"] = 0
        return made

    eleven = [entry(f"e{i}") for i in range(10)] + [entry("e0")]  # a repeat among 11
    assert refused(call, QueueUrl=url, Entries=eleven) == (
        TOO_MANY,
        "Maximum number of entries per request are 10. You have sent 11.",
    )
    assert refused(call, QueueUrl=url, Entries=[entry("a"), entry("a"), entry("b!")]) == (
        NOT_DISTINCT,
        "Id a repeated.",
    )
    assert refused(call, QueueUrl=url, Entries=[entry("b!"), entry("a"), entry("a")]) == (
        BAD_ID,
        BAD_ID_TEXT,
    )
    assert refused(call, QueueUrl=url, Entries=[entry("x" * 81)]) == (BAD_ID, BAD_ID_TEXT)
    # None of these touched the message: it is still leased to the receive above.
    assert "Messages" not in client.receive_message(QueueUrl=url)
    done = call(QueueUrl=url, Entries=[entry("ok"), entry("bad", "nonsense")])
    assert [s["Id"] for s in done["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in done["Failed"]] == [("bad", "ReceiptHandleIsInvalid")]

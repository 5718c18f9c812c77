"""SQS as Amazon answers it, through boto3 on both protocols: CreateQueue is
idempotent, the 2025 limits (1 MiB messages), the validation SQS does, its
error codes and texts, receipt handles and visibility, attribute selection,
bare queue names and regions.

The expected codes and texts are Amazon's: from the SQS API reference and the
error answers Amazon's endpoint gives (the query code is what boto3 reports as
``Error.Code`` on both protocols, read from ``x-amzn-query-error`` on JSON).
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.sqs.conftest import botocore_session
from tests.support import SQS_SECRET

MIB = 1_048_576


def refused(call, *args, **kwargs) -> tuple[str, str]:
    """The code and message of the error ``call`` answers."""
    with pytest.raises(ClientError) as exc:
        call(*args, **kwargs)
    return exc.value.response["Error"]["Code"], exc.value.response["Error"]["Message"]


@pytest.fixture
def loose(sqs):
    """A client that sends what boto3 would refuse to (empty lists and maps)."""
    return sqs.client(parameter_validation=False)


def client_in(sqs, region: str):
    made = boto3.session.Session(
        aws_access_key_id=sqs.application,
        aws_secret_access_key=SQS_SECRET,
        region_name=region,
        botocore_session=botocore_session(sqs.protocol),
    ).client("sqs", endpoint_url=sqs.url, config=Config(retries={"max_attempts": 0}))
    sqs.clients.append(made)
    return made


# -- 1. CreateQueue is idempotent --------------------------------------------------
def test_create_queue_again_with_the_same_attributes_answers_its_url(client):
    dead = client.create_queue(QueueName="dead")["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    attributes = {
        "VisibilityTimeout": "60",
        "DelaySeconds": "0",
        # maxReceiveCount as a string, keys in another order: the same policy.
        "RedrivePolicy": json.dumps({"maxReceiveCount": "5", "deadLetterTargetArn": arn}),
        "Policy": "",
    }
    url = client.create_queue(QueueName="jobs", Attributes=attributes)["QueueUrl"]
    assert client.create_queue(QueueName="jobs", Attributes=attributes)["QueueUrl"] == url
    # Attributes not given are not compared, nor are defaults the caller never set.
    assert client.create_queue(QueueName="jobs")["QueueUrl"] == url
    assert client.create_queue(QueueName="plain")["QueueUrl"].endswith("/plain")
    assert client.create_queue(
        QueueName="plain", Attributes={"VisibilityTimeout": "30", "MaximumMessageSize": str(MIB)}
    )["QueueUrl"].endswith("/plain")
    # A value SQS refuses is refused as such, the queue existing or not.
    assert refused(
        client.create_queue, QueueName="jobs", Attributes={"VisibilityTimeout": "soon"}
    ) == ("InvalidAttributeValue", "Invalid value for the parameter VisibilityTimeout.")
    # Only a different value of an attribute that was given is a conflict.
    assert refused(
        client.create_queue, QueueName="jobs", Attributes={"VisibilityTimeout": "61"}
    ) == (
        "QueueAlreadyExists",
        "A queue already exists with the same name and a different value for attribute "
        "VisibilityTimeout",
    )


# -- 2. The 2025 limits --------------------------------------------------------------
def test_a_message_may_be_one_mebibyte(client):
    url = client.create_queue(QueueName="big")["QueueUrl"]
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    assert got["Attributes"]["MaximumMessageSize"] == str(MIB)
    client.send_message(QueueUrl=url, MessageBody="x" * MIB)
    message = client.receive_message(QueueUrl=url)["Messages"][0]
    assert len(message["Body"]) == MIB
    assert refused(client.send_message, QueueUrl=url, MessageBody="x" * (MIB + 1)) == (
        "InvalidParameterValue",
        f"One or more parameters are invalid. Reason: Message must be shorter than {MIB} bytes.",
    )
    assert refused(
        client.set_queue_attributes,
        QueueUrl=url,
        Attributes={"MaximumMessageSize": str(MIB + 1)},
    ) == ("InvalidAttributeValue", "Invalid value for the parameter MaximumMessageSize.")
    client.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    assert refused(client.send_message, QueueUrl=url, MessageBody="y" * 1025) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
    )


def test_a_batch_is_limited_to_one_mebibyte_in_all(client):
    url = client.create_queue(QueueName="batch")["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": "z" * (MIB // 2)} for i in range(3)]
    total = 3 * (MIB // 2)
    assert refused(client.send_message_batch, QueueUrl=url, Entries=entries) == (
        "AWS.SimpleQueueService.BatchRequestTooLong",
        f"Batch requests cannot be longer than {MIB} bytes. You have sent {total} bytes.",
    )
    assert "Messages" not in client.receive_message(QueueUrl=url)


# -- 3. Validation SQS does ---------------------------------------------------------
def test_fifo_sends_need_a_group_and_a_deduplication_id(client):
    url = client.create_queue(QueueName="orders.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    assert refused(client.send_message, QueueUrl=url, MessageBody="a") == (
        "MissingParameter",
        "The request must contain the parameter MessageGroupId.",
    )
    no_dedup = (
        "InvalidParameterValue",
        "The queue should either have ContentBasedDeduplication enabled or "
        "MessageDeduplicationId provided explicitly",
    )
    assert refused(client.send_message, QueueUrl=url, MessageBody="a", MessageGroupId="g") == (
        no_dedup
    )
    # In a batch, one such entry refuses the whole request, as SQS does.
    good = {"Id": "ok", "MessageBody": "b", "MessageGroupId": "g", "MessageDeduplicationId": "1"}
    assert refused(
        client.send_message_batch,
        QueueUrl=url,
        Entries=[good, {"Id": "nogroup", "MessageBody": "c", "MessageDeduplicationId": "2"}],
    ) == ("InvalidParameterValue", "The request must contain the parameter MessageGroupId.")
    assert (
        refused(
            client.send_message_batch,
            QueueUrl=url,
            Entries=[good, {"Id": "nodedup", "MessageBody": "c", "MessageGroupId": "g"}],
        )
        == no_dedup
    )
    assert "Messages" not in client.receive_message(QueueUrl=url)
    assert refused(
        client.send_message,
        QueueUrl=url,
        MessageBody="d",
        MessageGroupId="g",
        MessageDeduplicationId="3",
        DelaySeconds=5,
    ) == (
        "InvalidParameterValue",
        "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter "
        "that is not valid for this queue type.",
    )


def test_delay_seconds_out_of_range(client):
    url = client.create_queue(QueueName="later")["QueueUrl"]
    text = (
        "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 "
        "and <= 900."
    )
    assert refused(client.send_message, QueueUrl=url, MessageBody="a", DelaySeconds=901) == (
        "InvalidParameterValue",
        text,
    )
    # Each batch entry is judged on its own: the rest are sent.
    answer = client.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "late", "MessageBody": "b", "DelaySeconds": 901},
            {"Id": "now", "MessageBody": "c"},
        ],
    )
    assert [s["Id"] for s in answer["Successful"]] == ["now"]
    assert answer["Failed"] == [
        {"Id": "late", "SenderFault": True, "Code": "InvalidParameterValue", "Message": text}
    ]
    assert [m["Body"] for m in client.receive_message(QueueUrl=url)["Messages"]] == ["c"]


def test_tags_and_untags_need_something(loose):
    url = loose.create_queue(QueueName="tagged")["QueueUrl"]
    assert refused(loose.tag_queue, QueueUrl=url, Tags={}) == (
        "MissingParameter",
        "The request must contain the parameter Tags.",
    )
    assert refused(loose.untag_queue, QueueUrl=url, TagKeys=[]) == (
        "MissingParameter",
        "The request must contain the parameter TagKeys.",
    )


def test_queue_attribute_bounds_and_dead_letter_targets(client):
    for retention in ("59", "1209601", "", "6.5"):
        assert refused(
            client.create_queue,
            QueueName="kept",
            Attributes={"MessageRetentionPeriod": retention},
        ) == ("InvalidAttributeValue", "Invalid value for the parameter MessageRetentionPeriod.")
    for retention in ("60", "1209600"):
        url = client.create_queue(
            QueueName=f"kept{retention}", Attributes={"MessageRetentionPeriod": retention}
        )["QueueUrl"]
        got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert got["MessageRetentionPeriod"] == retention
    arn = got["QueueArn"].rsplit(":", 1)[0] + ":nowhere"
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})
    assert refused(
        client.create_queue, QueueName="source", Attributes={"RedrivePolicy": policy}
    ) == (
        "InvalidParameterValue",
        f"Value {policy} for parameter RedrivePolicy is invalid. Reason: Dead letter target "
        "does not exist.",
    )


def test_empty_batches(loose):
    url = loose.create_queue(QueueName="empty")["QueueUrl"]
    for call, entry in (
        (loose.send_message_batch, "SendMessageBatchRequestEntry"),
        (loose.delete_message_batch, "DeleteMessageBatchRequestEntry"),
        (loose.change_message_visibility_batch, "ChangeMessageVisibilityBatchRequestEntry"),
    ):
        assert refused(call, QueueUrl=url, Entries=[]) == (
            "AWS.SimpleQueueService.EmptyBatchRequest",
            f"There should be at least one {entry} in the request.",
        )


# -- 4. Codes and texts ----------------------------------------------------------------
def test_invalid_queue_names(client):
    for name in ("has space", "x" * 81, "dot.ted", "ends.fifo"):
        assert refused(client.create_queue, QueueName=name) == (
            "InvalidParameterValue",
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        )
    for name in ("nofifo", "x" * 76 + ".fifo"):
        assert refused(client.create_queue, QueueName=name, Attributes={"FifoQueue": "true"}) == (
            "InvalidParameterValue",
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
            "underscores, must end with .fifo suffix and be 1 to 80 in length",
        )


@pytest.mark.parametrize(
    "name, spec, text",
    [
        (
            "AWS.thing",
            {"DataType": "String", "StringValue": "v"},
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. These "
            "strings are reserved for internal use.",
        ),
        (
            ".lead",
            {"DataType": "String", "StringValue": "v"},
            "Message (user) attribute name must not begin with character '.'.",
        ),
        (
            "trail.",
            {"DataType": "String", "StringValue": "v"},
            "Message (user) attribute name must not end with character '.'.",
        ),
        (
            "two..dots",
            {"DataType": "String", "StringValue": "v"},
            "Message (user) attribute name must not have successive '.' characters.",
        ),
        (
            "sp ace",
            {"DataType": "String", "StringValue": "v"},
            "Invalid non-alphanumeric character '#x20' was found in the message attribute "
            "name. Can only include alphanumeric characters, hyphens, underscores, or dots.",
        ),
        (
            "typed",
            {"DataType": "Text", "StringValue": "v"},
            "The type of message (user) attribute 'typed' is invalid. You must use only the "
            "following supported type prefixes: Binary, Number, String.",
        ),
        (
            "blank",
            {"DataType": "String", "StringValue": ""},
            "Message (user) attribute 'blank' must contain a non-empty value of type 'String'.",
        ),
        (
            "count",
            {"DataType": "Number", "StringValue": "ten"},
            "Can't cast the value of message (user) attribute 'count' to a number.",
        ),
    ],
)
def test_invalid_message_attributes(loose, name, spec, text):
    url = loose.create_queue(QueueName="attrs")["QueueUrl"]
    assert refused(
        loose.send_message, QueueUrl=url, MessageBody="m", MessageAttributes={name: spec}
    ) == ("InvalidParameterValue", text)


def test_invalid_receipt_handles_and_batch_ids(client):
    url = client.create_queue(QueueName="handles")["QueueUrl"]
    text = 'The input receipt handle "nonsense" is not a valid receipt handle.'
    assert refused(client.delete_message, QueueUrl=url, ReceiptHandle="nonsense") == (
        "ReceiptHandleIsInvalid",
        text,
    )
    assert refused(
        client.change_message_visibility,
        QueueUrl=url,
        ReceiptHandle="nonsense",
        VisibilityTimeout=5,
    ) == ("ReceiptHandleIsInvalid", text)
    answer = client.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "nonsense"}]
    )
    assert answer["Failed"] == [
        {"Id": "a", "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": text}
    ]
    assert refused(
        client.send_message_batch, QueueUrl=url, Entries=[{"Id": "no:colons", "MessageBody": "m"}]
    ) == (
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
        "It can be at most 80 letters long.",
    )
    assert refused(
        client.send_message_batch,
        QueueUrl=url,
        Entries=[{"Id": "same", "MessageBody": "m"}, {"Id": "same", "MessageBody": "n"}],
    ) == ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id same repeated.")


def test_a_missing_queue_is_worded_per_protocol(client, sqs):
    expected = {
        "json": "The specified queue does not exist.",
        "query": "The specified queue does not exist for this wsdl version.",
    }
    assert refused(client.get_queue_url, QueueName="absent") == (
        "AWS.SimpleQueueService.NonExistentQueue",
        expected[sqs.protocol],
    )


# -- 5. Receipt handles and visibility ---------------------------------------------------
def test_an_old_receipt_handle_after_a_new_receive(client):
    url = client.create_queue(QueueName="again", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="m")
    first = client.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]
    second = client.receive_message(QueueUrl=url)["Messages"][0]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # SQS: deleting with an older handle succeeds, and the message may stay.
    client.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert refused(
        client.change_message_visibility,
        QueueUrl=url,
        ReceiptHandle=first["ReceiptHandle"],
        VisibilityTimeout=0,
    ) == (
        "InvalidParameterValue",
        f"Value {first['ReceiptHandle']} for parameter ReceiptHandle is invalid. Reason: "
        "Message does not exist or is not available for visibility timeout change.",
    )
    # The newest handle still holds the message, and deletes it.
    client.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    client.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 0}],
    )
    assert "Messages" not in client.receive_message(QueueUrl=url)


# -- 6. Attributes, names, regions --------------------------------------------------------
def test_an_empty_policy_removes_it(client):
    policy = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage"}],
        }
    )
    url = client.create_queue(QueueName="guarded", Attributes={"Policy": policy})["QueueUrl"]
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    assert json.loads(got["Attributes"]["Policy"]) == json.loads(policy)
    client.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Attributes" not in client.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])


def test_message_attribute_names_with_wildcards(client):
    url = client.create_queue(QueueName="picky")["QueueUrl"]
    names = ("Custom", "Custom1", "Custom.a", "Other")
    client.send_message(
        QueueUrl=url,
        MessageBody="m",
        MessageAttributes={n: {"DataType": "String", "StringValue": n} for n in names},
    )
    cases = {
        ("Custom.*",): {"Custom", "Custom1", "Custom.a"},
        ("Custom.a",): {"Custom.a"},
        ("Other", "Custom"): {"Other", "Custom"},
        (".*",): set(names),
        ("All",): set(names),
        ("Nothing",): set(),
    }
    for wanted, expected in cases.items():
        message = client.receive_message(
            QueueUrl=url, MessageAttributeNames=list(wanted), VisibilityTimeout=0
        )["Messages"][0]
        assert set(message.get("MessageAttributes", {})) == expected, wanted


def test_a_bare_queue_name_is_a_queue_url(client):
    url = client.create_queue(QueueName="bare")["QueueUrl"]
    client.send_message(QueueUrl="bare", MessageBody="by name")
    message = client.receive_message(QueueUrl="bare")["Messages"][0]
    assert message["Body"] == "by name"
    client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert refused(client.send_message, QueueUrl="absent", MessageBody="x")[0] == (
        "AWS.SimpleQueueService.NonExistentQueue"
    )


def test_queues_are_regional(sqs, client):
    west = client_in(sqs, "eu-west-1")
    url = west.create_queue(QueueName="regional")["QueueUrl"]
    west.send_message(QueueUrl=url, MessageBody="in Ireland")
    home = client.create_queue(QueueName="regional")["QueueUrl"]
    assert home == url  # the same URL names each region's own queue
    assert "Messages" not in client.receive_message(QueueUrl=home)
    assert west.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "in Ireland"
    only_west = west.create_queue(QueueName="westonly")["QueueUrl"]
    assert only_west in west.list_queues()["QueueUrls"]
    assert only_west not in client.list_queues().get("QueueUrls", [])
    assert refused(client.get_queue_url, QueueName="westonly")[0] == (
        "AWS.SimpleQueueService.NonExistentQueue"
    )
    arn = west.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    assert arn["QueueArn"].startswith("arn:aws:sqs:eu-west-1:")


@pytest.mark.parametrize("protocol", ["json", "query"])
def test_visibility_is_capped_at_twelve_hours_from_the_receive(make_live_server, clock, protocol):
    """With the server's clock in hand: a lease whose visibility ended may still be
    changed (SQS answers success and hides the message again), and no change
    may carry the visibility past 12 hours after the receive."""
    from tests.sqs.conftest import make_client

    server = make_live_server("sqlite", **{"queuey.clock": clock})
    client = make_client(server.url, server.application, protocol)
    try:
        url = client.create_queue(QueueName="capped")["QueueUrl"]
        client.send_message(QueueUrl=url, MessageBody="m")
        handle = client.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0][
            "ReceiptHandle"
        ]
        clock.advance(61)  # the visibility ended; nobody received it since
        client.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=30)
        assert "Messages" not in client.receive_message(QueueUrl=url)
        clock.advance(539)  # 600 s after the receive
        assert refused(
            client.change_message_visibility,
            QueueUrl=url,
            ReceiptHandle=handle,
            VisibilityTimeout=43200,
        ) == (
            "InvalidParameterValue",
            "Value 43200 for parameter VisibilityTimeout is invalid. Reason: Total "
            "VisibilityTimeout for the message is beyond the limit [43200 seconds]",
        )
        answer = client.change_message_visibility_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "over", "ReceiptHandle": handle, "VisibilityTimeout": 42601},
                {"Id": "fits", "ReceiptHandle": handle, "VisibilityTimeout": 42600},
            ],
        )
        assert [s["Id"] for s in answer["Successful"]] == ["fits"]
        assert [f["Id"] for f in answer["Failed"]] == ["over"]
        assert "Messages" not in client.receive_message(QueueUrl=url)
    finally:
        client.close()


@pytest.mark.parametrize("ini", ["development.ini", "production.ini"])
def test_the_shipped_configuration_takes_sqs_largest_message(ini):
    """``make serve`` and production serve what SQS clients send since 2025: a
    1 MiB message, in a request the SQS endpoint's body limit lets through."""
    from pathlib import Path

    from pyramid.paster import get_appsettings

    from queuey.settings import load_settings
    from queuey.sqs.views import request_limit

    path = Path(__file__).resolve().parents[2] / ini
    settings = load_settings(dict(get_appsettings(str(path))), environ={})
    assert settings.max_message_size >= MIB
    # A 1 MiB body sent by the query protocol, every byte percent-escaped.
    assert request_limit(settings.max_message_size) >= 3 * MIB

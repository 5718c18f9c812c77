"""SQS queue actions through boto3, on both protocols and both backends."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def test_create_get_url_and_delete(client, sqs):
    url = client.create_queue(QueueName="orders")["QueueUrl"]
    assert url.startswith(sqs.url + "/") and url.endswith("/orders")
    account = url.split("/")[-2]
    assert len(account) == 12 and account.isdigit()
    assert client.get_queue_url(QueueName="orders")["QueueUrl"] == url
    # CreateQueue of an existing queue with the same attributes answers its URL.
    assert client.create_queue(QueueName="orders")["QueueUrl"] == url
    client.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as exc:
        client.get_queue_url(QueueName="orders")
    assert code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    assert isinstance(exc.value, client.exceptions.QueueDoesNotExist)
    with pytest.raises(client.exceptions.QueueDoesNotExist):
        client.send_message(QueueUrl=url, MessageBody="x")


def test_create_with_different_attributes_is_refused(client):
    client.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "40"})
    with pytest.raises(ClientError) as exc:
        client.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "41"})
    assert code(exc) == "QueueAlreadyExists"
    assert isinstance(exc.value, client.exceptions.QueueNameExists)
    same = client.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "40"})
    assert same["QueueUrl"].endswith("/jobs")


@pytest.mark.parametrize(
    "name", ["", "a" * 81, "has space", "dot.name", "x.fifo.no", "b" * 76 + ".fifo"]
)
def test_bad_queue_names(client, name):
    with pytest.raises(ClientError) as exc:
        client.create_queue(QueueName=name)
    assert code(exc) in ("InvalidParameterValue", "MissingParameter")


def test_list_queues_prefix_and_paging(client):
    names = [f"list-{i:02d}" for i in range(7)] + ["other-1", "lis"]
    for name in names:
        client.create_queue(QueueName=name)
    everything = client.list_queues()["QueueUrls"]
    assert sorted(u.rsplit("/", 1)[1] for u in everything) == sorted(names)
    prefixed = client.list_queues(QueueNamePrefix="list-")["QueueUrls"]
    assert [u.rsplit("/", 1)[1] for u in prefixed] == [f"list-{i:02d}" for i in range(7)]
    seen, token, pages = [], None, 0
    while True:
        kwargs = {"QueueNamePrefix": "list-", "MaxResults": 3}
        if token:
            kwargs["NextToken"] = token
        page = client.list_queues(**kwargs)
        pages += 1
        seen += [u.rsplit("/", 1)[1] for u in page.get("QueueUrls", [])]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == [f"list-{i:02d}" for i in range(7)]
    assert pages == 3
    paginated = [
        u.rsplit("/", 1)[1]
        for p in client.get_paginator("list_queues").paginate(
            QueueNamePrefix="list-", PaginationConfig={"PageSize": 2}
        )
        for u in p.get("QueueUrls", [])
    ]
    assert paginated == seen
    assert "QueueUrls" not in client.list_queues(QueueNamePrefix="nothing-")


def test_attributes_round_trip(client, sqs):
    url = client.create_queue(
        QueueName="attrs",
        Attributes={
            "VisibilityTimeout": "45",
            "DelaySeconds": "2",
            "MessageRetentionPeriod": "3600",
            "MaximumMessageSize": "2048",
            "ReceiveMessageWaitTimeSeconds": "3",
        },
    )["QueueUrl"]
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["VisibilityTimeout"] == "45"
    assert got["DelaySeconds"] == "2"
    assert got["MessageRetentionPeriod"] == "3600"
    assert got["MaximumMessageSize"] == "2048"
    assert got["ReceiveMessageWaitTimeSeconds"] == "3"
    assert got["QueueArn"] == f"arn:aws:sqs:us-east-1:{url.split('/')[-2]}:attrs"
    assert got["ApproximateNumberOfMessages"] == "0"
    assert got["ApproximateNumberOfMessagesNotVisible"] == "0"
    assert got["ApproximateNumberOfMessagesDelayed"] == "0"
    assert int(got["CreatedTimestamp"]) <= int(got["LastModifiedTimestamp"])
    assert "FifoQueue" not in got
    client.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "5", "DelaySeconds": "0"}
    )
    some = client.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"]
    )["Attributes"]
    assert some == {"VisibilityTimeout": "5", "DelaySeconds": "0"}
    # The native API sees the same queue and settings.
    info = sqs.app.registry.queuey.storage.get_queue(sqs.application, "attrs")
    assert (info.visibility_timeout, info.delay, info.ttl) == (5, 0, 3600)


@pytest.mark.parametrize(
    "attributes, expected",
    [
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"DelaySeconds": "901"}, "InvalidAttributeValue"),
        ({"MessageRetentionPeriod": "59"}, "InvalidAttributeValue"),
        ({"MaximumMessageSize": "1023"}, "InvalidAttributeValue"),
        ({"ReceiveMessageWaitTimeSeconds": "21"}, "InvalidAttributeValue"),
        ({"VisibilityTimeout": "ten"}, "InvalidAttributeValue"),
        ({"NoSuchAttribute": "1"}, "InvalidAttributeName"),
        ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
        ({"RedrivePolicy": "not json"}, "InvalidParameterValue"),
    ],
)
def test_bad_attributes(client, attributes, expected):
    url = client.create_queue(QueueName="checked")["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        client.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    assert code(exc) == expected
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_unknown_attribute_name_on_get(client):
    url = client.create_queue(QueueName="getter")["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        client.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"])
    assert code(exc) == "InvalidAttributeName"


def test_tags(client):
    url = client.create_queue(QueueName="tagged", tags={"team": "a", "env": "dev"})["QueueUrl"]
    assert client.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a", "env": "dev"}
    client.tag_queue(QueueUrl=url, Tags={"env": "prod", "cost": "42"})
    assert client.list_queue_tags(QueueUrl=url)["Tags"] == {
        "team": "a",
        "env": "prod",
        "cost": "42",
    }
    client.untag_queue(QueueUrl=url, TagKeys=["team", "cost", "absent"])
    assert client.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    client.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert "Tags" not in client.list_queue_tags(QueueUrl=url)
    with pytest.raises(ClientError) as exc:
        client.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})
    assert code(exc) == "InvalidParameterValue"


def test_purge(client):
    url = client.create_queue(QueueName="purged")["QueueUrl"]
    client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)]
    )
    client.purge_queue(QueueUrl=url)
    assert "Messages" not in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    client.send_message(QueueUrl=url, MessageBody="after")
    got = client.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["after"]


def test_redrive_policy_needs_an_existing_target(client):
    url = client.create_queue(QueueName="src")["QueueUrl"]
    account = url.split("/")[-2]
    policy = {
        "deadLetterTargetArn": f"arn:aws:sqs:us-east-1:{account}:missing",
        "maxReceiveCount": 3,
    }
    with pytest.raises(ClientError) as exc:
        client.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(policy)})
    assert code(exc) == "InvalidParameterValue"


def test_redrive_allow_policy_is_enforced(client):
    dead = client.create_queue(
        QueueName="closed-dlq",
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    with pytest.raises(ClientError) as exc:
        client.create_queue(
            QueueName="wants-dlq",
            Attributes={
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
            },
        )
    assert code(exc) == "InvalidParameterValue"

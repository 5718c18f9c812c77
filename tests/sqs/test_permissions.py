"""Sharing a queue with another application (account) through SQS's AddPermission,
RemovePermission and the queue's ``Policy``, driven by boto3 over both protocols.

The owner is the test application; the other account is the remote one, allowed
here from loopback (its usual allowlist is 10.0.0.0/8).
"""

from __future__ import annotations

import json
import threading

import pytest
from botocore.exceptions import ClientError

from queuey.applications import default_account_id
from tests.sqs.conftest import make_client
from tests.support import REMOTE_SQS_SECRET, write_applications

INVALID_POLICY = "Invalid value for the parameter Policy."


@pytest.fixture
def applications_file(tmp_path, test_apps):
    return write_applications(tmp_path / "applications.ini", test_apps, remote_on_loopback=True)


@pytest.fixture
def owner(sqs):
    return sqs.client()


@pytest.fixture
def other(sqs):
    made = make_client(sqs.url, sqs.remote_application, sqs.protocol, REMOTE_SQS_SECRET)
    sqs.clients.append(made)
    return made


@pytest.fixture
def ids(sqs) -> tuple[str, str]:
    """The owner's and the other application's account ids."""
    return default_account_id(sqs.application), default_account_id(sqs.remote_application)


def error(exc: pytest.ExceptionInfo) -> tuple[str, str, int]:
    response = exc.value.response
    return (
        response["Error"]["Code"],
        response["Error"]["Message"],
        response["ResponseMetadata"]["HTTPStatusCode"],
    )


def refused(call, **params) -> tuple[str, str, int]:
    with pytest.raises(ClientError) as exc:
        call(**params)
    return error(exc)


def denied(url: str) -> tuple[str, str, int]:
    return ("AccessDenied", f"Access to the resource {url} is denied.", 403)


def policy_of(client, url: str) -> dict | None:
    found = client.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    text = found.get("Attributes", {}).get("Policy")
    return json.loads(text) if text else None


def set_policy(client, url: str, *statements: dict) -> None:
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    client.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(document)})


def test_a_permission_lets_the_other_account_send_until_removed(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="shared")["QueueUrl"]
    assert refused(other.send_message, QueueUrl=url, MessageBody="early") == denied(url)

    owner.add_permission(
        QueueUrl=url, Label="LetSend", AWSAccountIds=[ids[1]], Actions=["SendMessage"]
    )
    other.send_message(QueueUrl=url, MessageBody="one")
    batch = other.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "two"}])
    assert [s["Id"] for s in batch["Successful"]] == ["a"]
    # Sending is all it may do.
    assert refused(other.receive_message, QueueUrl=url) == denied(url)

    got = owner.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["SenderId"]
    )["Messages"]
    if len(got) < 2:
        got += owner.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["SenderId"]
        ).get("Messages", [])
    assert sorted(m["Body"] for m in got) == ["one", "two"]
    # Each names its sender, the other application, not the queue's owner.
    assert {m["Attributes"]["SenderId"] for m in got} == {sqs.remote_application}

    owner.remove_permission(QueueUrl=url, Label="LetSend")
    assert refused(other.send_message, QueueUrl=url, MessageBody="late") == denied(url)
    assert policy_of(owner, url) is None  # the last statement took the Policy with it


def test_add_permission_writes_amazons_policy_document(sqs, owner, ids):
    url = owner.create_queue(QueueName="documented")["QueueUrl"]
    arn = owner.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    owner.add_permission(
        QueueUrl=url, Label="One", AWSAccountIds=[ids[1]], Actions=["ReceiveMessage"]
    )
    owner.add_permission(
        QueueUrl=url,
        Label="Two",
        AWSAccountIds=[ids[1], "111122223333"],
        Actions=["SendMessage", "GetQueueUrl"],
    )
    assert policy_of(owner, url) == {
        "Version": "2008-10-17",
        "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [
            {
                "Sid": "One",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ids[1]}:root"},
                "Action": "SQS:ReceiveMessage",
                "Resource": arn,
            },
            {
                "Sid": "Two",
                "Effect": "Allow",
                "Principal": {
                    "AWS": [f"arn:aws:iam::{ids[1]}:root", "arn:aws:iam::111122223333:root"]
                },
                "Action": ["SQS:SendMessage", "SQS:GetQueueUrl"],
                "Resource": arn,
            },
        ],
    }
    owner.remove_permission(QueueUrl=url, Label="One")
    assert [s["Sid"] for s in policy_of(owner, url)["Statement"]] == ["Two"]


def test_permission_requests_are_checked_as_amazon_does(sqs, owner, ids):
    url = owner.create_queue(QueueName="checked")["QueueUrl"]
    add = owner.add_permission

    def bad(label="L", accounts=(ids[1],), actions=("SendMessage",)):
        return refused(
            add, QueueUrl=url, Label=label, AWSAccountIds=list(accounts), Actions=list(actions)
        )

    invalid = "InvalidParameterValue"
    assert bad(actions=["SendMessageBatch"]) == (
        invalid,
        "Value SQS:SendMessageBatch for parameter ActionName is invalid. Reason: Please refer "
        "to the appropriate WSDL for a list of valid actions.",
        400,
    )
    assert bad(actions=["DeleteQueue"]) == (
        invalid,
        "Value SQS:DeleteQueue for parameter ActionName is invalid. Reason: Only the queue "
        "owner is allowed to invoke this action.",
        400,
    )
    assert bad(actions=[]) == (
        "MissingParameter",
        "The request must contain the parameter ActionName.",
        400,
    )
    assert bad(accounts=[]) == (
        "MissingParameter",
        "The request must contain the parameter AWSAccountIds.",
        400,
    )
    assert bad(label="") == (
        "MissingParameter",
        "The request must contain the parameter Label.",
        400,
    )
    assert bad(label="no spaces")[0] == invalid
    assert bad(label="x" * 81)[0] == invalid
    assert bad(accounts=["12345"])[0] == invalid

    add(QueueUrl=url, Label="L", AWSAccountIds=[ids[1]], Actions=["*"])
    assert bad() == (
        invalid,
        "Value L for parameter Label is invalid. Reason: Already exists.",
        400,
    )
    assert refused(owner.remove_permission, QueueUrl=url, Label="nope") == (
        invalid,
        "Value nope for parameter Label is invalid. Reason: can't find label.",
        400,
    )
    for n in range(19):
        add(QueueUrl=url, Label=f"L{n}", AWSAccountIds=[ids[1]], Actions=["SendMessage"])
    assert bad(label="L21") == (
        "OverLimit",
        "21 Statements were found, maximum allowed is 20.",
        403,
    )
    assert len(policy_of(owner, url)["Statement"]) == 20


def test_concurrent_add_permissions_all_take_effect(sqs, owner, ids):
    url = owner.create_queue(QueueName="busy")["QueueUrl"]
    clients = [sqs.client() for _ in range(6)]
    failures = []

    def add(n: int) -> None:
        try:
            clients[n].add_permission(
                QueueUrl=url, Label=f"P{n}", AWSAccountIds=[ids[1]], Actions=["SendMessage"]
            )
        except Exception as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(s["Sid"] for s in policy_of(owner, url)["Statement"]) == [
        f"P{n}" for n in range(6)
    ]


def test_deny_beats_allow(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="denying")["QueueUrl"]
    set_policy(
        owner,
        url,
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*"},
        {"Effect": "Deny", "Principal": {"AWS": ids[1]}, "Action": "sqs:SendMessage"},
    )
    assert refused(other.send_message, QueueUrl=url, MessageBody="x") == denied(url)
    assert (
        "QueueArn" in other.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    )
    # The owner's own calls never read the policy.
    owner.send_message(QueueUrl=url, MessageBody="mine")


def test_everyone_principal_and_conditions(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="open")["QueueUrl"]
    set_policy(owner, url, {"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage"})
    other.send_message(QueueUrl=url, MessageBody="from anyone")

    # A statement with a condition never allows (conditions are not evaluated) ...
    conditional = {
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": "SQS:SendMessage",
        "Condition": {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:111122223333:t"}},
    }
    set_policy(owner, url, conditional)
    assert refused(other.send_message, QueueUrl=url, MessageBody="x") == denied(url)
    # ... and a Deny with one always applies.
    set_policy(
        owner,
        url,
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage"},
        {**conditional, "Effect": "Deny"},
    )
    assert refused(other.send_message, QueueUrl=url, MessageBody="x") == denied(url)


def test_receiving_and_deleting_are_granted_separately(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="work")["QueueUrl"]
    owner.send_message(QueueUrl=url, MessageBody="job")
    owner.add_permission(
        QueueUrl=url, Label="Read", AWSAccountIds=[ids[1]], Actions=["ReceiveMessage"]
    )
    got = other.receive_message(QueueUrl=url, WaitTimeSeconds=2, VisibilityTimeout=60)
    [message] = got["Messages"]
    assert message["Body"] == "job"
    receipt = message["ReceiptHandle"]
    assert refused(other.delete_message, QueueUrl=url, ReceiptHandle=receipt) == denied(url)
    entries = [{"Id": "a", "ReceiptHandle": receipt}]
    assert refused(other.delete_message_batch, QueueUrl=url, Entries=entries) == denied(url)
    assert refused(
        other.change_message_visibility, QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0
    ) == denied(url)

    owner.add_permission(
        QueueUrl=url, Label="Settle", AWSAccountIds=[ids[1]], Actions=["DeleteMessage"]
    )
    assert other.delete_message_batch(QueueUrl=url, Entries=entries)["Successful"] == [{"Id": "a"}]
    counts = owner.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert counts["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_owner_only_actions_are_refused_even_to_everyone(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="mine", tags={"team": "a"})["QueueUrl"]
    set_policy(owner, url, {"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"})
    calls = [
        (other.set_queue_attributes, {"Attributes": {"DelaySeconds": "5"}}),
        (other.tag_queue, {"Tags": {"k": "v"}}),
        (other.untag_queue, {"TagKeys": ["team"]}),
        (other.list_queue_tags, {}),
        (
            other.add_permission,
            {"Label": "Mine", "AWSAccountIds": [ids[1]], "Actions": ["SendMessage"]},
        ),
        (other.remove_permission, {"Label": "Mine"}),
        (other.delete_queue, {}),
    ]
    for call, params in calls:
        assert refused(call, QueueUrl=url, **params) == denied(url), call
    attributes = owner.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["DelaySeconds"] == "0"
    assert owner.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    # What "*" does grant: the queue's actions, purging included.
    other.send_message(QueueUrl=url, MessageBody="x")
    other.purge_queue(QueueUrl=url)


def test_the_other_account_sees_the_owners_queue(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="visible")["QueueUrl"]
    owner.add_permission(
        QueueUrl=url, Label="Look", AWSAccountIds=[ids[1]], Actions=["GetQueueAttributes"]
    )
    mine = owner.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    theirs = other.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert theirs["QueueArn"] == mine["QueueArn"]
    assert f":{ids[0]}:visible" in theirs["QueueArn"]
    assert json.loads(theirs["Policy"])["Statement"][0]["Sid"] == "Look"


def test_get_queue_url_of_another_account(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="findable")["QueueUrl"]
    gone = (
        "AWS.SimpleQueueService.NonExistentQueue",
        "The specified queue does not exist or you do not have access to it.",
        400,
    )
    ask = other.get_queue_url
    assert refused(ask, QueueName="findable", QueueOwnerAWSAccountId=ids[0]) == gone
    owner.add_permission(
        QueueUrl=url, Label="Find", AWSAccountIds=[ids[1]], Actions=["GetQueueUrl"]
    )
    assert ask(QueueName="findable", QueueOwnerAWSAccountId=ids[0])["QueueUrl"] == url
    assert refused(ask, QueueName="missing", QueueOwnerAWSAccountId=ids[0]) == gone
    # Without the owner's id, the name is looked up in the caller's own account.
    assert refused(ask, QueueName="findable")[0] == "AWS.SimpleQueueService.NonExistentQueue"


def test_another_account_cannot_learn_whether_a_queue_exists(sqs, owner, other, ids):
    url = owner.create_queue(QueueName="secret")["QueueUrl"]
    # A policy that lets the other account send, not receive.
    owner.add_permission(
        QueueUrl=url, Label="Send", AWSAccountIds=[ids[1]], Actions=["SendMessage"]
    )
    base = url.rsplit("/", 2)[0]
    answers = {}
    for target in (url, f"{base}/{ids[0]}/no-such-queue", f"{base}/999999999999/secret"):
        for call, params in (
            (other.receive_message, {}),
            (other.get_queue_attributes, {"AttributeNames": ["All"]}),
            (other.delete_queue, {}),
        ):
            code, message, status = refused(call, QueueUrl=target, **params)
            answers[(target, call.__name__)] = (code, message.replace(target, "<url>"), status)
    assert set(answers.values()) == {
        ("AccessDenied", "Access to the resource <url> is denied.", 403)
    }


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        "[]",
        json.dumps({"Statement": []} | {"Extra": 1}),
        json.dumps({"Version": "2099-01-01", "Statement": []}),
        json.dumps({"Statement": "Allow"}),
        json.dumps({"Statement": [{"Effect": "Maybe", "Principal": "*", "Action": "*"}]}),
        json.dumps({"Statement": [{"Effect": "Allow", "Principal": "me", "Action": "*"}]}),
        json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:Get"}]}),
        json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*"}]}),
        json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "*"}] * 21}),
    ],
)
def test_a_policy_that_is_not_one_is_refused(sqs, owner, document):
    url = owner.create_queue(QueueName="strict")["QueueUrl"]
    refusal = refused(owner.set_queue_attributes, QueueUrl=url, Attributes={"Policy": document})
    assert refusal == ("InvalidAttributeValue", INVALID_POLICY, 400)
    assert refused(owner.create_queue, QueueName="strict-too", Attributes={"Policy": document}) == (
        "InvalidAttributeValue",
        INVALID_POLICY,
        400,
    )
    assert policy_of(owner, url) is None

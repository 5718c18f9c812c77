"""The SQS action table (:mod:`queuey.sqs.api`) against botocore's model of SQS:
the actions it claims, their inputs, the answers the endpoint gives, and the
handler and permission class every action has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import botocore.loaders
import botocore.model
import pytest

from queuey.applications import default_account_id
from queuey.sqs import attributes as qa
from queuey.sqs import messages, policy, protocol
from queuey.sqs.actions import SQSService
from queuey.sqs.api import ACTIONS, Shape
from tests.sqs.conftest import make_client

ACCOUNT = "123456789012"
OTHER = "210987654321"


@pytest.fixture(scope="module")
def model() -> botocore.model.ServiceModel:
    return botocore.model.ServiceModel(
        botocore.loaders.Loader().load_service_model("sqs", "service-2"), "sqs"
    )


def _same_input(ours: Shape, theirs: botocore.model.Shape, path: str) -> None:
    assert ours.kind == theirs.type_name, path
    if ours.kind == "structure":
        assert list(ours.members) == list(theirs.members), path
        assert ours.required == set(theirs.required_members), path
        for name, member in theirs.members.items():
            _same_input(ours.members[name].shape, member, f"{path}.{name}")
    elif ours.kind == "list":
        _same_input(ours.member, theirs.member, path + "[]")
    elif ours.kind == "map":
        _same_input(ours.value, theirs.value, path + "{}")


@pytest.mark.unit
def test_every_action_is_botocores_with_its_inputs(model):
    assert set(ACTIONS) <= set(model.operation_names)
    for name, action in ACTIONS.items():
        operation = model.operation_model(name)
        _same_input(action.input, operation.input_shape, name)
        if operation.output_shape is None:
            assert action.output.members == {}, name
        else:
            _same_input(action.output, operation.output_shape, name + "Result")


@pytest.mark.unit
def test_every_action_has_a_handler():
    handlers = {action.handler for action in ACTIONS.values()}
    assert len(handlers) == len(ACTIONS)
    for action in ACTIONS.values():
        assert callable(getattr(SQSService, action.handler, None)), action.name


@pytest.mark.unit
def test_every_action_has_a_permission_class():
    for name, action in ACTIONS.items():
        if action.owner_only:
            continue
        granted = ACTIONS[action.grant]
        assert granted.grant == granted.name, name  # a grant is itself granted
        if granted.name != name:  # a batch action comes with its single action
            assert name == granted.name + "Batch", name


@pytest.mark.unit
def test_the_policy_sets_derive_from_the_table():
    assert not policy.GRANTABLE & policy.OWNER_ONLY
    assert policy.OWNER_ONLY == {n for n, a in ACTIONS.items() if a.owner_only}
    assert policy.GRANTABLE == {a.grant for a in ACTIONS.values() if a.grant}
    everything = json.dumps(
        {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:*"}]}
    )
    arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:q"
    for name, action in ACTIONS.items():
        assert policy.grant_action(name) == action.grant
        assert policy.allows(everything, OTHER, name, arn) is not action.owner_only, name


def _emitted(value, shape: botocore.model.Shape, path: str) -> None:
    """Everything in ``value`` is a member of ``shape``, all the way down."""
    if shape.type_name == "structure":
        assert isinstance(value, dict), path
        unknown = set(value) - set(shape.members)
        assert not unknown, f"{path}: {unknown} not in botocore's model"
        for name, item in value.items():
            _emitted(item, shape.members[name], f"{path}.{name}")
    elif shape.type_name == "list":
        for i, item in enumerate(value):
            _emitted(item, shape.member, f"{path}[{i}]")
    elif shape.type_name == "map":
        for key, item in value.items():
            _emitted(item, shape.value, f"{path}.{key}")


def test_every_answer_holds_only_botocores_members(make_live_server, test_apps, monkeypatch, model):
    """Every action run through a live server once (JSON protocol); each
    result the endpoint answered holds only members of the action's output."""
    answered: dict[str, list[dict]] = {}
    ok = protocol.ok

    def recording(call, result, request_id):
        answered.setdefault(call.action, []).append(result)
        return ok(call, result, request_id)

    monkeypatch.setattr(protocol, "ok", recording)
    server = make_live_server("sqlite")
    client = make_client(server.url, test_apps.app, "json")
    try:
        _run_every_action(client, default_account_id(test_apps.remote_app))
    finally:
        client.close()
    assert set(answered) == set(ACTIONS)
    for name, results in answered.items():
        output = model.operation_model(name).output_shape
        for result in results:
            if output is None:
                assert result == {}, name
            else:
                _emitted(result, output, name)


def _run_every_action(client, other: str) -> None:
    url = client.create_queue(QueueName="table")["QueueUrl"]
    dlq = client.create_queue(QueueName="table-dlq")["QueueUrl"]
    assert client.get_queue_url(QueueName="table")["QueueUrl"] == url
    client.list_queues(QueueNamePrefix="table")
    arns = [
        client.get_queue_attributes(QueueUrl=u, AttributeNames=["All"])["Attributes"]["QueueArn"]
        for u in (url, dlq)
    ]
    redrive = json.dumps({"deadLetterTargetArn": arns[1], "maxReceiveCount": 5})
    client.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": redrive})
    client.list_dead_letter_source_queues(QueueUrl=dlq)
    client.tag_queue(QueueUrl=url, Tags={"team": "q"})
    client.list_queue_tags(QueueUrl=url)
    client.untag_queue(QueueUrl=url, TagKeys=["team"])
    client.add_permission(
        QueueUrl=url, Label="share", AWSAccountIds=[other], Actions=["SendMessage"]
    )
    client.remove_permission(QueueUrl=url, Label="share")
    text = {"DataType": "String", "StringValue": "v"}
    client.send_message(QueueUrl=url, MessageBody="one", MessageAttributes={"a": text})
    client.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)],
    )
    got = client.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    handles = [m["ReceiptHandle"] for m in got]
    client.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=5)
    client.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": handles[1], "VisibilityTimeout": 5}]
    )
    client.delete_message(QueueUrl=url, ReceiptHandle=handles[0])
    client.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": handles[1]}])
    client.send_message_batch(
        QueueUrl=dlq, Entries=[{"Id": str(i), "MessageBody": f"d{i}"} for i in range(10)]
    )
    task = client.start_message_move_task(
        SourceArn=arns[1], DestinationArn=arns[0], MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    client.list_message_move_tasks(SourceArn=arns[1])
    client.cancel_message_move_task(TaskHandle=task)
    client.purge_queue(QueueUrl=url)
    client.delete_queue(QueueUrl=dlq)


@pytest.mark.unit
def test_the_attribute_names_are_botocores(model):
    def names(shape: str) -> set[str]:
        return set(model.shape_for(shape).enum) - {"All"}

    assert qa.ALL_NAMES == names("QueueAttributeName")
    assert set(messages.SYSTEM_ATTRIBUTES) == names("MessageSystemAttributeNameForSends")


@pytest.mark.unit
def test_the_docs_name_the_grantable_actions():
    text = " ".join((Path(__file__).parents[2] / "docs" / "sqs.rst").read_text().split())
    listed = re.search(r"Actions: ``\*``, (.*?); the three batch actions", text)
    assert listed, "docs/sqs.rst no longer lists AddPermission's actions"
    assert set(re.findall(r"``(\w+)``", listed.group(1))) == policy.GRANTABLE
    batches = {n for n, a in ACTIONS.items() if a.grant not in (None, n)}
    assert len(batches) == 3

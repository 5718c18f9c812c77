"""The query-protocol codec against Amazon's own models and botocore's own
serializer and parser (the client side of the same protocol)."""

from __future__ import annotations

import base64
import string

import botocore.model
import pytest
from botocore.parsers import create_parser
from botocore.serialize import create_serializer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuey.sqs import query
from queuey.sqs.api import ACTIONS, Shape
from queuey.sqs.errors import KINDS, SQSError
from tests.sqs.query_model import old_model

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def old() -> botocore.model.ServiceModel:
    return botocore.model.ServiceModel(old_model(), "sqs")


def _compare(ours: Shape, theirs: botocore.model.Shape, path: str) -> None:
    """Our shape (botocore's JSON model with the query protocol's names by
    :mod:`queuey.sqs.api`'s rules) against Amazon's last query model."""
    assert ours.kind == theirs.type_name, path
    if ours.kind == "structure":
        for name, member in theirs.members.items():
            assert name in ours.members, f"{path}.{name} missing"
            mine = ours.members[name]
            their_wire = member.serialization.get("name", name)
            assert (mine.wire or name) == their_wire or (
                mine.shape.kind == "list" and mine.shape.item
            ), f"{path}.{name}: wire {mine.wire} != {their_wire}"
            _compare(mine.shape, member, f"{path}.{name}")
        if "Result" not in path:  # what an answer must hold is the server's business
            assert set(theirs.required_members) <= set(ours.required), path
    elif ours.kind == "list":
        assert theirs.serialization.get("flattened"), path
        item = theirs.member.serialization.get("name")
        assert ours.item == item, f"{path}: item {ours.item} != {item}"
        _compare(ours.member, theirs.member, path + "[]")
    elif ours.kind == "map":
        assert theirs.serialization.get("flattened"), path
        assert ours.key_name == theirs.key.serialization.get("name", "key"), path
        assert ours.value_name == theirs.value.serialization.get("name", "value"), path
        _compare(ours.value, theirs.value, path + "{}")


def test_shapes_match_the_query_model(old):
    assert set(old.operation_names) == set(ACTIONS)
    for action in old.operation_names:
        operation = old.operation_model(action)
        ours_in, ours_out = ACTIONS[action].input, ACTIONS[action].output
        _compare(ours_in, operation.input_shape, action)
        if operation.output_shape is not None:
            _compare(ours_out, operation.output_shape, action + "Result")


def test_error_codes_match_the_model(old):
    for shape_name in old.shape_names:
        shape = old.shape_for(shape_name)
        error = shape.metadata.get("error")
        if not error or shape_name not in KINDS:
            continue
        kind = KINDS[shape_name]
        assert (kind.query_code, kind.status, kind.sender) == (
            error["code"],
            error["httpStatusCode"],
            error["senderFault"],
        ), shape_name


def _pairs(old, action: str, params: dict) -> list[tuple[str, str]]:
    body = create_serializer("query").serialize_to_request(params, old.operation_model(action))[
        "body"
    ]
    return [(k, str(v)) for k, v in body.items()]  # as they travel, urlencoded


TEXT = st.text(alphabet=string.ascii_letters + string.digits + " .-_☃", min_size=1, max_size=20)
ATTRIBUTE = st.one_of(
    st.builds(lambda v: {"DataType": "String", "StringValue": v}, TEXT),
    st.builds(lambda v: {"DataType": "Binary", "BinaryValue": v}, st.binary(min_size=1)),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=TEXT,
    attributes=st.dictionaries(TEXT, ATTRIBUTE, max_size=4),
    delay=st.none() | st.integers(0, 900),
    group=st.none() | TEXT,
)
def test_send_message_round_trip(old, body, attributes, delay, group):
    params = {"QueueUrl": "http://h/123456789012/q", "MessageBody": body}
    if attributes:
        params["MessageAttributes"] = attributes
    if delay is not None:
        params["DelaySeconds"] = delay
    if group is not None:
        params["MessageGroupId"] = group
    parsed = query.parse_query("SendMessage", _pairs(old, "SendMessage", params))
    for value in parsed.get("MessageAttributes", {}).values():
        if "BinaryValue" in value:
            value["BinaryValue"] = base64.b64decode(value["BinaryValue"])
    assert parsed == params


@pytest.mark.parametrize(
    "action, params",
    [
        (
            "CreateQueue",
            {"QueueName": "q", "Attributes": {"DelaySeconds": "1"}, "tags": {"a": "b"}},
        ),
        ("TagQueue", {"QueueUrl": "u", "Tags": {"k": "v", "k2": ""}}),
        ("UntagQueue", {"QueueUrl": "u", "TagKeys": ["a", "b"]}),
        ("GetQueueAttributes", {"QueueUrl": "u", "AttributeNames": ["All", "QueueArn"]}),
        (
            "ReceiveMessage",
            {
                "QueueUrl": "u",
                "AttributeNames": ["All"],
                "MessageAttributeNames": ["x.*"],
                "MaxNumberOfMessages": 10,
                "WaitTimeSeconds": 0,
            },
        ),
        (
            "SendMessageBatch",
            {
                "QueueUrl": "u",
                "Entries": [
                    {"Id": "a", "MessageBody": "1", "DelaySeconds": 3},
                    {"Id": "b", "MessageBody": "2", "MessageDeduplicationId": "d"},
                ],
            },
        ),
        (
            "ChangeMessageVisibilityBatch",
            {
                "QueueUrl": "u",
                "Entries": [{"Id": "a", "ReceiptHandle": "r", "VisibilityTimeout": 0}],
            },
        ),
        ("StartMessageMoveTask", {"SourceArn": "s", "MaxNumberOfMessagesPerSecond": 5}),
    ],
)
def test_request_round_trips(old, action, params):
    assert query.parse_query(action, _pairs(old, action, params)) == params


def _parse(old, action: str, body: bytes, status: int = 200) -> dict:
    parsed = create_parser("query").parse(
        {"status_code": status, "headers": {}, "body": body},
        old.operation_model(action).output_shape,
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


@pytest.mark.parametrize(
    "action, result",
    [
        ("CreateQueue", {"QueueUrl": "http://h/1/q"}),
        ("ListQueues", {"QueueUrls": ["a", "b"], "NextToken": "t"}),
        ("GetQueueAttributes", {"Attributes": {"A": "1", "B": "<&>"}}),
        ("ListQueueTags", {"Tags": {"k": "v"}}),
        ("ListDeadLetterSourceQueues", {"queueUrls": ["x"]}),
        (
            "ReceiveMessage",
            {
                "Messages": [
                    {
                        "MessageId": "m",
                        "ReceiptHandle": "r",
                        "MD5OfBody": "d",
                        "Body": "<xml> & ☃",
                        "Attributes": {"SentTimestamp": "1"},
                        "MD5OfMessageAttributes": "e",
                        "MessageAttributes": {
                            "s": {"DataType": "String", "StringValue": "v"},
                            "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
                        },
                    }
                ]
            },
        ),
        (
            "SendMessageBatch",
            {
                "Successful": [{"Id": "a", "MessageId": "m", "MD5OfMessageBody": "d"}],
                "Failed": [
                    {
                        "Id": "b",
                        "SenderFault": True,
                        "Code": "InvalidParameterValue",
                        "Message": "x",
                    }
                ],
            },
        ),
        (
            "ListMessageMoveTasks",
            {
                "Results": [
                    {
                        "TaskHandle": "h",
                        "Status": "RUNNING",
                        "ApproximateNumberOfMessagesMoved": 3,
                        "StartedTimestamp": 1700000000000,
                    }
                ]
            },
        ),
        ("CancelMessageMoveTask", {"ApproximateNumberOfMessagesMoved": 7}),
    ],
)
def test_results_parse_back(old, action, result):
    wire = _to_wire(result)
    assert _parse(old, action, query.render_result(action, wire, "req-1")) == result


def _to_wire(value):
    """Blobs as the JSON-shaped results carry them (base64 text)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_wire(v) for v in value]
    return value


def test_errors_parse_back(old):
    error = SQSError("QueueDoesNotExist", "The specified queue does not exist.")
    parsed = create_parser("query").parse(
        {"status_code": 400, "headers": {}, "body": query.render_error(error, "req-2")},
        old.operation_model("GetQueueUrl").output_shape,
    )
    assert parsed["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert parsed["Error"]["Message"] == "The specified queue does not exist."
    assert parsed["Error"]["Type"] == "Sender"


@settings(max_examples=300)
@given(
    action=st.sampled_from(sorted(ACTIONS)),
    pairs=st.lists(
        st.tuples(
            st.text(alphabet="AttributeNameValue.1234567890x", max_size=30), st.text(max_size=10)
        ),
        max_size=30,
    ),
)
def test_any_pairs_give_a_value_or_an_sqs_error(action, pairs):
    try:
        query.parse_query(action, pairs)
    except SQSError:
        pass


@settings(max_examples=300)
@given(
    action=st.sampled_from(sorted(ACTIONS)),
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
        ),
        max_leaves=12,
    ),
)
def test_any_json_gives_a_value_or_an_sqs_error(action, body):
    try:
        query.validate_json(action, body)
    except SQSError:
        pass


def test_xml_never_carries_invalid_characters():
    body = query.render_result("GetQueueUrl", {"QueueUrl": "a\x00b\ufffe"}, "r")
    assert b"\x00" not in body
    assert "a\ufffdb\ufffd".encode() in body

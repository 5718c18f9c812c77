"""Hostile input to the SQS actions this release made stricter or added:
CreateQueue attributes (policies, redrive policies, numbers), queue URLs and
bare names, receipt handles with receive times, visibility timeouts,
message attributes, AddPermission. Signed requests of any JSON shape, deep
JSON, huge numbers and odd text: each answer is SQS's JSON error shape or a
success, never a 500, and no request takes seconds."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from queuey.sqs import handles
from queuey.sqs.errors import SQSError
from queuey.sqs.queues import Place
from tests.sqs.test_state import _raw_json

DEEP = "[" * 50_000 + "]" * 50_000
HUGE = "9" * 5000
QUEUE = "fuzzed"

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
ODD = st.sampled_from(
    [
        DEEP,
        HUGE,
        "-1",
        "1e400",
        "",
        "\ud800",
        "\x00",
        '{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:x", "maxReceiveCount": '
        + HUGE
        + "}",
        '{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:*", '
        '"Resource": "arn:' + "*a" * 200 + '*b"}]}',
        "arn:aws:sqs:eu-west-1:000000000000:x",
    ]
)
ATTRIBUTE_NAMES = st.sampled_from(
    [
        "VisibilityTimeout",
        "DelaySeconds",
        "MessageRetentionPeriod",
        "MaximumMessageSize",
        "RedrivePolicy",
        "RedriveAllowPolicy",
        "Policy",
        "FifoQueue",
        "ContentBasedDeduplication",
        "QueueArn",
    ]
) | st.text(max_size=20)
VALUES = ODD | JSON
URLS = st.sampled_from([QUEUE, f"/{'0' * 12}/{QUEUE}", "http://x/1/2/3", "", "a" * 3000]) | (
    st.text(max_size=60)
)
HANDLES = st.sampled_from(
    ["0-" + "a" * 32 + "-" + "b" * 16 + "." + HUGE, "x." + "9" * 13, ".", "", "\ud800"]
) | st.text(max_size=60)

CALLS = st.one_of(
    st.tuples(
        st.just("CreateQueue"),
        st.fixed_dictionaries(
            {"QueueName": st.sampled_from([QUEUE, "other.fifo", "x" * 81]) | st.text(max_size=8)},
            optional={"Attributes": st.dictionaries(ATTRIBUTE_NAMES, VALUES, max_size=4)},
        ),
    ),
    st.tuples(
        st.sampled_from(["SendMessage", "ReceiveMessage", "GetQueueAttributes"]),
        st.fixed_dictionaries(
            {"QueueUrl": URLS},
            optional={
                "MessageBody": VALUES,
                "DelaySeconds": VALUES,
                "MessageAttributes": st.dictionaries(st.text(max_size=12), VALUES, max_size=3),
                "MessageAttributeNames": VALUES,
                "VisibilityTimeout": VALUES,
                "AttributeNames": VALUES,
            },
        ),
    ),
    st.tuples(
        st.sampled_from(["DeleteMessage", "ChangeMessageVisibility"]),
        st.fixed_dictionaries(
            {"QueueUrl": URLS, "ReceiptHandle": HANDLES | VALUES},
            optional={"VisibilityTimeout": VALUES},
        ),
    ),
    st.tuples(
        st.sampled_from(["SendMessageBatch", "ChangeMessageVisibilityBatch"]),
        st.fixed_dictionaries(
            {"QueueUrl": URLS, "Entries": st.lists(st.dictionaries(st.text(max_size=14), VALUES))}
        ),
    ),
    st.tuples(
        st.sampled_from(["AddPermission", "RemovePermission", "SetQueueAttributes"]),
        st.fixed_dictionaries(
            {"QueueUrl": URLS},
            optional={
                "Label": VALUES,
                "AWSAccountIds": VALUES,
                "Actions": VALUES,
                "Attributes": st.dictionaries(ATTRIBUTE_NAMES, VALUES, max_size=3),
            },
        ),
    ),
)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("protocol", ["json"], indirect=True)
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=CALLS)
@example(call=("CreateQueue", {"QueueName": QUEUE, "Attributes": {"RedrivePolicy": DEEP}}))
@example(call=("CreateQueue", {"QueueName": QUEUE, "Attributes": {"Policy": DEEP}}))
@example(call=("SetQueueAttributes", {"QueueUrl": QUEUE, "Attributes": {"Policy": DEEP}}))
@example(call=("SetQueueAttributes", {"QueueUrl": QUEUE, "Attributes": {"RedrivePolicy": DEEP}}))
@example(
    call=("SetQueueAttributes", {"QueueUrl": QUEUE, "Attributes": {"RedriveAllowPolicy": DEEP}})
)
@example(call=("ChangeMessageVisibility", {"QueueUrl": QUEUE, "ReceiptHandle": "1." + HUGE}))
@example(
    call=(
        "ChangeMessageVisibility",
        {"QueueUrl": QUEUE, "ReceiptHandle": "h", "VisibilityTimeout": 10**40},
    )
)
def test_the_stricter_actions_never_answer_a_500(sqs, call):
    if not sqs.app.registry.queuey.storage.list_queues(sqs.application, limit=1):
        sqs.client().create_queue(QueueName=QUEUE)
        sqs.client().create_queue(QueueName=QUEUE, Attributes={"VisibilityTimeout": "30"})
    action, payload = call
    started = time.monotonic()
    answer = _raw_json(sqs, action, payload)
    took = time.monotonic() - started
    assert answer.status_code in (200, 400, 403, 404, 413), (action, answer.text[:300])
    if answer.status_code != 200:
        assert answer.json()["__type"].startswith("com.amazonaws.sqs#"), answer.text[:300]
    assert took < 5, (action, took)  # a guard against blow-ups, not a benchmark


@given(receipt=st.text(max_size=80), received=st.integers(min_value=0, max_value=10**12 - 1))
def test_a_receipt_handle_gives_back_its_receipt_and_receive_time(receipt, received):
    assert handles.read(handles.make(receipt, received)) == (receipt, received)


@given(url=st.text(max_size=120) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")))
def test_any_queue_url_names_a_queue_of_the_region_or_none(url):
    """A ``QueueUrl`` is located (an account and a name this region stores) or
    refused as a missing queue: nothing else, whatever the text."""
    place = Place("http://h", "123456789012", "eu-west-1", "us-east-1")
    try:
        account, stored = place.locate(url)
    except SQSError as exc:
        assert exc.name == "QueueDoesNotExist"
        return
    assert len(account) == 12 and account.isdigit()
    assert stored.startswith("eu-west-1:") and place.local(stored) is not None

"""Flow control seen through the SQS endpoint with boto3: standard queues are
fair without a setting, a paused queue answers ``RequestThrottled`` (which
boto3 retries), a paused subscription hands out nothing until resumed.

The door only sets the fair flag and words the refusals; the rules are the
core's, checked on both backends in :mod:`tests.core.test_flow_contract`, so
these run on SQLite. Settings are changed the way every door changes them
(:class:`queuey.core.flowsettings.FlowSettings`).
"""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError

from queuey.core.flow import PAUSED_RETRY
from queuey.model.flow import queue_flow
from queuey.settings import DEFAULTS
from queuey.sqs import attributes as qa
from queuey.sqs.caller import SUBSCRIPTION
from tests.sqs.conftest import make_client
from tests.support import wait_until

FLOOD = 300
THRESHOLD = int(DEFAULTS["queuey.flow.fair_threshold"])
#: What ReceiveMessage may show of a standard queue's message (no priority).
RECEIVE_ATTRIBUTES = {
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "MessageGroupId",
}


class Endpoint:
    """A live server on SQLite and boto3 clients for the test application."""

    def __init__(self, server, application: str) -> None:
        self.server = server
        self.application = application
        self.services = server.app.registry.queuey
        self.clients: list = []

    def client(self, protocol: str = "json", **config):
        made = make_client(self.server.url, self.application, protocol, **config)
        self.clients.append(made)
        return made

    def meta(self, name: str):
        return self.services.queues.get(self.application, name)

    def close(self) -> None:
        for made in self.clients:
            made.close()


@pytest.fixture
def endpoint(make_live_server, test_apps):
    found = Endpoint(make_live_server("sqlite"), test_apps.app)
    yield found
    found.close()


def test_standard_queues_are_fair_and_fifo_queues_are_not(endpoint) -> None:
    client = endpoint.client()
    url = client.create_queue(QueueName="jobs")["QueueUrl"]
    client.create_queue(
        QueueName="jobs.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )
    assert queue_flow(endpoint.meta("jobs")).fair
    assert not queue_flow(endpoint.meta("jobs.fifo")).fair
    # The flag is no SQS attribute, and CreateQueue again still matches.
    shown = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert set(shown) <= qa.ALL_NAMES
    assert client.create_queue(QueueName="jobs")["QueueUrl"] == url

    for batch in range(FLOOD // 10):
        client.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(n), "MessageBody": f"flood {batch}-{n}", "MessageGroupId": "flood"}
                for n in range(10)
            ],
        )
    quiet = {"b", "c", "d"}
    for group in sorted(quiet):
        client.send_message(QueueUrl=url, MessageBody=group, MessageGroupId=group)

    received: list[dict] = []
    while not quiet <= {m["Attributes"]["MessageGroupId"] for m in received}:
        got = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
        assert got, f"the queue ran dry after {len(received)} messages"
        received.extend(got)
    print(
        f"fair standard queue: {FLOOD} of one group, then {len(quiet)} others: the others "
        f"all received within the first {len(received)} messages (threshold {THRESHOLD})"
    )
    # A flood's first THRESHOLD messages are taken as quiet before it counts
    # as busy; the other groups come right after them, not after the flood.
    assert len(received) <= THRESHOLD + 10
    for message in received:
        assert set(message["Attributes"]) <= RECEIVE_ATTRIBUTES


@pytest.mark.parametrize("protocol", ["json", "query"])
def test_a_paused_queue_answers_request_throttled_which_boto3_retries(endpoint, protocol) -> None:
    client = endpoint.client(protocol, retries={"mode": "legacy", "max_attempts": 1})
    url = client.create_queue(QueueName="jobs")["QueueUrl"]
    endpoint.services.flow_settings.pause(endpoint.meta("jobs"))
    with pytest.raises(ClientError) as refused:
        client.send_message(QueueUrl=url, MessageBody="x")
    response = refused.value.response
    assert response["Error"]["Code"] == "RequestThrottled"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == str(PAUSED_RETRY)
    # boto3 took it as a throttle and asked again before giving up.
    assert response["ResponseMetadata"]["RetryAttempts"] == 1
    # A batch is refused whole, as one throttled request.
    once = endpoint.client(protocol)
    with pytest.raises(ClientError) as refused:
        once.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "x"}])
    assert refused.value.response["Error"]["Code"] == "RequestThrottled"
    assert "Messages" not in client.receive_message(QueueUrl=url)

    endpoint.services.flow_settings.resume(endpoint.meta("jobs"))
    client.send_message(QueueUrl=url, MessageBody="after")
    assert [m["Body"] for m in client.receive_message(QueueUrl=url)["Messages"]] == ["after"]


def test_a_paused_subscription_receives_nothing_and_a_long_poll_waits(endpoint) -> None:
    client = endpoint.client()
    url = client.create_queue(QueueName="jobs")["QueueUrl"]
    endpoint.services.flow_settings.pause(endpoint.meta("jobs"), SUBSCRIPTION)
    client.send_message(QueueUrl=url, MessageBody="one")
    client.send_message(QueueUrl=url, MessageBody="two")
    assert "Messages" not in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)

    polled: list[dict] = []
    poll = threading.Thread(
        target=lambda: polled.append(
            client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20)
        )
    )
    poll.start()
    try:
        wait_until(
            lambda: endpoint.services.long_polls.waiting_of(endpoint.application) == 1,
            10,
            "the ReceiveMessage long poll waiting",
        )
        assert not polled
        endpoint.services.flow_settings.resume(endpoint.meta("jobs"), SUBSCRIPTION)
    finally:
        poll.join(25)
    assert sorted(m["Body"] for m in polled[0]["Messages"]) == ["one", "two"]

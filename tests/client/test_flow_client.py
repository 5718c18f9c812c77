"""The client's flow-control calls against a live server, and flow refusals as
typed errors: a paused queue's 503 is not retried, 429 and 507 carry the
setting and the wait."""

from __future__ import annotations

import time

import pytest

from queuey.client import (
    FlowInfo,
    FlowRefused,
    OutgoingMessage,
    QueueFlow,
    QueueFull,
    QueuePaused,
    RateLimited,
    SubscriptionFlow,
    Unavailable,
)
from tests.client.scripted import make_client

PAUSED = {"status": "error", "error_msg": {"paused": "queue q is paused: it takes no posts"}}


def test_flow_calls_change_and_show_settings(client):
    client.create_queue("orders")
    info = client.set_queue_flow("orders", post_rate=2.5, max_length=100, fair=True)
    assert info.queue == QueueFlow(post_rate=2.5, post_burst=3, max_length=100, fair=True)
    client.set_subscription_filter("orders", "mail", {"kind": ["mail"]})
    mail = client.set_subscription_flow("orders", "mail", rate=5, max_in_flight=2)
    assert mail == SubscriptionFlow(rate=5, burst=5, max_in_flight=2)
    assert client.subscription_filters("orders") == {"mail": {"kind": ["mail"]}}  # kept
    assert client.flow("orders") == FlowInfo(info.queue, {"mail": mail})

    assert client.pause("orders", "mail") == SubscriptionFlow(True, 5, 5, 2)
    assert client.resume("orders", "mail").paused is False
    assert client.set_queue_flow("orders", post_rate=0, fair=False).queue == QueueFlow(
        max_length=100
    )
    with pytest.raises(TypeError):
        client.set_queue_flow("orders", rate=3)  # a subscription's setting


def test_a_paused_queue_raises_at_once_and_a_rate_names_its_wait(client):
    client.create_queue("orders")
    assert client.pause("orders") == QueueFlow(paused=True)
    started = time.monotonic()
    with pytest.raises(QueuePaused) as paused:
        client.post("orders", {"n": 1})
    waited = time.monotonic() - started
    print(
        f"\npaused post refused in {waited * 1000:.0f} ms, retry_after={paused.value.retry_after}"
    )
    assert waited < 1, "a paused queue is not retried like an unavailable one"
    error = paused.value
    assert isinstance(error, Unavailable) and isinstance(error, FlowRefused)
    assert (error.status, error.field, error.retry_after) == (503, "paused", 5)
    assert error.outcome_unknown is False  # nothing was stored

    client.resume("orders")
    client.set_queue_flow("orders", post_rate=1, post_burst=1)
    client.post("orders", {"n": 1}, group="tenant-a")
    with pytest.raises(RateLimited) as limited:
        client.post_batch("orders", [OutgoingMessage({"n": 2}, group="tenant-b")])
    assert limited.value.field == "post_rate" and limited.value.retry_after >= 1
    (message,) = client.read("orders")
    assert message.group == "tenant-a" and message.attributes is None


@pytest.mark.unit
def test_refusals_are_typed_from_the_answer(scripted):
    scripted.answer(503, PAUSED, {"Retry-After": "5"})
    client = make_client(scripted.url, retries=3)
    with pytest.raises(QueuePaused):
        client.post("q", {"a": 1})
    assert len(scripted.requests) == 1 and client.sleeps == []

    full = {"status": "error", "error_msg": {"max_bytes": "application a stores ..."}}
    scripted.answer(507, full, {"Retry-After": "5"})
    with pytest.raises(QueueFull) as refused:
        client.post_batch("q", [{"a": 1}])
    assert (refused.value.field, refused.value.retry_after) == ("max_bytes", 5.0)
    assert refused.value.outcome_unknown is False
    assert len(scripted.requests) == 2, "a refusal is not retried"

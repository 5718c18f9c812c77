"""The client's work-queue calls against the real app (waitress + SQLite).

What a consumer sees: leases with receipts and attempt counts, acks that are
final, releases that bring a message back, extends that keep it, stats, dead
letters and redrive. Long polls get a call timeout long enough for the wait.
"""

from __future__ import annotations

import time

import pytest

from queuey.client import OutgoingMessage, QueueyClient, ReservedMessage
from tests.client.scripted import make_client
from tests.support import wait_until


def test_reserve_answers_leases_with_receipts_attempts_and_attributes(client):
    client.create_queue("jobs", partitions=2, visibility_timeout=30)
    client.post_batch(
        "jobs",
        [
            OutgoingMessage({"n": 1}, partition=1, attributes={"kind": "thumbnail"}),
            OutgoingMessage({"n": 2}, partition=2, priority=5),
        ],
    )
    got = client.reserve("jobs", limit=10)
    assert [m.body["n"] for m in got] == [2, 1], "higher priority first"
    first, second = got
    assert isinstance(first, ReservedMessage)
    assert first.priority == 5 and first.attempts == 1 and first.partition == 2
    assert second.attributes == {"kind": "thumbnail"} and second.attributes is not None
    assert first.receipt != second.receipt
    assert client.reserve("jobs", limit=10) == [], "leased messages go to nobody else"


def test_ack_is_final_and_a_second_ack_of_the_same_receipt_is_harmless(client):
    client.create_queue("jobs")
    client.post("jobs", {"n": 1})
    (message,) = client.reserve("jobs")
    result = client.ack("jobs", [message.receipt])
    assert result.done == 1 and result.ok
    again = client.ack("jobs", [message.receipt])
    assert again.done == 1 and again.ok, "a repeated ack (a retry after a lost answer) is fine"
    client.release("jobs", [message.receipt])
    assert client.reserve("jobs", limit=10) == [], "an acked message never comes back"


def test_release_brings_a_message_back_with_its_attempt_count(client):
    client.create_queue("jobs")
    client.post("jobs", {"n": 1})
    (first,) = client.reserve("jobs")
    result = client.release("jobs", [first.receipt], error="ValueError: boom")
    assert result.done == 1 and result.dead_lettered == 0
    (second,) = client.reserve("jobs")
    assert second.message_id == first.message_id and second.attempts == 2
    stale = client.ack("jobs", [first.receipt])
    assert stale.done == 0 and stale.failed == {first.receipt: "expired"}


def test_a_release_with_a_delay_keeps_the_message_away_until_then(client):
    client.create_queue("jobs")
    client.post("jobs", {"n": 1})
    (first,) = client.reserve("jobs")
    released_at = time.monotonic()
    client.release("jobs", [first.receipt], delay=2)
    assert client.reserve("jobs") == []
    again = wait_until(lambda: client.reserve("jobs"), 15, "the released message to come back")
    assert time.monotonic() - released_at >= 2 - 0.05
    assert again[0].message_id == first.message_id


def test_extend_and_the_subscriptions_are_independent(client):
    client.create_queue("jobs", visibility_timeout=1)
    client.post("jobs", {"n": 1})
    (leased,) = client.reserve("jobs", subscription="billing")
    assert client.extend("jobs", [leased.receipt], 60, subscription="billing").done == 1
    other = client.reserve("jobs", subscription="audit")
    assert [m.message_id for m in other] == [leased.message_id], "each subscription gets it"
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # past the queue's 1 s timeout, still ours
        assert client.reserve("jobs", subscription="billing") == []
        time.sleep(0.2)
    unknown = client.extend("jobs", ["1-" + "0" * 32 + "-x"], 5, subscription="billing")
    assert unknown.done == 0 and list(unknown.failed.values()) == ["unknown"]


def test_stats_count_each_subscription(client):
    client.create_queue("jobs", partitions=2)
    client.post_batch("jobs", [OutgoingMessage({"n": n}, partition=n % 2 + 1) for n in range(5)])
    leased = client.reserve("jobs", limit=2)
    client.ack("jobs", [leased[0].receipt])
    stats = client.stats("jobs")
    assert stats.name == "jobs" and stats.messages == 5
    assert sorted(p.partition for p in stats.partitions) == [1, 2]
    default = stats.subscription("default")
    assert default is not None
    assert (default.available, default.in_flight) == (3, 1)
    assert stats.subscription("never-used") is None


def test_dead_letters_carry_their_source_and_redrive_moves_them_back(client):
    client.create_queue("jobs", max_attempts=1)
    posted = client.post("jobs", {"n": 1})
    (leased,) = client.reserve("jobs")
    result = client.release("jobs", [leased.receipt], error="KeyError: 'n'")
    assert result.dead_lettered == 1
    (letter,) = client.read("jobs-dead")
    assert letter.body == {"n": 1}
    assert letter.attributes is not None
    assert letter.attributes["source_queue"] == "jobs"
    assert letter.attributes["source_message_id"] == posted.message_id
    assert letter.attributes["attempts"] == "1"
    assert letter.attributes["last_error"] == "KeyError: 'n'"
    assert client.reserve("jobs") == []

    moved = client.redrive("jobs-dead")
    assert (moved.moved, moved.reposted, moved.skipped) == (1, 0, {})
    (back,) = client.reserve("jobs")
    assert back.message_id == posted.message_id and back.attempts == 1
    assert client.read("jobs-dead") == []


def test_posted_delay_and_dedup_id(client):
    client.create_queue("jobs")
    first = client.post("jobs", {"n": 1}, dedup_id="order-17")
    second = client.post("jobs", {"n": 1}, dedup_id="order-17")
    assert second.message_id == first.message_id, "a repeated dedup_id answers the first"
    client.post("jobs", {"n": 2}, delay=2)
    assert [m.body["n"] for m in client.read("jobs")] == [1], "a delayed message is invisible"
    got = wait_until(
        lambda: [m for m in client.reserve("jobs", limit=10) if m.body["n"] == 2] or None,
        15,
        "the delayed message",
    )
    assert got[0].body == {"n": 2}


def test_a_long_poll_waits_for_a_message_posted_meanwhile(client, live_server):
    client.create_queue("jobs")
    waiting = QueueyClient(live_server.url, live_server.application, live_server.key, timeout=1)
    with waiting:
        started = time.monotonic()
        assert waiting.reserve("jobs", wait=1) == [], "the call's timeout grows with the wait"
        assert time.monotonic() - started >= 0.9
        client.post("jobs", {"n": 1})
        assert [m.body for m in waiting.reserve("jobs", wait=5)] == [{"n": 1}]


def test_bad_work_queue_parameters_are_named(client):
    from queuey.client import BadRequest

    client.create_queue("jobs")
    with pytest.raises(BadRequest) as info:
        client.reserve("jobs", limit=101, wait=21)
    assert {"limit", "wait"} <= set(info.value.error_msg)


# ----------------------------------------------------------- retries (scripted)

MESSAGE_ID = "0123456789ab1def8123456789abcdef"  # a version-1 UUID's hex
RESERVED = {
    "status": "ok",
    "messages": [
        {
            "message_id": MESSAGE_ID,
            "timestamp": 1.5,
            "partition": 1,
            "body": {"n": 1},
            "priority": 0,
            "attempts": 1,
            "receipt": "1-" + MESSAGE_ID + "-t1",
        }
    ],
}
UNAVAILABLE = {"status": "error", "error_msg": {"storage": "unavailable"}}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("call", "answer"),
    [
        (lambda c: c.reserve("q", wait=0), RESERVED),
        (lambda c: c.ack("q", ["r"]), {"status": "ok", "acked": 1, "failed": {}}),
        (
            lambda c: c.release("q", ["r"]),
            {"status": "ok", "released": 1, "dead_lettered": 0, "failed": {}},
        ),
        (lambda c: c.extend("q", ["r"], 5), {"status": "ok", "extended": 1, "failed": {}}),
    ],
    ids=["reserve", "ack", "release", "extend"],
)
def test_work_queue_calls_are_retried_after_a_503(scripted, call, answer):
    """Each is safe to repeat (see queuey.client.workqueue), unlike a plain POST."""
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0"})
    scripted.answer(200, answer)
    client = make_client(scripted.url, retries=2)
    call(client)
    assert len(scripted.requests) == 2 and client.sleeps == [0]

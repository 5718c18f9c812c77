"""``GET /queue/{name}/messages/{id}/explain``: whether a message is handed out
to a subscription now and, if not, every reason with its values, from the
stored state, on each backend; each reason checked against what a reserve
then does; bad input answered in the JSON error shape."""

from __future__ import annotations

import uuid

import pytest

from queuey import ids
from tests.web.calls import ack, batch, create, release, reserved

pytestmark = pytest.mark.unit


def explain(app, queue: str, message_id: str, status: int = 200, **params) -> dict:
    return app.get(
        f"/queue/{queue}/messages/{message_id}/explain",
        params=params,
        headers=app.auth,
        status=status,
    ).json


def reasons(answer: dict) -> dict[str, dict]:
    return {r["reason"]: r for r in answer["reasons"]}


def posted(app, queue: str, *entries: dict) -> list[str]:
    return [m["message_id"] for m in batch(app, queue, list(entries)).json["messages"]]


def test_a_message_moves_through_every_state_of_its_subscription(app, clock):
    create(app, "jobs", visibility_timeout=30, max_attempts=2, ttl=3600)
    (mid,) = posted(app, "jobs", {"body": {"n": 1}})
    clock.advance(10)  # past any read delay
    new = explain(app, "jobs", mid, subscription="workers")
    print(f"\nnew: {new}")
    assert (new["state"], new["deliverable"], new["reasons"], new["attempts"]) == (
        "new",
        True,
        [],
        0,
    )
    assert new["partition"] == 1 and new["expires_timestamp"] > clock.now_micros() / 1e6

    (got,) = reserved(app, "jobs", subscription="workers")
    leased = explain(app, "jobs", mid, subscription="workers")
    assert (leased["state"], leased["deliverable"]) == ("leased", False)
    assert reasons(leased)["leased"]["until_timestamp"] == pytest.approx(
        clock.now_micros() / 1e6 + 30
    )
    assert reasons(leased)["leased"]["values"] == {"attempts": 1}
    # Another subscription is its own: the message is new there.
    assert explain(app, "jobs", mid, subscription="audit")["deliverable"] is True

    release(app, "jobs", [got["receipt"]], subscription="workers", delay=60, error="disk full")
    released = reasons(explain(app, "jobs", mid, subscription="workers"))
    assert released["released"]["until_timestamp"] == pytest.approx(clock.now_micros() / 1e6 + 60)
    assert released["released"]["values"] == {"attempts": 1, "last_error": "disk full"}
    clock.advance(61)
    again = explain(app, "jobs", mid, subscription="workers")
    assert (again["state"], again["deliverable"], again["attempts"]) == ("released", True, 1)

    (second,) = reserved(app, "jobs", subscription="workers")
    clock.advance(31)  # the lease lapses on its last attempt
    out = explain(app, "jobs", mid, subscription="workers")
    assert out["deliverable"] is False
    assert reasons(out)["out_of_attempts"]["values"] == {
        "attempts": 2,
        "max_attempts": 2,
        "last_error": "disk full",
    }
    assert reserved(app, "jobs", subscription="workers") == []  # dead-lettered on the way
    dead = explain(app, "jobs", mid, subscription="workers")
    print(f"dead: {dead}")
    assert (dead["state"], dead["deliverable"]) == ("dead_lettered", False)
    assert reasons(dead)["dead_lettered"]["values"] == {
        "attempts": 2,
        "last_error": "disk full",
        "dead_letter_queue": "jobs-dead",
    }

    (other,) = reserved(app, "jobs", subscription="audit")
    ack(app, "jobs", [other["receipt"]], subscription="audit")
    done = explain(app, "jobs", mid, subscription="audit")
    assert (done["state"], list(reasons(done))) == ("acked", ["acknowledged"])
    assert second["message_id"] == mid


def test_delay_filter_pause_caps_and_rate_are_each_named(app, clock):
    create(app, "jobs", visibility_timeout=300, ttl=3600, partitions=2)
    later, red, blue, spare = posted(
        app,
        "jobs",
        {"body": {}, "delay": 600, "partition": 1},
        {"body": {}, "attributes": {"colour": "red"}, "partition": 1},
        {"body": {}, "attributes": {"colour": "blue"}, "partition": 2},
        {"body": {}, "partition": 2},
    )
    clock.advance(10)
    delayed = explain(app, "jobs", later)
    assert reasons(delayed)["delayed"]["until_timestamp"] == pytest.approx(
        clock.now_micros() / 1e6 + 590
    )
    assert delayed["state"] == "new" and delayed["deliverable"] is False

    flt = {"colour": ["red", {"prefix": "gr"}]}
    app.put_json("/queue/jobs/subscriptions/reds", {"filter": flt}, headers=app.auth)
    refused = explain(app, "jobs", f"2:{blue}", subscription="reds")
    assert reasons(refused)["filtered"]["values"] == {
        "filter": flt,
        "attribute": "colour",
        "conditions": ["red", {"prefix": "gr"}],
        "value": "blue",
    }
    assert explain(app, "jobs", red, subscription="reds")["deliverable"] is True
    assert [m["message_id"] for m in reserved(app, "jobs", subscription="reds", limit=5)] == [red]
    # Walked past by the reserve: still explained by the filter.
    walked = explain(app, "jobs", blue, subscription="reds")
    assert (walked["state"], list(reasons(walked))) == ("passed", ["filtered"])

    app.put_json("/queue/jobs/subscriptions/capped", {"max_in_flight": 1}, headers=app.auth)
    assert len(reserved(app, "jobs", subscription="capped")) == 1
    capped = reasons(explain(app, "jobs", spare, subscription="capped"))
    assert capped["max_in_flight"]["values"] == {"in_flight": 1, "max_in_flight": 1}

    app.put_json("/queue/jobs/subscriptions/slow", {"rate": 0.5, "burst": 1}, headers=app.auth)
    assert len(reserved(app, "jobs", subscription="slow")) == 1
    rated = reasons(explain(app, "jobs", spare, subscription="slow"))["rate"]
    # 2 s on one process; on Cassandra this process's share of the rate is
    # smaller when other processes of the store are counted live (docs/flow.rst).
    wait = rated["values"]["retry_after"]
    assert rated["values"]["rate"] == 0.5 and 2 - 0.01 <= wait <= 60
    assert rated["until_timestamp"] == pytest.approx(clock.now_micros() / 1e6 + wait, abs=0.01)
    clock.advance(wait)
    assert explain(app, "jobs", spare, subscription="slow")["deliverable"] is True

    app.post("/queue/jobs/subscriptions/idle/pause", headers=app.auth)
    paused = explain(app, "jobs", spare, subscription="idle")
    assert list(reasons(paused)) == ["subscription_paused"]
    assert reserved(app, "jobs", subscription="idle") == []


def test_a_fair_queues_busy_lane_is_named_without_holding_it_back(app, clock):
    create(app, "tenants")
    app.put_json("/queue/tenants", {"fair": True}, headers=app.auth)
    (mid,) = posted(app, "tenants", {"body": {}, "group": "big"})
    clock.advance(10)
    answer = explain(app, "tenants", mid)
    assert answer["deliverable"] is True
    assert reasons(answer)["fair_lane"] == {
        "reason": "fair_lane",
        "blocking": False,
        "until_timestamp": None,
        "values": {"group": "big", "lane": 0},
    }


def test_an_expired_message_and_bad_input(app, clock):
    create(app, "jobs", ttl=60)
    (mid,) = posted(app, "jobs", {"body": {}})
    clock.advance(61)
    gone = explain(app, "jobs", mid)
    assert (gone["state"], gone["partition"], gone["deliverable"]) == ("expired", None, False)
    assert reasons(gone)["expired"]["values"] == {"ttl": 60}

    unknown = ids.min_uuid(clock.now_micros()).hex  # a fresh id nobody posted
    answer = explain(app, "jobs", unknown, status=404)
    assert answer["status"] == "error" and list(answer["error_msg"]) == ["message_id"]
    bad = explain(app, "jobs", "not-an-id", status=400)
    assert list(bad["error_msg"]) == ["message"]
    assert list(explain(app, "jobs", f"9:{mid}", status=400)["error_msg"]) == ["message"]
    assert list(explain(app, "jobs", mid, status=400, subscription="no way")["error_msg"]) == [
        "subscription"
    ]
    assert explain(app, "nope", mid, status=404)["status"] == "error"
    # It takes the key, and another application's key opens none of this one's queues.
    path = f"/queue/jobs/messages/{mid}/explain"
    assert app.get(path, headers=app.reader, status=401).json["status"] == "error"
    other = app.get(path, headers=app.apps.remote_auth, status=(401, 403, 404)).json
    assert other["status"] == "error" and "expired" not in str(other)
    assert uuid.UUID(mid)

"""Work queues over HTTP (docs/api.rst, "Work queues"): queue settings, reserve,
ack, release, extend and stats, on the embedded store.

The app runs on the test's ``ManualClock``: visibility timeouts pass when the
test moves the clock, never by sleeping.
"""

from __future__ import annotations

import re

import pytest

from queuey.model import RECEIPT_PATTERN
from tests.web.calls import ack, create, extend, post, release, reserve, reserved

WORK_FIELDS = ("visibility_timeout", "max_attempts", "dead_letter_queue", "delay")


def work_settings(answer) -> dict:
    return {field: answer[field] for field in WORK_FIELDS}


# -- queue settings -------------------------------------------------------------------
def test_work_settings_on_create_info_list_and_update(app):
    """On each backend: the settings are stored, not only answered."""
    res = create(
        app, "jobs", visibility_timeout=60, max_attempts=3, dead_letter_queue="failed", delay=5
    )
    wanted = {
        "visibility_timeout": 60,
        "max_attempts": 3,
        "dead_letter_queue": "failed",
        "delay": 5,
    }
    assert work_settings(res.json) == wanted
    assert work_settings(app.get("/queue/jobs/info", headers=app.reader).json) == wanted
    listed = app.get("/queue", {"details": "true"}, headers=app.auth).json["queues"]
    assert work_settings(listed[0]) == wanted

    res = app.put_json("/queue/jobs", {"max_attempts": 0, "delay": 0}, headers=app.auth)
    assert work_settings(res.json) == {**wanted, "max_attempts": 0, "delay": 0}
    # An empty dead_letter_queue goes back to the default, <name>-dead.
    res = app.put("/queue/jobs", {"dead_letter_queue": ""}, headers=app.auth)
    assert res.json["dead_letter_queue"] == "jobs-dead"
    assert app.get("/queue/jobs/info", headers=app.reader).json["dead_letter_queue"] == "jobs-dead"


def test_work_settings_defaults_and_form(sqlite_app):
    res = create(sqlite_app, "plain")
    assert work_settings(res.json) == {
        "visibility_timeout": 30,
        "max_attempts": 0,
        "dead_letter_queue": "plain-dead",
        "delay": 0,
    }
    res = sqlite_app.post(
        "/queue",
        {"queue_name": "form", "max_attempts": "4", "visibility_timeout": "7"},
        headers=sqlite_app.auth,
        status=201,
    )
    assert (res.json["max_attempts"], res.json["visibility_timeout"]) == (4, 7)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"visibility_timeout": 0}, "visibility_timeout"),
        ({"visibility_timeout": 43201}, "visibility_timeout"),
        ({"visibility_timeout": "1e9"}, "visibility_timeout"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"dead_letter_queue": "no spaces"}, "dead_letter_queue"),
        ({"dead_letter_queue": "x" * 51}, "dead_letter_queue"),
        ({"dead_letter_queue": "work"}, "dead_letter_queue"),
        ({"delay": -1}, "delay"),
        ({"delay": 61, "ttl": 60}, "delay"),
        ({"queue_name": "w" * 46, "max_attempts": 2}, "max_attempts"),
    ],
)
def test_bad_work_settings_are_400_naming_the_field(sqlite_app, params, field):
    res = create(sqlite_app, params.pop("queue_name", "work"), status=400, **params)
    assert res.json["status"] == "error"
    assert field in res.json["error_msg"], res.json
    assert sqlite_app.get("/queue", headers=sqlite_app.auth).json["queues"] == []


def test_update_keeps_delay_within_ttl(sqlite_app):
    create(sqlite_app, "jobs", ttl=100, delay=50)
    res = sqlite_app.put_json("/queue/jobs", {"ttl": 40}, headers=sqlite_app.auth, status=400)
    assert res.json["error_msg"] == {"ttl": "must be at least the queue's delay (50 s)"}
    res = sqlite_app.put_json("/queue/jobs", {"delay": 101}, headers=sqlite_app.auth, status=400)
    assert res.json["error_msg"] == {"delay": "must be at most the ttl (100 s)"}
    res = sqlite_app.put_json(
        "/queue/jobs", {"dead_letter_queue": "jobs"}, headers=sqlite_app.auth, status=400
    )
    assert res.json["error_msg"] == {"dead_letter_queue": "must not be the queue itself"}
    assert sqlite_app.get("/queue/jobs/info", headers=sqlite_app.auth).json["delay"] == 50


# -- reserve and ack ------------------------------------------------------------------
def test_reserve_hides_a_message_until_its_lease_ends_then_ack_is_final(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", visibility_timeout=30)
    posted = post(app, "jobs", {"n": 1}).json["messages"][0]
    (first,) = reserved(app, "jobs")
    assert first["message_id"] == posted["message_id"]
    assert (first["body"], first["attempts"], first["priority"]) == ({"n": 1}, 1, 0)
    assert (first["timestamp"], first["partition"]) == (posted["timestamp"], posted["partition"])
    assert re.fullmatch(RECEIPT_PATTERN, first["receipt"])
    assert "attributes" not in first

    assert reserved(app, "jobs") == []  # leased
    clock.advance(29.9)
    assert reserved(app, "jobs") == []
    clock.advance(0.2)
    (second,) = reserved(app, "jobs")
    assert (second["message_id"], second["attempts"]) == (first["message_id"], 2)
    assert second["receipt"] != first["receipt"]

    res = ack(app, "jobs", [first["receipt"], second["receipt"]])
    assert res.json == {"status": "ok", "acked": 1, "failed": {first["receipt"]: "expired"}}
    clock.advance(3600)
    assert reserved(app, "jobs") == []
    # Acking again with the same receipt is still fine (a retried ack).
    assert ack(app, "jobs", [second["receipt"]]).json["acked"] == 1


def test_an_expired_message_is_not_delivered_again(sqlite_app, clock):
    create(sqlite_app, "jobs", visibility_timeout=30)
    post(sqlite_app, "jobs", {"n": 1}, ttl=20)
    post(sqlite_app, "jobs", {"n": 2}, ttl=5)
    clock.advance(0.01)
    assert [m["body"]["n"] for m in reserved(sqlite_app, "jobs")] == [1]
    clock.advance(5)  # n=2 expired before anyone reserved it
    assert reserved(sqlite_app, "jobs") == []
    clock.advance(30)  # n=1's lease ended, but it expired during the lease
    assert reserved(sqlite_app, "jobs") == []
    stats = sqlite_app.get("/queue/jobs/stats", headers=sqlite_app.auth).json
    assert stats["messages"] == 0
    assert stats["subscriptions"][0]["available"] == 0


def test_reserve_params_from_query_form_or_json(sqlite_app, sqlite_settle):
    app = sqlite_app
    create(app, "jobs", partitions=2)
    for n in range(6):
        post(app, "jobs", {"n": n}, partition=n % 2 + 1)
    sqlite_settle()
    res = app.post("/queue/jobs/reserve?limit=2&partitions=2", headers=app.auth)
    assert [m["partition"] for m in res.json["messages"]] == [2, 2]
    res = app.post("/queue/jobs/reserve", {"limit": "2", "partitions": "1"}, headers=app.auth)
    assert [m["partition"] for m in res.json["messages"]] == [1, 1]
    res = reserve(app, "jobs", limit=100)
    assert sorted(m["body"]["n"] for m in res.json["messages"]) == [4, 5]


def test_subscriptions_are_independent(sqlite_app):
    create(sqlite_app, "jobs")
    post(sqlite_app, "jobs", {"n": 1})
    a = reserved(sqlite_app, "jobs", subscription="a")
    b = reserved(sqlite_app, "jobs", subscription="b")
    assert [m["body"] for m in a] == [m["body"] for m in b] == [{"n": 1}]
    ack(sqlite_app, "jobs", [a[0]["receipt"]], subscription="a")
    # "default" is a third subscription, which has not had it yet.
    assert [m["attempts"] for m in reserved(sqlite_app, "jobs")] == [1]
    # A receipt only means something in the subscription that got it.
    res = ack(sqlite_app, "jobs", [b[0]["receipt"]], subscription="a")
    assert res.json["acked"] == 0 and list(res.json["failed"]) == [b[0]["receipt"]]
    assert ack(sqlite_app, "jobs", [b[0]["receipt"]], subscription="b").json["acked"] == 1


def test_visibility_timeout_of_a_reserve_overrides_the_queue(sqlite_app, clock):
    create(sqlite_app, "jobs", visibility_timeout=300)
    post(sqlite_app, "jobs", {"n": 1})
    reserved(sqlite_app, "jobs", visibility_timeout=5)
    clock.advance(5.1)
    assert [m["attempts"] for m in reserved(sqlite_app, "jobs")] == [2]


def test_malformed_and_unknown_receipts_are_answered_unknown(sqlite_app):
    create(sqlite_app, "jobs")
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    never = "1-" + "0" * 12 + "11f1" + "8" + "0" * 15 + "-abc"
    res = ack(sqlite_app, "jobs", ["not a receipt", never, got["receipt"]])
    assert res.json == {
        "status": "ok",
        "acked": 1,
        "failed": {"not a receipt": "unknown", never: "unknown"},
    }


def test_a_subscription_never_used_is_fine(sqlite_app):
    create(sqlite_app, "jobs")
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    for action in ("ack", "release", "extend"):
        res = sqlite_app.post_json(
            f"/queue/jobs/{action}",
            {"subscription": "never", "receipts": [got["receipt"]], "visibility_timeout": 5},
            headers=sqlite_app.auth,
        )
        assert res.json["failed"] == {got["receipt"]: "unknown"}, action
    names = [
        s["subscription"]
        for s in sqlite_app.get("/queue/jobs/stats", headers=sqlite_app.auth).json["subscriptions"]
    ]
    assert "default" in names


# -- release and extend ---------------------------------------------------------------
def test_release_makes_a_message_available_after_its_delay_keeping_attempts(sqlite_app, clock):
    create(sqlite_app, "jobs", visibility_timeout=60)
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    res = release(sqlite_app, "jobs", [got["receipt"]], delay=10, error="disk full")
    assert res.json == {"status": "ok", "released": 1, "dead_lettered": 0, "failed": {}}
    assert reserved(sqlite_app, "jobs") == []
    clock.advance(10.1)
    (again,) = reserved(sqlite_app, "jobs")
    assert (again["message_id"], again["attempts"]) == (got["message_id"], 2)
    # The old receipt no longer names the lease.
    res = release(sqlite_app, "jobs", [got["receipt"]])
    assert res.json["failed"] == {got["receipt"]: "expired"}


def test_release_without_delay_is_available_at_once(sqlite_app):
    create(sqlite_app, "jobs", visibility_timeout=600)
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    release(sqlite_app, "jobs", [got["receipt"]])
    assert [m["attempts"] for m in reserved(sqlite_app, "jobs")] == [2]


def test_extend_keeps_a_lease_past_its_timeout(sqlite_app, clock):
    create(sqlite_app, "jobs", visibility_timeout=10)
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    clock.advance(8)
    res = extend(sqlite_app, "jobs", [got["receipt"]], visibility_timeout=60)
    assert res.json == {"status": "ok", "extended": 1, "failed": {}}
    clock.advance(59)  # 67 s after the reserve, 59 s after the extend
    assert reserved(sqlite_app, "jobs") == []
    clock.advance(1.1)
    (again,) = reserved(sqlite_app, "jobs")
    res = extend(sqlite_app, "jobs", [got["receipt"]], visibility_timeout=60)
    assert res.json == {"status": "ok", "extended": 0, "failed": {got["receipt"]: "expired"}}
    assert ack(sqlite_app, "jobs", [again["receipt"]]).json["acked"] == 1


# -- stats ----------------------------------------------------------------------------
def test_stats_count_messages_and_subscription_states(sqlite_app, sqlite_settle):
    app = sqlite_app
    create(app, "jobs", partitions=2)
    for n in range(3):
        post(app, "jobs", {"n": n}, partition=1)
    post(app, "jobs", {"n": 3}, partition=2, delay=60)
    sqlite_settle()
    (got,) = reserved(app, "jobs")
    stats = app.get("/queue/jobs/stats", headers=app.auth).json
    assert stats["status"] == "ok" and stats["queue_name"] == "jobs"
    # (Whether a delayed message counts in its partition yet is the backend's to say.)
    assert [p["partition"] for p in stats["partitions"]] == [1, 2]
    assert stats["partitions"][0]["messages"] == 3
    assert isinstance(stats["oldest_timestamp"], float)
    (sub,) = stats["subscriptions"]
    assert sub["subscription"] == "default"
    assert (sub["available"], sub["in_flight"], sub["delayed"], sub["dead_lettered"]) == (
        2,
        1,
        1,
        0,
    )
    assert sub["oldest_available_timestamp"] > got["timestamp"]


def test_stats_of_a_queue_never_reserved_lists_no_subscription(sqlite_app):
    create(sqlite_app, "jobs")
    stats = sqlite_app.get("/queue/jobs/stats", headers=sqlite_app.auth).json
    assert (stats["messages"], stats["oldest_timestamp"], stats["subscriptions"]) == (0, None, [])
    assert stats["partitions"] == [{"partition": 1, "messages": 0, "oldest_timestamp": None}]


# -- bad input and access -------------------------------------------------------------
@pytest.mark.parametrize(
    "path, body, field",
    [
        ("reserve", {"limit": 0}, "limit"),
        ("reserve", {"limit": 101}, "limit"),
        ("reserve", {"wait": 21}, "wait"),
        ("reserve", {"wait": "1e999999"}, "wait"),
        ("reserve", {"visibility_timeout": 43201}, "visibility_timeout"),
        ("reserve", {"subscription": "a b"}, "subscription"),
        ("reserve", {"subscription": "s" * 51}, "subscription"),
        ("reserve", {"partitions": "3"}, "partitions"),
        ("ack", {}, "receipts"),
        ("ack", {"receipts": []}, "receipts"),
        ("ack", {"receipts": ["1-x"] * 101}, "receipts"),
        ("ack", {"receipts": "1-abc"}, "receipts"),
        ("ack", {"receipts": [7]}, "receipts[0]"),
        ("ack", {"receipts": ["r" * 201]}, "receipts[0]"),
        ("ack", {"receipts": ["x"], "subscription": ""}, "subscription"),
        ("release", {"receipts": ["x"], "delay": -1}, "delay"),
        ("release", {"receipts": ["x"], "delay": 43201}, "delay"),
        ("release", {"receipts": ["x"], "error": "e" * 1025}, "error"),
        ("extend", {"receipts": ["x"]}, "visibility_timeout"),
        ("extend", {"receipts": ["x"], "visibility_timeout": 0}, "visibility_timeout"),
        ("redrive", {"limit": 1001}, "limit"),
    ],
)
def test_bad_work_queue_input_is_400_naming_the_field(sqlite_app, path, body, field):
    create(sqlite_app, "jobs", partitions=2)
    res = sqlite_app.post_json(f"/queue/jobs/{path}", body, headers=sqlite_app.auth, status=400)
    assert res.json["status"] == "error"
    assert field in res.json["error_msg"], res.json


@pytest.mark.parametrize("path", ["ack", "release", "extend"])
def test_receipt_calls_need_a_json_body(sqlite_app, path):
    create(sqlite_app, "jobs")
    res = sqlite_app.post(f"/queue/jobs/{path}", "receipts=1", headers=sqlite_app.auth, status=415)
    assert res.json["status"] == "error"
    res = sqlite_app.post_json(f"/queue/jobs/{path}", [1], headers=sqlite_app.auth, status=400)
    assert res.json["error_msg"] == {"body": "parameters must be a JSON object"}


ROUTES = [
    ("post", "reserve", {}),
    ("post", "ack", {"receipts": ["x"]}),
    ("post", "release", {"receipts": ["x"]}),
    ("post", "extend", {"receipts": ["x"], "visibility_timeout": 5}),
    ("get", "stats", None),
    ("post", "redrive", {}),
]


@pytest.mark.parametrize("method, path, body", ROUTES)
def test_work_queue_routes_need_the_key_and_an_allowed_address(sqlite_app, method, path, body):
    app = sqlite_app
    create(app, "jobs")

    def call(headers, status):
        if method == "get":
            return app.get(f"/queue/jobs/{path}", headers=headers, status=status)
        return app.post_json(f"/queue/jobs/{path}", body, headers=headers, status=status)

    assert list(call({}, 401).json["error_msg"]) == ["X-Application-Name"]
    assert list(call(app.reader, 401).json["error_msg"]) == ["ApplicationKey"]
    res = call({**app.auth, "ApplicationKey": "wrong"}, 401)
    assert list(res.json["error_msg"]) == ["ApplicationKey"]
    assert list(call(app.apps.remote_auth, 403).json["error_msg"]) == ["client_address"]


@pytest.mark.parametrize("method, path, body", ROUTES)
def test_work_queue_routes_of_an_unknown_queue_are_404(sqlite_app, method, path, body):
    if method == "get":
        res = sqlite_app.get(f"/queue/nope/{path}", headers=sqlite_app.auth, status=404)
    else:
        res = sqlite_app.post_json(f"/queue/nope/{path}", body, headers=sqlite_app.auth, status=404)
    assert res.json == {"status": "error", "error_msg": {"queue_name": "no queue named nope"}}


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("get", "reserve", "POST"),
        ("put", "ack", "POST"),
        ("delete", "release", "POST"),
        ("get", "extend", "POST"),
        ("post", "stats", "GET, HEAD"),
        ("get", "redrive", "POST"),
    ],
)
def test_other_methods_are_405_with_allow(sqlite_app, method, path, allow):
    create(sqlite_app, "jobs")
    res = getattr(sqlite_app, method)(f"/queue/jobs/{path}", headers=sqlite_app.auth, status=405)
    assert res.headers["Allow"] == allow
    assert res.json["status"] == "error"


def test_work_queue_calls_are_counted_in_metrics(sqlite_app):
    create(sqlite_app, "jobs")
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    ack(sqlite_app, "jobs", [got["receipt"]])
    text = sqlite_app.get("/metrics").text
    assert "queuey_messages_reserved_total 1.0" in text
    assert "queuey_messages_acked_total 1.0" in text
    assert 'queuey_requests_total{method="POST",route="queue_reserve",status="200"} 1.0' in text
    assert "queuey_reserve_waiting 0.0" in text

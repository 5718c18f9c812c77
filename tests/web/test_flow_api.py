"""Flow control through the REST API, as a producer, a consumer and an
operator see it: pause and resume, rates and their Retry-After, the in-flight
cap, fair queues and message groups, and bad settings named in a 400.

The app is the real one on SQLite; time is the test's manual clock, so the
token buckets refill when the test says so.
"""

from __future__ import annotations

import pytest

from queuey.model import QueueMeta
from queuey.placement import partition_for_key
from tests.web.calls import ack, batch, create, post, read, reserved

UNLIMITED = {"paused": False, "rate": 0.0, "burst": 0, "max_in_flight": 0}


@pytest.fixture
def app(sqlite_app):
    return sqlite_app


def _put(app, queue, body, status=200):
    return app.put_json(f"/queue/{queue}", body, headers=app.auth, status=status)


def _sub(app, queue, subscription, body, status=200):
    path = f"/queue/{queue}/subscriptions/{subscription}"
    return app.put_json(path, body, headers=app.auth, status=status)


def _switch(app, path, status=200):
    return app.post(path, headers=app.auth, status=status)


def _flow(app, queue):
    return app.get(f"/queue/{queue}/info", headers=app.auth).json["flow"]


def _bodies(messages):
    return [m["body"]["n"] for m in messages]


# -- posting -----------------------------------------------------------------
def test_a_paused_queue_refuses_posts_with_503_until_resumed(app, sqlite_settle):
    create(app, "jobs")
    post(app, "jobs", {"n": 0})
    answer = _switch(app, "/queue/jobs/pause").json
    assert answer["queue_name"] == "jobs" and answer["flow"]["queue"]["paused"] is True

    refused = post(app, "jobs", {"n": 1}, status=503)
    assert refused.headers["Retry-After"] == "5"
    assert list(refused.json["error_msg"]) == ["paused"]
    batch(app, "jobs", [{"body": {"n": 2}}], status=503)
    sqlite_settle()
    # Consumers go on: a paused queue only stops posts.
    assert _bodies(reserved(app, "jobs", limit=10)) == [0]

    assert _switch(app, "/queue/jobs/resume").json["flow"]["queue"]["paused"] is False
    post(app, "jobs", {"n": 3})
    # The same through PUT, beside the queue's other settings.
    assert _put(app, "jobs", {"paused": True, "ttl": 600}).json["ttl"] == 600
    post(app, "jobs", {"n": 4}, status=503)
    _put(app, "jobs", {"paused": False})
    post(app, "jobs", {"n": 5})


def test_post_rate_answers_429_with_retry_after_until_the_bucket_refills(app, clock):
    create(app, "jobs")
    flow = _put(app, "jobs", {"post_rate": 2, "post_burst": 2}).json["flow"]["queue"]
    assert (flow["post_rate"], flow["post_burst"]) == (2.0, 2)
    post(app, "jobs", {"n": 1})
    post(app, "jobs", {"n": 2})
    refused = post(app, "jobs", {"n": 3}, status=429)
    assert refused.headers["Retry-After"] == "1"
    assert list(refused.json["error_msg"]) == ["post_rate"]
    clock.advance(1)
    post(app, "jobs", {"n": 3})
    # A batch takes one token per message, all or none.
    clock.advance(1)
    batch(app, "jobs", [{"body": {"n": 4}}, {"body": {"n": 5}}])
    batch(app, "jobs", [{"body": {"n": 6}}], status=429)
    _put(app, "jobs", {"post_rate": 0})  # 0 turns it off
    batch(app, "jobs", [{"body": {"n": n}} for n in range(6, 20)])
    assert _flow(app, "jobs")["queue"]["post_rate"] == 0.0


def test_a_queue_may_be_created_with_its_flow_settings(app):
    answer = create(app, "held", paused=True, post_rate=5, max_length=1000).json
    assert answer["flow"]["queue"] == {
        "paused": True,
        "post_rate": 5.0,
        "post_burst": 5,
        "max_length": 1000,
        "overflow": "reject",
        "fair": False,
    }
    post(app, "held", {"n": 1}, status=503)
    listed = app.get("/queue", params={"details": "true"}, headers=app.auth).json["queues"]
    assert listed[0]["flow"]["queue"]["paused"] is True


def test_settings_come_as_form_fields_too(app):
    create(app, "jobs")
    app.put(
        "/queue/jobs",
        "post_rate=2.5&paused=true&overflow=drop_head",
        headers={**app.auth, "Content-Type": "application/x-www-form-urlencoded"},
    )
    flow = _flow(app, "jobs")["queue"]
    assert (flow["post_rate"], flow["paused"], flow["overflow"]) == (2.5, True, "drop_head")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"post_rate": -1}, "post_rate"),
        ({"post_rate": "fast"}, "post_rate"),
        ({"post_rate": 2_000_000}, "post_rate"),
        ({"post_rate": True}, "post_rate"),
        ({"post_burst": 1.5}, "post_burst"),
        ({"max_length": -3}, "max_length"),
        ({"overflow": "drop_tail"}, "overflow"),
        ({"paused": "maybe"}, "paused"),
        ({"paused": None}, "paused"),
        ({"fair": 2}, "fair"),
    ],
)
def test_a_bad_queue_setting_is_a_400_naming_it_and_changes_nothing(app, body, field):
    create(app, "jobs")
    # Beside good changes, which are not made either.
    res = _put(app, "jobs", {"paused": True, "ttl": 60, **body}, status=400)
    assert list(res.json["error_msg"]) == [field], res.json
    info = app.get("/queue/jobs/info", headers=app.auth).json
    assert info["flow"]["queue"]["paused"] is False and info["ttl"] != 60


def test_fair_is_refused_on_a_fifo_queue(app):
    services = app.app.registry.queuey
    services.queues.create(QueueMeta(app.apps.app, "orders.fifo", fifo=True))
    res = _put(app, "orders.fifo", {"fair": True, "paused": True}, status=400)
    assert list(res.json["error_msg"]) == ["fair"]
    assert _flow(app, "orders.fifo")["queue"]["paused"] is False


# -- groups ------------------------------------------------------------------
def test_a_group_travels_with_its_message_and_places_it(app, sqlite_settle):
    create(app, "events", partitions=8)
    where = partition_for_key("tenant-7", 8)
    posted = post(app, "events", {"n": 0}, group="tenant-7").json["messages"][0]
    assert posted["partition"] == where
    # A partition or a partition_key named wins over the group's.
    assert (
        post(app, "events", {"n": 1}, group="tenant-7", partition=3).json["messages"][0][
            "partition"
        ]
        == 3
    )
    keyed = post(app, "events", {"n": 2}, group="tenant-7", partition_key="k").json
    assert keyed["messages"][0]["partition"] == partition_for_key("k", 8)
    entries = [
        {"body": {"n": 3}, "group": "tenant-9", "attributes": {"trace": "ab"}},
        {"body": {"n": 4}},
    ]
    done = batch(app, "events", entries).json["messages"]
    assert done[0]["partition"] == partition_for_key("tenant-9", 8)
    sqlite_settle()

    seen = {m["body"]["n"]: m for m in read(app, "events", order="ascending").json["messages"]}
    assert seen[0]["group"] == "tenant-7" and "attributes" not in seen[0]
    assert seen[3]["group"] == "tenant-9" and seen[3]["attributes"] == {"trace": "ab"}
    assert "group" not in seen[4]
    leased = {m["body"]["n"]: m for m in reserved(app, "events", limit=10)}
    assert leased[0]["group"] == "tenant-7" and "group" not in leased[4]


@pytest.mark.parametrize("group", ["", "has space", "é", "x" * 129])
def test_a_bad_group_is_a_400_naming_it(app, group):
    create(app, "events")
    res = post(app, "events", {"n": 0}, group=group, status=400)
    assert list(res.json["error_msg"]) == ["group"], res.json
    res = batch(app, "events", [{"body": {}}, {"body": {}, "group": group}], status=400)
    assert list(res.json["error_msg"]) == ["messages[1].group"], res.json


def test_the_group_attribute_is_not_set_by_hand(app):
    create(app, "events")
    entry = {"body": {}, "attributes": {"sqs.group": "sneaky"}}
    res = batch(app, "events", [entry], status=400)
    assert list(res.json["error_msg"]) == ["messages[0].attributes"]


def test_a_fair_queue_serves_a_quiet_group_before_a_flood(
    make_app, sqlite_storage, wrap_app, clock
):
    app = wrap_app(make_app(sqlite_storage, **{"queuey.flow.fair_threshold": "5"}))
    create(app, "tenants", partitions=4)
    assert _put(app, "tenants", {"fair": True}).json["flow"]["queue"]["fair"] is True
    res = post(app, "tenants", {"n": 0}, priority=3, status=400)
    assert list(res.json["error_msg"]) == ["priority"]
    batch(app, "tenants", [{"body": {}, "priority": 1}], status=400)
    for start in range(0, 300, 100):
        flood = [{"body": {"n": n}, "group": "big"} for n in range(start, start + 100)]
        batch(app, "tenants", flood)
    batch(app, "tenants", [{"body": {"n": 1000}, "group": "small"}])
    clock.advance(1)
    first = reserved(app, "tenants", limit=10)
    print(f"fair queue: the quiet group's message came {_bodies(first).index(1000) + 1}th of 10")
    assert 1000 in _bodies(first)


# -- subscriptions -----------------------------------------------------------
def test_a_paused_subscription_hands_out_nothing_and_its_leases_stay(app, sqlite_settle):
    create(app, "jobs")
    batch(app, "jobs", [{"body": {"n": n}} for n in range(3)])
    sqlite_settle()
    (lease,) = reserved(app, "jobs", subscription="w")
    answer = _switch(app, "/queue/jobs/subscriptions/w/pause").json
    assert answer == {
        "status": "ok",
        "subscription": "w",
        "filter": None,
        "flow": {**UNLIMITED, "paused": True},
    }
    batch(app, "jobs", [{"body": {"n": 3}}])  # posts still land
    sqlite_settle()
    assert reserved(app, "jobs", subscription="w", limit=10) == []
    assert len(reserved(app, "jobs", subscription="other", limit=10)) == 4
    assert ack(app, "jobs", [lease["receipt"]], subscription="w").json["acked"] == 1
    assert _flow(app, "jobs")["subscriptions"] == {"w": {**UNLIMITED, "paused": True}}

    _switch(app, "/queue/jobs/subscriptions/w/resume")
    assert _bodies(reserved(app, "jobs", subscription="w", limit=10)) == [1, 2, 3]
    assert _flow(app, "jobs")["subscriptions"] == {}


def test_a_subscription_rate_limits_what_reserves_hand_out(app, clock, sqlite_settle):
    create(app, "jobs")
    batch(app, "jobs", [{"body": {"n": n}} for n in range(10)])
    sqlite_settle()
    flow = _sub(app, "jobs", "w", {"rate": 2}).json["flow"]
    assert (flow["rate"], flow["burst"]) == (2.0, 2)
    assert len(reserved(app, "jobs", subscription="w", limit=10)) == 2
    assert reserved(app, "jobs", subscription="w", limit=10) == []
    clock.advance(0.5)
    assert len(reserved(app, "jobs", subscription="w", limit=10)) == 1
    _sub(app, "jobs", "w", {"rate": 5, "burst": 4})
    clock.advance(10)
    assert len(reserved(app, "jobs", subscription="w", limit=10)) == 4


def test_max_in_flight_caps_leases_until_one_is_finished(app, sqlite_settle):
    create(app, "jobs")
    batch(app, "jobs", [{"body": {"n": n}} for n in range(10)])
    sqlite_settle()
    _sub(app, "jobs", "w", {"max_in_flight": 2})
    first = reserved(app, "jobs", subscription="w", limit=10)
    assert len(first) == 2
    assert reserved(app, "jobs", subscription="w", limit=10) == []
    ack(app, "jobs", [first[0]["receipt"]], subscription="w")
    assert len(reserved(app, "jobs", subscription="w", limit=10)) == 1


def test_put_changes_what_it_names_and_a_bare_body_still_removes_the_filter(app):
    create(app, "jobs")
    flt = {"kind": ["a"]}
    assert _sub(app, "jobs", "w", {"filter": flt}).json["flow"] == UNLIMITED
    # Flow fields alone keep the filter.
    answer = _sub(app, "jobs", "w", {"paused": True, "max_in_flight": 4}).json
    assert answer["filter"] == flt
    assert answer["flow"] == {**UNLIMITED, "paused": True, "max_in_flight": 4}
    # A body naming nothing removes the filter, as it always did; flow stays.
    answer = _sub(app, "jobs", "w", {}).json
    assert answer["filter"] is None and answer["flow"]["paused"] is True
    answer = _sub(app, "jobs", "w", {"filter": flt, "rate": 3}).json
    assert answer["filter"] == flt and answer["flow"]["rate"] == 3.0
    answer = _sub(app, "jobs", "w", {"filter": None, "paused": False}).json
    assert answer["filter"] is None and answer["flow"]["paused"] is False

    shown = app.get("/queue/jobs/subscriptions/w", headers=app.auth).json
    assert shown == {"status": "ok", **answer}
    nothing = app.get("/queue/jobs/subscriptions/never", headers=app.auth).json
    assert nothing == {"status": "ok", "subscription": "never", "filter": None, "flow": UNLIMITED}
    _sub(app, "jobs", "filtered", {"filter": flt})
    listed = app.get("/queue/jobs/subscriptions", headers=app.auth).json["subscriptions"]
    assert [(s["subscription"], s["flow"]["rate"]) for s in listed] == [
        ("filtered", 0.0),
        ("w", 3.0),
    ]


def test_bad_subscription_settings_name_every_field_and_change_nothing(app):
    create(app, "jobs")
    body = {"rate": -2, "max_in_flight": "x", "burst": 1.5, "paused": True}
    res = _sub(app, "jobs", "w", body, status=400)
    assert set(res.json["error_msg"]) == {"rate", "max_in_flight", "burst"}
    res = _sub(app, "jobs", "w", {"paused": True, "filter": {"a": []}}, status=400)
    assert list(res.json["error_msg"]) == ["filter.a"]
    assert app.get("/queue/jobs/subscriptions/w", headers=app.auth).json["flow"] == UNLIMITED
    _switch(app, "/queue/jobs/subscriptions/bad name!/pause", status=400)
    app.get("/queue/jobs/subscriptions/bad name!", headers=app.auth, status=400)
    _switch(app, "/queue/missing/pause", status=404)


def test_pause_and_resume_need_the_key(app):
    create(app, "jobs")
    for path in ("/queue/jobs/pause", "/queue/jobs/subscriptions/w/resume"):
        app.post(path, headers=app.reader, status=401)
    app.get("/queue/jobs/subscriptions/w", headers=app.reader, status=401)
    assert _flow(app, "jobs")["queue"]["paused"] is False


def test_the_description_names_the_flow_fields_routes_and_refusals(app):
    doc = app.get("/openapi.json").json
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    update = paths["/queue/{name}"]["put"]["requestBody"]["content"]["application/json"]
    assert {"paused", "post_rate", "post_burst", "max_length", "overflow", "fair"} <= set(
        update["schema"]["properties"]
    )
    posting = paths["/queue/{name}"]["post"]
    assert "group" in {p["name"] for p in posting["parameters"]}
    assert posting["responses"]["429"]["headers"]["Retry-After"]
    assert {"503", "507"} <= set(paths["/queue/{name}/batch"]["post"]["responses"])
    for action in ("pause", "resume"):
        assert "post" in paths[f"/queue/{{name}}/{action}"]
        assert "post" in paths[f"/queue/{{name}}/subscriptions/{{subscription}}/{action}"]
    assert "get" in paths["/queue/{name}/subscriptions/{subscription}"]
    assert "group" in schemas["Message"]["properties"]
    assert "flow" in schemas["Queue"]["required"]
    assert set(schemas["SubscriptionFlowInfo"]["properties"]) == set(UNLIMITED)

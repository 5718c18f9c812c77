"""The work-queue routes on the real Cassandra node, end to end through HTTP.

One walk through every route (the per-route rules are backend-independent and
tested on the embedded store): reserve, visibility timeout, release, extend,
dead-lettering, stats, redrive, ack, with the app's ManualClock moved past the
read delay instead of sleeping.
"""

from __future__ import annotations

import pytest

from tests.web.calls import ack, create, extend, post, read, release, reserved

pytestmark = pytest.mark.cassandra


@pytest.fixture
def cassandra_app(make_app, cassandra_storage, wrap_app):
    return wrap_app(make_app(cassandra_storage))


def test_work_queue_routes_on_cassandra(cassandra_app, clock):
    app = cassandra_app
    settle = app.app.registry.queuey.settings.read_delay + 0.01
    create(app, "jobs", partitions=2, max_attempts=2, visibility_timeout=10)
    posted = [
        post(app, "jobs", {"n": n}, partition=n % 2 + 1, priority=n).json["messages"][0]
        for n in range(3)
    ]
    clock.advance(settle)

    got = reserved(app, "jobs", limit=10)
    assert [(m["body"]["n"], m["attempts"]) for m in got] == [(2, 1), (1, 1), (0, 1)]
    by_n = {m["body"]["n"]: m for m in got}
    assert reserved(app, "jobs") == []

    # n=0 is acked, n=1 kept by extend, n=2 released with an error.
    assert ack(app, "jobs", [by_n[0]["receipt"]]).json == {"status": "ok", "acked": 1, "failed": {}}
    res = extend(app, "jobs", [by_n[1]["receipt"]], visibility_timeout=100)
    assert res.json["extended"] == 1
    res = release(app, "jobs", [by_n[2]["receipt"]], error="boom")
    assert (res.json["released"], res.json["dead_lettered"]) == (1, 0)
    (again,) = reserved(app, "jobs")
    assert (again["body"]["n"], again["attempts"]) == (2, 2)

    clock.advance(10.1)  # n=2's last lease ends: dead-lettered on the next reserve
    assert reserved(app, "jobs") == []
    clock.advance(settle)
    (letter,) = read(app, "jobs-dead").json["messages"]
    assert letter["body"] == {"n": 2}
    assert letter["attributes"]["source_message_id"] == posted[2]["message_id"]
    assert (letter["attributes"]["attempts"], letter["attributes"]["last_error"]) == ("2", "boom")

    stats = app.get("/queue/jobs/stats", headers=app.auth).json
    (sub,) = stats["subscriptions"]
    assert (sub["subscription"], sub["in_flight"], sub["dead_lettered"]) == ("default", 1, 1)

    res = app.post_json("/queue/jobs-dead/redrive", {}, headers=app.auth).json
    assert (res["moved"], res["reposted"], res["skipped"]) == (1, 0, 0)
    clock.advance(settle)
    assert read(app, "jobs-dead").json["messages"] == []
    (back,) = reserved(app, "jobs")
    assert (back["body"]["n"], back["attempts"]) == (2, 1)
    assert ack(app, "jobs", [back["receipt"], by_n[1]["receipt"]]).json["acked"] == 2
    clock.advance(200)
    assert reserved(app, "jobs", limit=10) == []

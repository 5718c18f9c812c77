"""Schedules through HTTP: the routes on both backends, every bad input a 400
naming its field, 404, 409, the per-application limit, authentication, and a
fuzz of the create body that never gets a 500.

The app runs without a ticker thread and on the test's clock; a test fires
due ticks with ``Schedules.tick()`` where a node's ticker would.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuey import ids
from queuey.core.schedules import Ticker
from queuey.core.services import build_services
from tests.support import wait_until
from tests.web.calls import create, read

TEMPLATE = {"body": {"report": "daily"}, "priority": 3, "attributes": {"kind": "report"}}


def ticker(app):
    """The app's schedule service (what its ticker thread would call)."""
    return app.app.registry.queuey.schedules


def schedule(app, status=201, **fields):
    fields.setdefault("name", "every-minute")
    fields.setdefault("queue", "reports")
    fields.setdefault("message", TEMPLATE)
    if "cron" not in fields and "interval" not in fields:
        fields["interval"] = 60
    return app.post_json("/schedules", fields, headers=app.auth, status=status)


def now(clock) -> int:
    return clock.now_micros() // ids.MICROS


def test_create_list_show_pause_resume_delete(app, clock, settle):
    create(app, "reports", partitions=2)
    made = schedule(app, cron="*/5 * * * *", timezone="Europe/Paris", missed="all").json
    assert made["status"] == "ok" and made["state"] == "active"
    assert (made["name"], made["queue"], made["cron"], made["interval"]) == (
        "every-minute",
        "reports",
        "*/5 * * * *",
        None,
    )
    assert made["message"] == TEMPLATE and made["missed"] == "all" and made["posted"] == 0
    assert made["next_tick"] % 300 == 0 and made["next_tick"] >= now(clock)
    schedule(app, name="hourly", interval=3600)
    listed = app.get("/schedules", headers=app.auth).json["schedules"]
    assert [s["name"] for s in listed] == ["every-minute", "hourly"]

    # The interval schedule's first tick is due at once: it posts the template.
    assert ticker(app).tick() == 1
    settle()
    [message] = read(app, "reports").json["messages"]
    assert message["body"] == {"report": "daily"} and message["priority"] == 3
    tick = app.get("/schedules/hourly", headers=app.auth).json
    assert message["attributes"] == {
        "kind": "report",
        "schedule.name": "hourly",
        "schedule.tick": str(tick["last_tick"]),
    }
    assert tick["posted"] == 1 and tick["next_tick"] == tick["last_tick"] + 3600

    paused = app.post("/schedules/hourly/pause", headers=app.auth).json
    assert paused["paused"] is True and paused["state"] == "paused"
    clock.advance(7200)
    ticker(app).tick()
    assert app.get("/schedules/hourly", headers=app.auth).json["posted"] == 1
    resumed = app.post("/schedules/hourly/resume", headers=app.auth).json
    assert resumed["state"] == "active" and resumed["next_tick"] >= now(clock)

    assert app.delete("/schedules/hourly", headers=app.auth).json == {"status": "ok"}
    app.get("/schedules/hourly", headers=app.auth, status=404)
    gone = app.delete("/schedules/hourly", headers=app.auth, status=404).json
    assert gone == {"status": "error", "error_msg": {"schedule": "no schedule named hourly"}}


def test_a_deleted_queue_shows_the_schedule_stopped(sqlite_app):
    app = sqlite_app
    create(app, "reports")
    schedule(app)
    app.delete("/queue/reports", headers=app.auth)
    ticker(app).tick()
    stopped = app.get("/schedules/every-minute", headers=app.auth).json
    assert stopped["state"] == "stopped" and "reports" in stopped["error"]
    refused = app.post("/schedules/every-minute/resume", headers=app.auth, status=400).json
    assert list(refused["error_msg"]) == ["queue"]


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "0 0 31 2 *"}, "cron"),  # never due
        ({"cron": "* * * * *", "interval": 60}, "cron"),
        ({"interval": 0}, "interval"),
        ({"interval": 31_536_001}, "interval"),
        ({"interval": True}, "interval"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"start": 2000, "end": 1000}, "end"),
        ({"start": -1}, "start"),
        ({"start": "tomorrow"}, "start"),
        ({"end": "2030-01-01T09:00:00" + "0" * 60}, "end"),
        ({"name": "no spaces"}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"queue": "nosuchqueue"}, "queue"),
        ({"missed": "some"}, "missed"),
        ({"message": {"priority": 1}}, "message.body"),
        ({"message": {"body": [1, 2]}}, "message.body"),
        ({"message": {"body": {}, "ttl": 10**9}}, "message.ttl"),
        ({"message": {"body": {}, "priority": 10}}, "message.priority"),
        ({"message": {"body": {}, "partition": 3}}, "message.partition"),
        ({"message": {"body": {}, "ttl": 10, "delay": 20}}, "message.delay"),
        ({"message": {"body": {}, "attributes": {"schedule.tick": "1"}}}, "message.attributes"),
        (
            {"message": {"body": {}, "attributes": dict.fromkeys("abcdefghi", "v")}},
            "message.attributes",
        ),
        ({"message": "hello"}, "message"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(sqlite_app, fields, field):
    app = sqlite_app
    create(app, "reports", partitions=2)
    answer = schedule(app, status=400, **fields).json
    assert answer["status"] == "error" and field in answer["error_msg"], answer


def test_start_and_end_may_be_iso_times_in_the_schedules_zone(sqlite_app):
    create(sqlite_app, "reports", partitions=2)
    made = schedule(
        sqlite_app, timezone="Europe/Paris", start="2030-01-01T09:00", end="1893488400"
    ).json
    # 09:00 in Paris in winter is 08:00 UTC; digits are epoch seconds.
    assert (made["start"], made["end"]) == (1_893_484_800, 1_893_488_400)


def test_bad_bodies_and_paths(sqlite_app):
    app = sqlite_app
    app.post("/schedules", "[1]", headers=app.auth, status=400)
    app.post("/schedules", "not json", headers=app.auth, status=415)
    bad = app.get("/schedules/no%20such", headers=app.auth, status=400).json
    assert list(bad["error_msg"]) == ["schedule"]
    app.put_json("/schedules", {}, headers=app.auth, status=405)
    app.post("/schedules/nope/pause", headers=app.auth, status=404)
    app.post("/schedules/nope/resume", headers=app.auth, status=404)


def test_a_second_schedule_of_a_name_is_a_409(sqlite_app):
    create(sqlite_app, "reports")
    schedule(sqlite_app)
    taken = schedule(sqlite_app, status=409, interval=5).json
    assert list(taken["error_msg"]) == ["name"]


def test_the_application_limit_is_a_clear_error(make_app, sqlite_storage, wrap_app):
    app = wrap_app(make_app(sqlite_storage, **{"queuey.schedules.limit": "2"}))
    create(app, "reports")
    schedule(app, name="a")
    schedule(app, name="b")
    refused = schedule(app, name="c", status=403).json
    assert "queuey.schedules.limit" in refused["error_msg"]["max_schedules"]


@pytest.mark.parametrize(
    "make_headers, status",
    [
        (lambda apps: {}, 401),
        (lambda apps: apps.reader, 401),
        (lambda apps: {**apps.auth, "ApplicationKey": "wrong"}, 401),
        (lambda apps: apps.remote_auth, 403),
    ],
)
def test_every_route_needs_the_key(sqlite_app, make_headers, status):
    app = sqlite_app
    create(app, "reports")
    schedule(app)
    headers = make_headers(app.apps)
    app.get("/schedules", headers=headers, status=status)
    app.get("/schedules/every-minute", headers=headers, status=status)
    app.post_json("/schedules", {"name": "x"}, headers=headers, status=status)
    app.post("/schedules/every-minute/pause", headers=headers, status=status)
    app.delete("/schedules/every-minute", headers=headers, status=status)
    assert app.get("/schedules/every-minute", headers=app.auth).json["paused"] is False


def test_schedules_are_per_application(sqlite_app, wrap_app):
    create(sqlite_app, "reports")
    schedule(sqlite_app)
    remote = wrap_app(sqlite_app.app, remote_addr="10.1.2.3")
    other = remote.apps.remote_auth
    assert remote.get("/schedules", headers=other).json["schedules"] == []
    remote.get("/schedules/every-minute", headers=other, status=404)


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)


def test_the_app_ticks_on_its_own_thread_and_no_worker_does(make_app, sqlite_storage, wrap_app):
    wsgi = make_app(sqlite_storage, **{"queuey.schedules.interval": "0.05"})
    app = wrap_app(wsgi)
    try:
        create(app, "reports")
        schedule(app)  # due at once
        wait_until(
            lambda: app.get("/schedules/every-minute", headers=app.auth).json["posted"] == 1,
            5,
            "the ticker thread to post the first tick",
        )
    finally:
        ticker(app).close()
    services = wsgi.registry.queuey
    worker = build_services(
        services.settings, services.applications, sqlite_storage, services.clock, role="worker"
    )
    assert worker.schedules.ticker.interval == 0


def test_the_ticker_outlives_a_failing_pass():
    calls = []

    def tick() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the store went away")
        return 0

    thread = Ticker(tick, 0.01)
    thread.start()
    try:
        wait_until(lambda: len(calls) >= 3, 5, "passes after a failing one")
    finally:
        thread.close()


json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
fields = {
    "name": st.from_regex(r"\A[a-z]{1,6}\Z") | json_values,
    "queue": st.just("reports") | json_values,
    "cron": st.from_regex(r"\A([0-9*/,\-a-z]{1,6} ){4}[0-9*/,\-a-z]{1,6}\Z") | json_values,
    "interval": st.integers(-5, 40_000_000) | json_values,
    "timezone": st.sampled_from(["UTC", "Europe/Paris", "Nowhere/X", ""]) | json_values,
    "start": st.integers(-5, 2**40) | json_values,
    "end": st.integers(-5, 2**40) | json_values,
    "missed": st.sampled_from(["latest", "all", "x"]) | json_values,
    "paused": st.booleans() | json_values,
    "message": st.fixed_dictionaries(
        {"body": json_values},
        optional={
            "ttl": st.integers(-5, 2**33) | json_values,
            "delay": st.integers(-5, 2**33) | json_values,
            "partition": st.integers(-1, 5) | json_values,
            "priority": st.integers(-1, 12) | json_values,
            "partition_key": st.text(max_size=5) | json_values,
            "attributes": st.dictionaries(st.text(max_size=12), json_values, max_size=10),
        },
    )
    | json_values,
}


@settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=st.fixed_dictionaries({}, optional=fields) | json_values)
def test_fuzzed_create_bodies_never_get_a_500(sqlite_app, body):
    app = sqlite_app
    create(app, "reports", partitions=2, status="*")
    answer = app.post_json("/schedules", body, headers=app.auth, status="*")
    assert answer.status_int in (201, 400, 409), answer.text
    assert answer.json["status"] == ("ok" if answer.status_int == 201 else "error")
    if answer.status_int == 201:
        app.delete(f"/schedules/{answer.json['name']}", headers=app.auth)

"""Per-message fields over HTTP: delay, priority, dedup_id and attributes
(docs/api.rst, "Work queues"), on the embedded store with the app's ManualClock."""

from __future__ import annotations

import pytest

from tests.web.calls import batch, bodies, create, post, read, reserved


def ids_of(messages) -> list[str]:
    return [m["message_id"] for m in messages]


# -- delay ----------------------------------------------------------------------------
def test_a_delayed_message_is_invisible_to_every_reader_until_due(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs")
    late = post(app, "jobs", {"n": "late"}, delay=10).json["messages"][0]
    post(app, "jobs", {"n": "now"})
    clock.advance(0.01)  # past the microseconds a frozen clock's ids step ahead
    assert bodies(read(app, "jobs")) == [{"n": "now"}]
    ref = f"/queue/jobs/messages/{late['partition']}:{late['message_id']}"
    assert app.get(ref, headers=app.reader).json["messages"] == []
    assert [m["body"] for m in reserved(app, "jobs", limit=10)] == [{"n": "now"}]
    clock.advance(9.89)
    assert reserved(app, "jobs") == []
    clock.advance(0.2)
    assert bodies(read(app, "jobs")) == [{"n": "late"}, {"n": "now"}]
    assert [m["body"] for m in reserved(app, "jobs")] == [{"n": "late"}]
    assert ids_of(app.get(ref, headers=app.reader).json["messages"]) == [late["message_id"]]


def test_the_queue_delay_applies_to_messages_without_one(sqlite_app, clock, sqlite_settle):
    app = sqlite_app
    create(app, "slow", delay=30)
    post(app, "slow", {"n": 1})
    batch(app, "slow", [{"body": {"n": 2}}, {"body": {"n": 3}, "delay": 0}])
    sqlite_settle()
    assert bodies(read(app, "slow")) == [{"n": 3}]
    clock.advance(30.1)
    assert sorted(b["n"] for b in bodies(read(app, "slow"))) == [1, 2, 3]


@pytest.mark.parametrize(
    "query, field",
    [
        ({"delay": -1}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"delay": 61, "ttl": 60}, "delay"),
        ({"priority": 10}, "priority"),
        ({"priority": -1}, "priority"),
        ({"dedup_id": ""}, "dedup_id"),
        ({"dedup_id": "d" * 129}, "dedup_id"),
    ],
)
def test_bad_message_fields_are_400(sqlite_app, query, field):
    create(sqlite_app, "jobs")
    res = post(sqlite_app, "jobs", {"a": 1}, status=400, **query)
    assert field in res.json["error_msg"], res.json
    assert read(sqlite_app, "jobs").json["messages"] == []


def test_a_queue_delay_longer_than_the_message_ttl_is_400(sqlite_app):
    create(sqlite_app, "slow", delay=100)
    res = post(sqlite_app, "slow", {"a": 1}, status=400, ttl=50)
    assert res.json["error_msg"] == {
        "ttl": "the queue's delay (100 s) is longer than this message's ttl (50 s)"
    }


# -- priority -------------------------------------------------------------------------
def test_higher_priority_is_reserved_first_and_stream_reads_ignore_it(sqlite_app, sqlite_settle):
    app = sqlite_app
    create(app, "jobs")
    for n, priority in [(1, 0), (2, 9), (3, 5), (4, 9)]:
        post(app, "jobs", {"n": n}, priority=priority)
    batch(app, "jobs", [{"body": {"n": 5}, "priority": 7}])
    sqlite_settle()
    assert [b["n"] for b in bodies(read(app, "jobs", order="ascending"))] == [1, 2, 3, 4, 5]
    got = reserved(app, "jobs", limit=10)
    assert [(m["body"]["n"], m["priority"]) for m in got] == [
        (2, 9),
        (4, 9),
        (5, 7),
        (3, 5),
        (1, 0),
    ]
    # Reads keep id order whatever the priority, and say a priority only when not 0.
    listed = read(app, "jobs", order="ascending").json["messages"]
    assert [m.get("priority") for m in listed] == [None, 9, 5, 9, 7]


# -- dedup ----------------------------------------------------------------------------
def test_a_repeated_dedup_id_stores_nothing_within_the_window(sqlite_app, clock, sqlite_settle):
    app = sqlite_app
    create(app, "jobs")
    first = post(app, "jobs", {"n": 1}, dedup_id="order-7").json["messages"]
    again = post(app, "jobs", {"n": 2}, dedup_id="order-7").json["messages"]
    assert again == first
    in_batch = batch(app, "jobs", [{"body": {"n": 3}, "dedup_id": "order-7"}]).json["messages"]
    assert in_batch == first
    assert bodies(read(app, "jobs")) == [{"n": 1}]
    other = post(app, "jobs", {"n": 4}, dedup_id="order-8").json["messages"]
    assert other != first
    clock.advance(app.app.registry.queuey.settings.dedup_window + 1)
    later = post(app, "jobs", {"n": 5}, dedup_id="order-7").json["messages"]
    assert later != first
    sqlite_settle()
    assert sorted(b["n"] for b in bodies(read(app, "jobs"))) == [1, 4, 5]


def test_dedup_ids_are_per_queue(sqlite_app, sqlite_settle):
    create(sqlite_app, "a")
    create(sqlite_app, "b")
    post(sqlite_app, "a", {"n": 1}, dedup_id="same")
    post(sqlite_app, "b", {"n": 2}, dedup_id="same")
    sqlite_settle()
    assert bodies(read(sqlite_app, "b")) == [{"n": 2}]


# -- attributes -----------------------------------------------------------------------
def test_attributes_come_back_on_every_read_and_only_when_given(sqlite_app, sqlite_settle):
    app = sqlite_app
    create(app, "jobs")
    attributes = {"kind": "resize", "trace": "é-42", "empty": ""}
    posted = batch(
        app, "jobs", [{"body": {"n": 1}, "attributes": attributes}, {"body": {"n": 2}}]
    ).json["messages"]
    sqlite_settle()
    messages = read(app, "jobs", order="ascending").json["messages"]
    assert [m.get("attributes") for m in messages] == [attributes, None]
    assert "attributes" not in messages[1]
    refs = ",".join(f"{m['partition']}:{m['message_id']}" for m in posted)
    fetched = app.get(f"/queue/jobs/messages/{refs}", headers=app.reader).json["messages"]
    assert sorted((m["body"]["n"], m.get("attributes")) for m in fetched) == [
        (1, attributes),
        (2, None),
    ]
    got = reserved(app, "jobs", limit=10)
    assert [(m["body"]["n"], m.get("attributes")) for m in got] == [(1, attributes), (2, None)]


@pytest.mark.parametrize(
    "attributes, field",
    [
        ({f"k{i}": "v" for i in range(11)}, "messages[0].attributes"),
        ({"": "v"}, "messages[0].attributes"),
        ({"k" * 129: "v"}, "messages[0].attributes"),
        ({"k": "v" * 1025}, "messages[0].attributes.k"),
        ({"k": 1}, "messages[0].attributes.k"),
        ({"k": None}, "messages[0].attributes.k"),
        (["k"], "messages[0].attributes"),
    ],
)
def test_bad_attributes_are_400(sqlite_app, attributes, field):
    create(sqlite_app, "jobs")
    res = batch(sqlite_app, "jobs", [{"body": {"a": 1}, "attributes": attributes}], status=400)
    assert any(name.startswith(field) for name in res.json["error_msg"]), res.json
    assert read(sqlite_app, "jobs").json["messages"] == []


def test_ten_attributes_of_the_longest_size_are_fine(sqlite_app):
    create(sqlite_app, "jobs")
    attributes = {f"{i}".ljust(128, "k"): "v" * 1024 for i in range(10)}
    batch(sqlite_app, "jobs", [{"body": {"a": 1}, "attributes": attributes}])
    (message,) = read(sqlite_app, "jobs").json["messages"]
    assert message["attributes"] == attributes

"""The answer models describe what the views write: each answer of a real app
validates against its model (:mod:`queuey.web.answers`, :mod:`queuey.wire`)
and has no field the model does not name, and the client parses it into its
records (:mod:`queuey.client.models`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from queuey import wire
from queuey.client import models as client
from queuey.web import answers
from tests.web.calls import ack, create, extend, post, read, release, reserved


@pytest.fixture
def sqlite_app(make_app, sqlite_storage, wrap_app):
    return wrap_app(make_app(sqlite_storage))


def described(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """``data`` validated by ``model``, which names each of its fields."""
    assert set(data) <= set(model.model_fields), set(data) - set(model.model_fields)
    return model.model_validate(data)


def test_each_answer_is_its_model(sqlite_app):
    app = sqlite_app
    made = create(app, "jobs", partitions=2).json
    described(answers.Queue, made)
    assert client.QueueInfo.from_json(made).name == "jobs"
    described(answers.Queue, app.get("/queue/jobs/info", headers=app.reader).json)
    listing = app.get("/queue", {"details": "true"}, headers=app.auth).json
    described(answers.QueueList, listing)

    posted = post(app, "jobs", {"n": 1}).json
    described(wire.Posted, posted)
    client.PostedMessage.from_json(posted["messages"][0])
    post(app, "jobs", {"n": 2}, priority=3)
    messages = read(app, "jobs").json
    described(wire.Messages, messages)
    assert sorted(client.ReceivedMessage.from_json(m).priority for m in messages["messages"]) == [
        0,
        3,
    ]

    leased = app.post_json("/queue/jobs/reserve", {"limit": 2}, headers=app.auth).json
    described(wire.ReservedAnswer, leased)
    first, second = (client.ReservedMessage.from_json(m) for m in leased["messages"])
    described(wire.ExtendAnswer, extend(app, "jobs", [first.receipt], visibility_timeout=60).json)
    described(wire.AckAnswer, ack(app, "jobs", [first.receipt]).json)
    described(wire.ReleaseAnswer, release(app, "jobs", [second.receipt]).json)

    stats = app.get("/queue/jobs/stats", headers=app.auth).json
    described(wire.StatsAnswer, stats)
    assert client.QueueStats.from_json(stats).subscription() is not None
    described(
        answers.SubscriptionsAnswer, app.get("/queue/jobs/subscriptions", headers=app.auth).json
    )

    message_id = posted["messages"][0]["message_id"]
    done = app.put_json(
        "/queue/jobs/checkpoints/w", {"checkpoints": {"1": message_id}}, headers=app.auth
    ).json
    described(wire.CheckpointsAnswer, done)
    described(wire.Heartbeat, app.get("/__heartbeat__").json)
    described(wire.Version, app.get("/__version__").json)


def test_a_schedule_answer_is_the_client_record(sqlite_app):
    app = sqlite_app
    create(app, "reports")
    fields = {"name": "hourly", "queue": "reports", "interval": 3600, "message": {"body": {}}}
    made = app.post_json("/schedules", fields, headers=app.auth, status=201).json
    described(wire.Schedule, made)
    assert wire.ScheduleInfo.from_json(made).state == "active"
    described(wire.ScheduleList, app.get("/schedules", headers=app.auth).json)
    assert reserved(app, "reports") == []

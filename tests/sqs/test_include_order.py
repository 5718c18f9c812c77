"""The doors only read the app's services (:mod:`queuey.core.services`), so
the app works whatever order the factory includes them in: the SQS endpoint
before the REST API too, each seeing what the other stores and counts."""

from __future__ import annotations

import datetime
import json

import pytest

import queuey.app
from tests.sqs.signing import sqs_json_call
from tests.support import SQS_SECRET


@pytest.mark.parametrize("order", ["as shipped", "reversed"])
def test_the_doors_work_in_any_order(
    order, monkeypatch, make_app, sqlite_storage, wrap_app, test_apps, clock
):
    if order == "reversed":
        monkeypatch.setattr(queuey.app, "DOORS", tuple(reversed(queuey.app.DOORS)))
    app = wrap_app(make_app(sqlite_storage))
    when = datetime.datetime.fromtimestamp(clock.now_micros() / 1e6, datetime.UTC)

    def sqs(action: str, **params):
        answer = sqs_json_call(app, when, test_apps.app, SQS_SECRET, action, **params)
        assert answer.status_int == 200, answer.body
        return json.loads(answer.body)

    url = sqs("CreateQueue", QueueName="jobs")["QueueUrl"]
    sqs("SendMessage", QueueUrl=url, MessageBody="from sqs")
    app.post_json("/queue/jobs", {"from": "rest"}, headers=app.auth, status=201)

    services = app.app.registry.queuey
    assert services.metrics.posted._value.get() == 2  # one core post for both doors
    reserved = app.post("/queue/jobs/reserve", {"limit": "10"}, headers=app.auth).json
    assert len(reserved["messages"]) == 2
    assert "jobs" in app.get("/queue", headers=app.auth).json["queues"]

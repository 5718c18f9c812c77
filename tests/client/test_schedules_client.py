"""The client's schedule and subscription-filter calls against a live server."""

from __future__ import annotations

import pytest

from queuey.client import BadRequest, Conflict, NotFound, ScheduleInfo

MESSAGE = {"body": {"report": "daily"}}


def test_schedule_calls_create_list_pause_resume_delete(client):
    client.create_queue("reports", partitions=1)
    made = client.create_schedule(
        {"name": "nightly", "queue": "reports", "cron": "0 2 * * *", "message": MESSAGE}
    )
    assert isinstance(made, ScheduleInfo)
    assert (made.name, made.cron, made.state, made.message) == (
        "nightly",
        "0 2 * * *",
        "active",
        MESSAGE,
    )
    with pytest.raises(Conflict):
        client.create_schedule(
            {"name": "nightly", "queue": "reports", "interval": 60, "message": MESSAGE}
        )
    with pytest.raises(BadRequest) as refused:
        client.create_schedule(
            {"name": "x", "queue": "reports", "cron": "61 * * * *", "message": MESSAGE}
        )
    assert "cron" in refused.value.error_msg

    assert [s.name for s in client.list_schedules()] == ["nightly"]
    assert client.pause_schedule("nightly").state == "paused"
    assert client.get_schedule("nightly").paused
    assert client.resume_schedule("nightly").state == "active"
    client.delete_schedule("nightly")
    assert client.list_schedules() == []
    with pytest.raises(NotFound):
        client.get_schedule("nightly")


def test_subscription_filter_calls(client):
    client.create_queue("orders", partitions=1)
    reds = {"colour": ["red"]}
    assert client.set_subscription_filter("orders", "reds", reds) == reds
    assert client.subscription_filters("orders") == {"reds": reds}
    assert client.set_subscription_filter("orders", "reds", None) is None
    assert client.subscription_filters("orders") == {}

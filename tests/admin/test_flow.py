"""Flow control on the admin pages: pause and resume posting and subscriptions,
the limits forms (only changed fields saved, errors per field), and the queue
list's paused / throttled / limited states."""

from __future__ import annotations

import re

import pytest

from queuey.model import QueueMeta
from tests.admin.conftest import csrf_of
from tests.web.calls import create, post, reserved


def info(admin, queue) -> dict:
    return admin.get(f"/queue/{queue}/info", headers=admin.auth).json["flow"]


def send(admin, queue, action, status=303, **fields):
    """POST one of the queue page's flow forms, with the page's CSRF token."""
    token = csrf_of(admin.get(f"/admin/queue/{queue}"))
    return admin.post(
        f"/admin/queue/{queue}/{action}", {"csrf_token": token, **fields}, status=status
    )


def list_row(admin, queue) -> str:
    page = admin.get("/admin/").text
    row = re.search(
        rf'<tr>\s*<td data-label="Queue"><a href="/admin/queue/{queue}">.*?</tr>', page, re.S
    )
    assert row, page
    return row.group(0)


def flow_cell(admin, queue) -> str:
    cell = re.search(
        r'<td data-label="Flow" class="flow-state">(.*?)</td>', list_row(admin, queue), re.S
    )
    return " ".join(re.findall(r">([a-z]+)</span>", cell.group(1))) or cell.group(1).strip()


@pytest.fixture
def orders(admin):
    create(admin, "orders")
    return "orders"


def test_pausing_posting_refuses_posts_until_resumed(admin, orders):
    page = admin.get("/admin/queue/orders")
    assert page.html.select_one("#posting-state").text == "open"
    done = page.forms["posting-form"].submit(status=303)
    assert done.location.endswith("/admin/queue/orders#flow")
    page = done.follow()
    assert "Paused posting to queue orders" in page.text
    assert page.html.select_one("#posting-state").text == "paused"
    refused = post(admin, orders, {"n": 1}, status=503)
    assert "paused" in refused.json["error_msg"] and refused.headers["Retry-After"]
    assert flow_cell(admin, orders) == "paused"
    assert info(admin, orders)["queue"]["paused"] is True

    page.forms["posting-form"].submit(status=303)  # now the resume button
    post(admin, orders, {"n": 1})
    assert flow_cell(admin, orders) == "-"


def test_queue_limits_are_saved_and_shown(admin, orders):
    form = admin.get("/admin/queue/orders").forms["queue-flow-form"]
    form["post_rate"] = "2.5"
    form["post_burst"] = "5"
    form["max_length"] = "1000"
    form["overflow"] = "drop_head"
    form["fair"] = True
    page = form.submit(status=303).follow()
    assert "Changed the flow limits of queue orders" in page.text
    assert info(admin, orders)["queue"] == {
        "paused": False,
        "post_rate": 2.5,
        "post_burst": 5,
        "max_length": 1000,
        "overflow": "drop_head",
        "fair": True,
    }
    shown = page.forms["queue-flow-form"]
    assert (shown["post_rate"].value, shown["max_length"].value) == ("2.5", "1000")
    assert shown["overflow"].value == "drop_head" and shown["fair"].checked
    assert flow_cell(admin, orders) == "limited"

    shown["post_rate"] = ""  # empty: no limit
    shown.submit(status=303)
    assert info(admin, orders)["queue"]["post_rate"] == 0


def test_only_the_fields_changed_are_saved(admin, orders):
    """Two operators at once: each one's change survives the other's form."""
    stale = admin.get("/admin/queue/orders").forms["queue-flow-form"]
    admin.put_json("/queue/orders", {"max_length": 50}, headers=admin.auth)
    stale["post_rate"] = "10"
    stale.submit(status=303)
    flow = info(admin, orders)["queue"]
    assert (flow["post_rate"], flow["max_length"]) == (10, 50)
    again = send(admin, orders, "flow", **{"shown.post_rate": "10", "post_rate": "10"})
    assert "Nothing changed" in again.follow().text


def test_bad_values_are_named_next_to_their_fields_and_nothing_changes(admin):
    services = admin.app.registry.queuey
    services.queues.create(QueueMeta(admin.apps.app, "tasks.fifo", fifo=True))  # as SQS does
    form = admin.get("/admin/queue/tasks.fifo").forms["queue-flow-form"]
    assert "disabled" in form["fair"].attrs
    form["post_rate"] = "fast"
    form["max_length"] = "-3"
    res = form.submit(status=400)
    assert "Nothing was changed" in res.text
    errors = [e.text for e in res.html.select("#queue-flow-form .field-error")]
    assert any("messages per second" in e for e in errors)
    assert any("whole number" in e for e in errors)
    kept = res.forms["queue-flow-form"]
    assert (kept["post_rate"].value, kept["max_length"].value) == ("fast", "-3")
    assert info(admin, "tasks.fifo")["queue"]["post_rate"] == 0
    # Values the core refuses come back the same way, and a FIFO queue is never fair.
    res = send(admin, "tasks.fifo", "flow", status=400, post_rate="2000000")
    assert "at most 1e+06" in res.html.select_one("#queue-flow-form .field-error").text
    res = send(admin, "tasks.fifo", "flow", status=400, fair="on")
    assert "FIFO" in res.html.select_one("#queue-flow-form .field-error").text
    assert info(admin, "tasks.fifo")["queue"] == {
        "paused": False,
        "post_rate": 0,
        "post_burst": 0,
        "max_length": 0,
        "overflow": "reject",
        "fair": False,
    }


def test_a_subscription_is_limited_paused_and_resumed_from_its_row(admin, orders, settle):
    post(admin, orders, {"n": 0})
    settle()
    assert len(reserved(admin, orders, limit=1)) == 1  # "default" is now listed
    page = admin.get("/admin/queue/orders")
    assert page.html.select_one('tr[data-subscription="default"]') is not None
    send(admin, orders, "flow", subscription="default", rate="5", max_in_flight="2")
    assert info(admin, orders)["subscriptions"]["default"] == {
        "paused": False,
        "rate": 5,
        "burst": 5,
        "max_in_flight": 2,
    }
    row = admin.get("/admin/queue/orders").html.select_one('tr[data-subscription="default"]')
    assert [i["value"] for i in row.select("input[name=rate], input[name=max_in_flight]")] == [
        "5",
        "2",
    ]

    send(admin, orders, "pause", subscription="default")
    post(admin, orders, {"n": 1})
    settle()
    assert reserved(admin, orders, limit=5) == []
    row = admin.get("/admin/queue/orders").html.select_one('tr[data-subscription="default"]')
    assert row.select_one(".state").text == "paused"
    assert "Resume" in row.select_one("form.sub-pause button").text
    assert flow_cell(admin, orders) == "paused limited"
    assert "subscription default" in list_row(admin, orders)  # the tag's title says which
    send(admin, orders, "resume", subscription="default")
    assert [m["body"]["n"] for m in reserved(admin, orders, limit=5)] == [1]


def test_another_subscriptions_limits_and_a_bad_name(admin, orders):
    send(admin, orders, "flow", subscription="later", max_in_flight="3", **{"shown.rate": ""})
    assert info(admin, orders)["subscriptions"]["later"]["max_in_flight"] == 3
    assert (
        "later" in admin.get("/admin/queue/orders").html.select_one("table.flow-subscriptions").text
    )
    res = send(admin, orders, "flow", status=400, subscription="not ok!", rate="1")
    other = res.html.select_one("tr.other")
    assert other.select_one("input[name=subscription]")["value"] == "not ok!"
    assert "letters" in other.select_one(".field-error").text
    res = send(admin, orders, "pause", subscription="<b>x</b>").follow()
    assert "<b>x</b>" not in res.text and not info(admin, orders)["queue"]["paused"]


def test_a_recent_throttle_shows_in_the_list_for_a_minute(admin, orders):
    admin.put_json("/queue/orders", {"post_rate": 1, "post_burst": 1}, headers=admin.auth)
    post(admin, orders, {"n": 1})
    post(admin, orders, {"n": 2}, status=429)  # the frozen clock adds no token
    assert flow_cell(admin, orders) == "throttled limited"
    metrics = admin.app.registry.queuey.metrics
    later = metrics.now() + 61
    metrics.now = lambda: later
    assert flow_cell(admin, orders) == "limited"


def test_the_forms_need_the_csrf_token(admin, orders):
    res = admin.post("/admin/queue/orders/pause", {"subscription": ""}, status=400)
    assert "security token" in res.text
    assert info(admin, orders)["queue"]["paused"] is False

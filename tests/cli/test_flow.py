"""``queuey flow`` against a live Queuey: show (text and JSON), set the queue's
and a subscription's limits, pause and resume both, and every refusal as one
line, no traceback."""

from __future__ import annotations

import json

import pytest
import requests

from queuey.cli import main
from tests.support import KEY


@pytest.fixture
def orders(client):
    client.create_queue("orders")
    return "orders"


def shown(queuey, queue="orders") -> dict:
    result = queuey("flow", "show", queue, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_set_show_and_turn_off_limits(queuey, orders):
    result = queuey(
        "flow", "set", orders, "--post-rate", "20", "--max-length", "5000", "--fair", "on"
    )
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "queue orders: posting open",
        "  post_rate   20/s",
        "  post_burst  20",
        "  max_length  5,000",
        "  overflow    reject",
        "  fair        on",
    ]
    result = queuey("flow", "set", orders, "--subscription", "mail", "--rate", "0.5")
    assert result.code == 0, result.err
    assert result.out.strip() == (
        "subscription mail of queue orders: delivering, rate 0.5/s, burst 1, max in flight -"
    )
    queuey("flow", "set", orders, "--subscription", "audit", "--max-in-flight", "3")

    result = queuey("flow", "show", orders)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[:6] == [
        "queue orders: posting open",
        "  post_rate   20/s",
        "  post_burst  20",
        "  max_length  5,000",
        "  overflow    reject",
        "  fair        on",
    ]
    assert lines[6].split() == ["subscription", "state", "rate", "burst", "max", "in", "flight"]
    assert lines[7].split() == ["audit", "delivering", "-", "-", "3"]
    assert lines[8].split() == ["mail", "delivering", "0.5/s", "1", "-"]

    assert shown(queuey)["queue"] == {
        "paused": False,
        "post_rate": 20.0,
        "post_burst": 20,
        "max_length": 5000,
        "overflow": "reject",
        "fair": True,
    }
    queuey("flow", "set", orders, "--post-rate", "0", "--fair", "off")
    after = shown(queuey)
    assert (after["queue"]["post_rate"], after["queue"]["fair"]) == (0, False)
    assert after["queue"]["max_length"] == 5000  # not given: left as it was
    assert after["subscriptions"]["audit"]["max_in_flight"] == 3


def test_pause_and_resume_posting_and_a_subscription(queuey, orders, server):
    result = queuey("flow", "pause", orders)
    assert (result.code, result.out) == (0, "paused posting to queue orders\n"), result.err
    headers = {"X-Application-Name": server.application, "ApplicationKey": KEY}
    refused = requests.post(
        f"{server.url}/queue/orders", json={"n": 1}, headers=headers, timeout=10
    )
    assert refused.status_code == 503 and "paused" in refused.json()["error_msg"]
    assert queuey("flow", "show", orders).out.startswith("queue orders: posting PAUSED")

    result = queuey("flow", "pause", orders, "--subscription", "mail")
    assert result.out == "paused subscription mail of queue orders\n", result.err
    assert shown(queuey)["subscriptions"]["mail"]["paused"] is True
    assert queuey("flow", "resume", orders, "--subscription", "mail").code == 0
    result = queuey("flow", "resume", orders)
    assert (result.code, result.out) == (0, "resumed posting to queue orders\n"), result.err
    assert shown(queuey)["queue"]["paused"] is False


def test_mistakes_and_refusals_are_one_line(queuey, orders):
    mixed = queuey("flow", "set", orders, "--rate", "5")
    assert mixed.code == 2 and "--rate: a setting of a subscription" in mixed.err
    mixed = queuey("flow", "set", orders, "--subscription", "mail", "--post-rate", "5")
    assert mixed.code == 2 and "--post-rate: a setting of a queue" in mixed.err
    nothing = queuey("flow", "set", orders)
    assert nothing.code == 2 and "at least one setting" in nothing.err

    refused = queuey("flow", "set", orders, "--post-rate", "2000000")
    assert refused.code == 1
    assert refused.err.startswith("queuey flow: post_rate: ") and "1000000" in refused.err
    missing = queuey("flow", "show", "nope")
    assert missing.code == 1 and "nope" in missing.err
    for result in (mixed, nothing, refused, missing):
        assert "Traceback" not in result.err


def test_bad_numbers_stop_before_any_call(capsys):
    for option, text in (("--post-burst", "-1"), ("--post-rate", "1e999"), ("--fair", "yes")):
        with pytest.raises(SystemExit) as stopped:
            main(["flow", "set", "orders", option, text])
        assert stopped.value.code == 2
        assert option in capsys.readouterr().err

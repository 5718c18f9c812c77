"""Queue lengths on the server as shipped (granian, 2 worker processes and the
refresher process, queuey.server): the refresher measures a queue with a
``max_length`` on every pass and publishes the figures, the posts since are
counted in a file every process of the server shares, so a full queue
refuses posts whichever worker answers; the refresher trims a ``drop_head``
queue, and the messages it dropped reach ``/metrics`` from the refresher
process's counter."""

from __future__ import annotations

import re
import time

import pytest
import requests

from queuey.clock import SYSTEM_CLOCK
from queuey.core.queues import Queues
from queuey.storage.sqlite import SQLiteStorage
from tests.support import KEY, wait_until

pytestmark = pytest.mark.slow

#: Seconds between the refresher's passes here (queuey.stats.interval).
INTERVAL = 0.5
DEADLINE = 30.0


def headers(app: str) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": KEY}


def metric(url: str, name: str, queue: str) -> float | None:
    text = requests.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf'^{name}\{{[^}}]*queue="{queue}"[^}}]*\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_lengths_and_trims_hold_across_workers(make_api_node, test_apps, tmp_path):
    node = make_api_node(
        "flow",
        server="granian",
        **{"queuey.stats.interval": str(INTERVAL), "queuey.limits.max_requests_per_second": "0"},
    )
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    auth = headers(test_apps.app)
    for name in ("bounded", "head"):
        requests.post(f"{node.url}/queue", json={"queue_name": name}, headers=auth, timeout=10)
    # The settings written as another process of the host would: every
    # worker sees them at once (SQLite's shared metadata counter).
    store = SQLiteStorage(tmp_path / "shared.sqlite3", SYSTEM_CLOCK, sweep_interval=0)
    try:
        queues = Queues(store)
        queues.update(test_apps.app, "bounded", attributes_set={"flow.max_length": "5"})
        queues.update(
            test_apps.app,
            "head",
            attributes_set={"flow.max_length": "5", "flow.overflow": "drop_head"},
        )
    finally:
        store.close()

    def post(queue: str, n: int) -> int:
        # A fresh connection each time: the kernel spreads them over the workers.
        return requests.post(
            f"{node.url}/queue/{queue}", json={"n": n}, headers=auth, timeout=10
        ).status_code

    started = time.monotonic()
    assert [post("bounded", n) for n in range(5)] == [201] * 5
    head = [post("head", n) for n in range(12)]
    assert head == [201] * 12  # drop_head takes every post
    wait_until(
        lambda: metric(node.url, "queuey_queue_depth", "bounded") == 5,
        DEADLINE,
        "the refresher to measure the bounded queue",
    )
    refused = [post("bounded", n) for n in range(6)]
    measured = time.monotonic() - started
    wait_until(
        lambda: metric(node.url, "queuey_flow_dropped_total", "head") == 7,
        DEADLINE,
        lambda: (
            f"7 dropped in /metrics, not {metric(node.url, 'queuey_flow_dropped_total', 'head')}"
        ),
    )
    trimmed = time.monotonic() - started
    kept = requests.get(
        f"{node.url}/queue/head", params={"order": "ascending"}, headers=auth, timeout=10
    ).json()["messages"]
    print(
        f"\n[granian, 2 workers, interval {INTERVAL}s] after the measurement "
        f"({measured:.2f}s): bounded answered {refused}; head trimmed to "
        f"{[m['body']['n'] for m in kept]} ({trimmed:.2f}s)"
    )
    assert refused == [507] * 6
    assert [m["body"]["n"] for m in kept] == list(range(7, 12))

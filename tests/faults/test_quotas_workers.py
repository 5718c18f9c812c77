"""Isolation between applications on the server as shipped (granian, 2 worker
processes): an application's requests per second are its rate for the whole
server, whichever worker each connection lands on (the buckets are shared
through the server's directory, queuey.core.quotas), while its neighbour is served
throughout; its queue cap holds across workers too."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import requests

from tests.support import KEY

pytestmark = pytest.mark.slow

RATE, BURST = 2, 10

APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8
max_requests_per_second = {rate}
max_burst = {burst}
max_queues = 3

[application:{app}-quiet]
keys = plain:{key}
allow = 127.0.0.0/8
"""


def headers(app: str) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": KEY}


def test_rate_and_queue_cap_hold_across_two_workers(make_api_node, tmp_path, test_apps):
    apps = tmp_path / "quota-apps.ini"
    apps.write_text(
        APPLICATIONS.format(app=test_apps.app, key=KEY, rate=RATE, burst=BURST), encoding="utf-8"
    )
    node = make_api_node(
        "quotas",
        server="granian",
        **{"queuey.applications": str(apps), "queuey.limits.throttle_hold": "0"},
    )
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    flood, quiet = headers(test_apps.app), headers(f"{test_apps.app}-quiet")

    # The queue cap, on fresh connections (so across workers): 3 of 4.
    created = []
    for n in range(4):
        res = requests.post(
            f"{node.url}/queue", json={"queue_name": f"q{n}"}, headers=flood, timeout=10
        )
        created.append(res.status_code)
    assert created == [201, 201, 201, 403]
    left = BURST - 4  # tokens those four took

    statuses: Counter[int] = Counter()
    quiet_statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def call(who: dict, into: Counter, count: int) -> None:
        for _ in range(count):
            # A fresh connection each time: the kernel spreads them over the workers.
            res = requests.get(f"{node.url}/queue", headers=who, timeout=10)
            with lock:
                into[res.status_code] += 1
            if res.status_code == 429:
                assert res.json()["status"] == "error"
                assert int(res.headers["Retry-After"]) >= 1

    started = time.monotonic()
    threads = [threading.Thread(target=call, args=(flood, statuses, 20)) for _ in range(4)]
    threads.append(threading.Thread(target=call, args=(quiet, quiet_statuses, 40)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    elapsed = time.monotonic() - started
    print(
        f"\n[granian, 2 workers] flood: {dict(statuses)} in {elapsed:.2f}s "
        f"(limit {RATE}/s, {left} tokens left of a burst of {BURST}); quiet: {dict(quiet_statuses)}"
    )
    # One budget for the whole server: each worker alone would admit its own burst.
    assert left <= statuses[200] <= left + RATE * elapsed + 1
    assert set(statuses) == {200, 429}
    assert quiet_statuses == Counter({200: 40})

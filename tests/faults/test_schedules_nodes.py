"""Once per tick across API nodes, with one of them killed across a tick.

Two API nodes (granian, each with its refresher process running the schedule
ticker) share the Cassandra node. A schedule posts every 2 seconds; one node
is killed with ``kill -9`` (every process of it) just as a tick falls due,
stays dead across the next ticks, and is started again. Every tick from the
first to the last recorded one must be in the queue exactly once: none lost
while a node died (the other posts it, or posts it again after a death
between post and compare-and-set, answered by the dedup id), none doubled
by two nodes firing the same tick.

The schedule's ``missed`` policy is ``all``, so a pass running late on a busy
box posts the tick it is late for rather than skipping it (which ``latest``
may, by design): what is checked is exactly-once, not punctuality.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
import requests

from queuey.clock import SYSTEM_CLOCK
from queuey.model import ReadQuery
from queuey.model.schedules import TICK_ATTRIBUTE
from queuey.storage.cassandra import load_from_config
from tests.support import KEY, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.cassandra]

INTERVAL = 2
#: The ticker's pass interval on each node (seconds).
TICKER = {"queuey.schedules.interval": "0.5"}


def _headers(app: str) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": KEY}


def _schedule(url: str, app: str) -> dict:
    answer = requests.get(f"{url}/schedules/beat", headers=_headers(app), timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _posted_ticks(cassandra_settings, app: str, queue: str) -> Counter:
    """How many messages the queue holds for each tick, read straight from
    the store (no read delay to wait out)."""
    storage = load_from_config(cassandra_settings, SYSTEM_CLOCK)
    try:
        meta = storage.get_queue(app, queue)
        found = storage.read_messages(
            meta,
            ReadQuery(
                partitions=meta.partition_numbers,
                now_micros=SYSTEM_CLOCK.now_micros() + 10**6,
                limit=1000,
                order="ascending",
            ),
        )
    finally:
        storage.close()
    return Counter(int(m.attributes[TICK_ATTRIBUTE]) for m in found)


def test_each_tick_is_posted_once_with_a_node_killed_across_a_tick(
    make_api_node, test_apps, cassandra_settings
):
    started = time.monotonic()
    first = make_api_node("a", backend="cassandra", server="granian", **TICKER)
    second = make_api_node("b", backend="cassandra", server="granian", **TICKER)
    assert first.workers("refresher") and second.workers("refresher")
    app, queue = test_apps.app, f"beats{int(time.time())}"
    auth = _headers(app)
    made = requests.post(
        f"{first.url}/queue", json={"queue_name": queue, "partitions": 2}, headers=auth, timeout=10
    )
    assert made.status_code == 201, made.text
    start = int(time.time()) + 2
    made = requests.post(
        f"{first.url}/schedules",
        json={
            "name": "beat",
            "queue": queue,
            "interval": INTERVAL,
            "start": start,
            "missed": "all",
            "message": {"body": {"beat": True}},
        },
        headers=auth,
        timeout=10,
    )
    assert made.status_code == 201, made.text

    # Let both nodes tick a few times, then kill one as a tick falls due.
    wait_until(lambda: _schedule(second.url, app)["posted"] >= 3, 30, "three ticks", 0.2)
    due = _schedule(second.url, app)["next_tick"]
    time.sleep(max(0.0, due - time.time()))
    first.kill()
    killed_at = due
    # Across two more ticks with one node only, then the killed node comes back.
    wait_until(
        lambda: (_schedule(second.url, app)["last_tick"] or 0) >= killed_at + 2 * INTERVAL,
        30,
        "ticks while a node is dead",
        0.2,
    )
    again = make_api_node("a-again", backend="cassandra", server="granian", **TICKER)
    after = _schedule(again.url, app)["last_tick"]
    wait_until(
        lambda: _schedule(again.url, app)["last_tick"] >= after + 2 * INTERVAL,
        30,
        "ticks after the restart",
        0.2,
    )
    requests.post(f"{again.url}/schedules/beat/pause", headers=auth, timeout=10)
    time.sleep(1.0)  # a pass that read the schedule before the pause ends its post
    last = _schedule(again.url, app)["last_tick"]

    counts = _posted_ticks(cassandra_settings, app, queue)
    # A pass that read the schedule just before the pause may still post its
    # tick (its compare-and-set then loses): that tick counts too.
    latest = max(counts)
    assert latest <= last + INTERVAL, (latest, last)
    expected = list(range(start, latest + 1, INTERVAL))
    duplicated = sorted(t for t, n in counts.items() if n > 1)
    missing = [t for t in expected if t not in counts]
    extra = sorted(set(counts) - set(expected))
    print(
        f"\n[schedules, 2 granian nodes on Cassandra, kill -9 of one at tick {killed_at - start}s]"
        f" ticks expected {len(expected)} / posted {sum(counts.values())} /"
        f" duplicated {len(duplicated)} / missing {len(missing)} / unexpected {len(extra)};"
        f" wall time {time.monotonic() - started:.1f}s"
    )
    assert not duplicated, duplicated
    assert not missing, missing
    assert not extra, extra
    assert _schedule(again.url, app)["posted"] == len(range(start, last + 1, INTERVAL))

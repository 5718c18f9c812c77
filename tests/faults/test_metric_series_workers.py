"""A deleted queue leaves ``/metrics`` on the server as shipped (granian, two
worker processes and the refresher process): 100 cycles of create, throttle
(a post to the paused queue) and delete leave no series naming any of those
queues, whichever worker answers, and a queue created again under a deleted
one's name shows only its own counts (queuey.core.queuecounters)."""

from __future__ import annotations

import re
import time

import pytest
import requests

from tests.support import KEY, wait_until

pytestmark = pytest.mark.slow

CYCLES = 100
#: Seconds between the refresher's passes (queuey.stats.interval).
INTERVAL = "0.5"
SCRAPES = 4  # a new connection each: the kernel spreads them over the workers


def scrapes(url: str) -> list[str]:
    return [requests.get(f"{url}/metrics", timeout=10).text for _ in range(SCRAPES)]


def throttled(text: str, queue: str) -> float | None:
    found = re.search(
        rf'^queuey_flow_throttled_total\{{[^}}]*queue="{queue}"[^}}]*\}} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else None


def test_deleted_queues_leave_metrics_in_every_worker(make_api_node, test_apps):
    node = make_api_node(
        "series",
        server="granian",
        **{"queuey.stats.interval": INTERVAL, "queuey.limits.max_requests_per_second": "0"},
    )
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    auth = {"X-Application-Name": test_apps.app, "ApplicationKey": KEY}
    stamp = int(time.time() * 1000)
    names = [f"cycle{n}x{stamp}" for n in range(CYCLES)]

    def throttle(name: str, posts: int = 1) -> None:
        pause = requests.post(f"{node.url}/queue/{name}/pause", headers=auth, timeout=10)
        assert pause.status_code == 200, pause.text
        for _ in range(posts):
            refused = requests.post(f"{node.url}/queue/{name}", json={}, headers=auth, timeout=10)
            assert refused.status_code == 503, refused.text

    started = time.monotonic()
    for n, name in enumerate(names):
        made = requests.post(
            f"{node.url}/queue", json={"queue_name": name}, headers=auth, timeout=10
        )
        assert made.status_code == 201, made.text
        throttle(name)
        if n == 0:  # the count is there before the delete, in every worker's answer
            wait_until(
                lambda: all(throttled(t, names[0]) == 1 for t in scrapes(node.url)),
                10,
                "the first queue's throttle in /metrics",
            )
        gone = requests.delete(f"{node.url}/queue/{name}", headers=auth, timeout=10)
        assert gone.status_code == 200, gone.text
    cycled = time.monotonic() - started

    left: list[str] = []

    def none_left() -> bool:
        left[:] = sorted(
            {
                line
                for text in scrapes(node.url)
                for line in text.splitlines()
                if not line.startswith("#") and re.search(rf'queue="cycle\d+x{stamp}"', line)
            }
        )
        return not left

    wait_until(
        none_left,
        15,
        lambda: f"{len(left)} series of deleted queues, e.g. {left[:3]}",
    )
    gone_after = time.monotonic() - started - cycled

    # The first name again: only the new queue's two throttles, never the old one's.
    again = requests.post(
        f"{node.url}/queue", json={"queue_name": names[0]}, headers=auth, timeout=10
    )
    assert again.status_code == 201, again.text
    throttle(names[0], posts=2)
    seen: list[float | None] = []

    def counted_anew() -> bool:
        seen[:] = [throttled(t, names[0]) for t in scrapes(node.url)]
        return seen == [2.0] * SCRAPES

    wait_until(counted_anew, 10, lambda: f"the new queue's throttles, not {seen}")
    print(
        f"\n[granian, 2 workers] {CYCLES} create/throttle/delete cycles in {cycled:.1f}s; "
        f"no series of a deleted queue {gone_after:.1f}s later; the name created again "
        f"shows {seen[0]:g} throttles in {SCRAPES} scrapes"
    )

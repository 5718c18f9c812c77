"""Flow control's gauges on the production server as shipped (granian, two
worker processes): whichever worker answers ``/metrics``, it shows the fair
queue's group posts of both, and the same paused state."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.support import KEY, wait_until

pytestmark = pytest.mark.slow

FLOOD = 1200  # 4 threads x 30 batches x 10 messages


def group_posts(url: str, group: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("queuey_fair_group_posts{") and f'group="{group}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_every_worker_shows_the_groups_of_all_of_them(make_api_node, test_apps):
    # The refresher process discovers queues every second (the paused gauge
    # reads the metadata it found).
    node = make_api_node("workers", server="granian", **{"queuey.stats.interval": "1"})
    auth = {"X-Application-Name": test_apps.app, "ApplicationKey": KEY}
    queue = f"tenants{int(time.time() * 1000)}"
    made = requests.post(
        f"{node.url}/queue", json={"queue_name": queue, "fair": True}, headers=auth, timeout=10
    )
    assert made.status_code == 201, made.text
    requests.post(f"{node.url}/queue/{queue}/pause", headers=auth, timeout=10).raise_for_status()

    def paused() -> list[str]:
        return [
            ln.rsplit(" ", 1)[1]
            for _ in range(4)
            for ln in requests.get(f"{node.url}/metrics", timeout=10).text.splitlines()
            if ln.startswith("queuey_flow_paused{") and f'queue="{queue}"' in ln
        ]

    wait_until(lambda: paused() == ["1.0"] * 4, timeout=10, what="every worker shows the pause")
    requests.post(f"{node.url}/queue/{queue}/resume", headers=auth, timeout=10).raise_for_status()

    def post(worker: int) -> None:
        entries = [{"body": {"n": n}, "group": "flood"} for n in range(10)]
        for _ in range(30):
            # A new connection each time: the kernel spreads them over the workers.
            res = requests.post(
                f"{node.url}/queue/{queue}/batch",
                json={"messages": [*entries, {"body": {}, "group": f"calm{worker}"}]},
                headers=auth,
                timeout=10,
            )
            assert res.status_code == 201, res.text

    threads = [threading.Thread(target=post, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Each worker writes its late posts within a second; then every answer
    # holds both workers' (a sliding window: the counts fade over 10 s).
    seen: list[float] = []

    def consistent() -> bool:
        seen[:] = [group_posts(node.url, "flood") for _ in range(6)]
        return min(seen) >= 0.7 * FLOOD

    wait_until(consistent, timeout=5, what=lambda: f"flood's posts in every scrape: {seen}")
    print(f"\n[granian, 2 workers] flood posted {FLOOD}; six scrapes of its posts: {seen}")
    assert max(seen) <= FLOOD

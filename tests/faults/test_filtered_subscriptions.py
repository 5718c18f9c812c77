"""A filtered subscription on two API nodes (Cassandra: granian, 2 workers
each, as shipped), each node with its own metadata cache.

The filter is set through node A after node B has cached the queue; once B
shows it (the time it took is printed, bounded by the metadata cache), four
consumers on both nodes drain the subscription while producers post through
both: every matching message is delivered and acked once, no refused message
is delivered, and the subscription's backlog counted only matching messages.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.faults.test_work_queue import assert_invariants, queue_name, report
from tests.faults.work_queue_support import Consumer, WorkLog, WorkQueueHttp, run_consumers
from tests.faults.work_queue_verdict import verdict
from tests.support import wait_until

PARTITIONS = 4
TOTAL = 4000
FILTER = {"tier": ["gold", {"prefix": "plat"}], "amount": [{"numeric": [">=", 100]}]}


def _entry(n: int) -> dict:
    tier = ("gold", "free", "platinum", "silver")[n % 4]
    return {
        "body": {"key": f"f{n}"},
        "attributes": {"tier": tier, "amount": str(n % 300)},
        "partition": n % PARTITIONS + 1,
    }


def _matches(n: int) -> bool:
    return n % 4 in (0, 2) and n % 300 >= 100


@pytest.mark.slow
def test_a_filtered_subscription_across_nodes_delivers_exactly_the_matches(work_queue_nodes):
    nodes = work_queue_nodes
    queue = queue_name("filter")
    a = WorkQueueHttp(nodes.a.url, nodes.application)
    b = WorkQueueHttp(nodes.b.url, nodes.application)
    a.create_queue(queue, partitions=PARTITIONS, visibility_timeout=60)
    assert b.call("GET", f"/queue/{queue}/subscriptions")["subscriptions"] == []  # B caches it
    set_at = time.monotonic()
    a.call("PUT", f"/queue/{queue}/subscriptions/vip", json={"filter": FILTER})
    wait_until(
        lambda: b.call("GET", f"/queue/{queue}/subscriptions")["subscriptions"],
        30,
        "node B to see the filter",
    )
    seen_after = time.monotonic() - set_at

    expected = [f"f{n}" for n in range(TOTAL) if _matches(n)]
    log = WorkLog(expected)
    stop = threading.Event()

    def produce(http: WorkQueueHttp, numbers: range) -> None:
        try:
            for start in range(numbers.start, numbers.stop, 100):
                http.post_batch(queue, [_entry(n) for n in range(start, start + 100)])
        except Exception as exc:
            log.failed(f"producer: {exc}")
            stop.set()

    half = TOTAL // 2
    producers = [
        threading.Thread(target=produce, args=(a, range(0, half)), daemon=True),
        threading.Thread(target=produce, args=(b, range(half, TOTAL)), daemon=True),
    ]
    for p in producers:
        p.start()
    for p in producers:
        p.join(120)
    consumers = [
        Consumer(f"c{i}", (nodes.a, nodes.b)[i % 2].url, nodes.application, queue, log, stop,
                 limit=10, visibility_timeout=60, wait=1, subscription="vip")
        for i in range(4)
    ]  # fmt: skip
    elapsed = run_consumers(consumers, log, timeout=180)
    v = verdict(log)
    refused = sorted({d.key for d in log.deliveries} - set(expected))
    stats = a.subscription_stats(queue, "vip")
    line = report(
        f"{nodes.backend}, filtered subscription on 2 nodes, {TOTAL} posted, {len(expected)} match",
        f"filter_seen_on_b_s={seen_after:.2f} delivered={v.delivered} acked={v.acked} "
        f"duplicates={v.duplicates} refused_delivered={len(refused)} "
        f"ms={elapsed * 1000:.0f} | {v.line()}",
    )
    assert_invariants(v, log, line)
    assert refused == [], line
    assert v.duplicates == 0, line
    assert (stats["available"], stats["in_flight"], stats["filter"]) == (0, 0, FILTER), line
    for http in (a, b):
        assert http.reserve(queue, subscription="vip", limit=100) == [], line
        http.close()

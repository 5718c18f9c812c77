"""Work-queue delivery invariants through HTTP, with two API nodes on one store.

Two ``pserve`` nodes share one SQLite file or the shared Cassandra node (see
``work_queue_nodes``); consumers are threads calling ``reserve`` and ``ack``
on both nodes, half on each. Each run logs every delivery and receipt outcome
with the wall-clock times around the call
(:mod:`tests.faults.work_queue_support`) and checks the invariants of docs/invariants.rst
(:mod:`tests.faults.work_queue_verdict`):

* **at-least-once**: every posted message is acked in the end (lost = 0);
* **no early redelivery**: no message is handed out again before the previous
  lease could have ended (its reserve was sent + the visibility timeout);
* **ack is final**: a message whose receipt was acked is never delivered again,
  and an ack answered ``expired`` really was overtaken by a new lease;
* attempts count deliveries (1, 2, 3... per message).

``kill -9`` of consumers is in :mod:`tests.faults.test_work_queue_kill`;
dead letters, delays, priorities and dedup ids in
:mod:`tests.faults.test_work_queue_features`.

Figures (sent, delivered, duplicates, acked, time) are printed and put in
every assertion message.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.faults.work_queue_support import (
    Consumer,
    HttpError,
    WorkLog,
    WorkQueueHttp,
    always,
    drain,
    every,
    run_consumers,
)
from tests.faults.work_queue_verdict import verdict

PARTITIONS = 4
STEADY_PARTITIONS = 8


def queue_name(tag: str) -> str:
    return f"wq{tag}{uuid.uuid4().hex[:10]}"


def post_keys(
    http: WorkQueueHttp,
    queue: str,
    keys: list[str],
    partitions: int = PARTITIONS,
    log: WorkLog | None = None,
) -> None:
    """Post ``{"key": k}`` messages in batches of 100, spread over the partitions.

    A batch answered 503 (outcome unknown) is posted again, as a producer
    would, up to 5 times; with a ``log`` the 503s are counted there, and a key
    may then be stored twice (the verdict counts ``stored_twice``)."""
    batch = 100
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        entries = [
            {"body": {"key": k}, "partition": (start + i) % partitions + 1}
            for i, k in enumerate(chunk)
        ]
        for attempt in range(5):
            try:
                http.post_batch(queue, entries)
                break
            except HttpError as exc:
                if exc.status != 503 or log is None or attempt == 4:
                    raise
                log.unknown_outcome("post")
                time.sleep(0.5)


def report(what: str, text: str) -> str:
    line = f"[{what}] {text}"
    print("\n" + line)
    return line


def assert_invariants(v, log: WorkLog, line: str, drained: bool = False) -> None:
    """``drained``: the caller has seen the queue hand out nothing more once
    every lease ended, so a key whose ack answered 503 and then not "acked"
    (``v.unsure``) was finished by that ack."""
    assert not log.errors, f"consumers failed: {log.errors[:3]} {line}"
    assert v.lost == (v.unsure if drained else 0), line
    assert v.delivered == v.sent, line
    assert v.early_redeliveries == 0, line
    assert v.after_ack == 0, line
    assert v.false_expired == 0, line
    assert v.wrong_attempts == 0, line


def assert_drained(nodes, queue: str, line: str) -> dict:
    """Nothing left to reserve through either node, and stats agree."""
    for node in (nodes.a, nodes.b):
        http = WorkQueueHttp(node.url, nodes.application)
        try:
            assert http.reserve(queue, limit=100) == [], f"left over on {node.name}: {line}"
        finally:
            http.close()
    http = WorkQueueHttp(nodes.a.url, nodes.application)
    try:
        stats = http.subscription_stats(queue)
    finally:
        http.close()
    assert stats.get("available") == 0 and stats.get("in_flight") == 0, f"{stats} {line}"
    return stats


# ------------------------------------------------------------------ steady state


@pytest.mark.slow
def test_steady_state_8_consumers_on_two_nodes_deliver_every_message_once(work_queue_nodes):
    """20,000 messages over 8 partitions, posted through both nodes while 8
    consumers (4 per node) reserve batches of 10 and ack them; leases never
    expire (60 s, far above the time from reserve to ack). Every message is
    delivered and acked; duplicates are counted (0 expected)."""
    nodes = work_queue_nodes
    total, vt = 20_000, 60
    queue = queue_name("steady")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    admin.create_queue(queue, partitions=STEADY_PARTITIONS, visibility_timeout=vt)
    keys = [f"s{n}" for n in range(total)]
    log = WorkLog(keys)
    stop = threading.Event()

    def produce(url: str, part: list[str]) -> None:
        http = WorkQueueHttp(url, nodes.application)
        try:
            post_keys(http, queue, part, STEADY_PARTITIONS, log)
        except Exception as exc:
            log.failed(f"producer: {exc}")
            stop.set()
        finally:
            http.close()

    producers = [
        threading.Thread(target=produce, args=(node.url, keys[i::2]), daemon=True)
        for i, node in enumerate((nodes.a, nodes.b))
    ]
    consumers = [
        Consumer(f"c{i}", (nodes.a, nodes.b)[i % 2].url, nodes.application, queue, log, stop,
                 limit=10, visibility_timeout=vt, wait=1)
        for i in range(8)
    ]  # fmt: skip
    started = time.monotonic()
    for p in producers:
        p.start()
    run_consumers(consumers, log, timeout=240)
    elapsed = time.monotonic() - started
    for p in producers:
        p.join(30)
    # Left over only if a post answered 503 was stored and then posted again.
    left_over = drain([nodes.a.url, nodes.b.url], nodes.application, queue, log, nodes.read_delay)
    v = verdict(log)
    per_node = {
        n.name: sum(c.batches for c in consumers if c.http.url == n.url) for n in (nodes.a, nodes.b)
    }
    line = report(
        f"{nodes.backend}, 8 consumers on 2 nodes, {total} messages, batches of 10",
        f"sent={v.sent} delivered={v.delivered} duplicates={v.duplicates} acked={v.acked} "
        f"ms={elapsed * 1000:.0f} msgs_per_s={v.acked / elapsed:.0f} "
        f"batches_per_node={per_node} left_over={left_over} | {v.line()}",
    )
    assert_invariants(v, log, line)
    assert v.duplicates == 0, line
    assert v.ack_statuses == {"acked": total + v.stored_twice}, line
    assert_drained(nodes, queue, line)
    admin.close()


# ------------------------------------------------------------------ redelivery


@pytest.mark.slow
def test_unacked_messages_come_back_only_after_their_lease_and_acks_are_final(work_queue_nodes):
    """A 2 s visibility timeout; of 8 consumers, two drop every 2nd batch, two
    drop every 3rd and one acks every 4th batch only after its lease ended.
    Every message is acked in the end; none is handed to a second consumer
    while a lease could still run; none is delivered after a successful ack;
    a late ack is ``expired`` exactly when someone took the message since."""
    nodes = work_queue_nodes
    total, vt = 1000, 2
    queue = queue_name("redeliver")
    admin = WorkQueueHttp(nodes.b.url, nodes.application)
    admin.create_queue(queue, partitions=PARTITIONS, visibility_timeout=vt)
    keys = [f"r{n}" for n in range(total)]
    post_keys(admin, queue, keys)
    log = WorkLog(keys)
    stop = threading.Event()
    policies = [every(2, "drop")] * 2 + [every(3, "drop")] * 2 + [every(4, "late-ack")]
    policies += [always("ack")] * (8 - len(policies))
    consumers = [
        Consumer(f"c{i}", (nodes.a, nodes.b)[i % 2].url, nodes.application, queue, log, stop,
                 limit=10, visibility_timeout=vt, wait=1, policy=policy)
        for i, policy in enumerate(policies)
    ]  # fmt: skip
    elapsed = run_consumers(consumers, log, timeout=100)
    v = verdict(log)
    redelivered = sum(1 for d in log.deliveries if d.attempts > 1)
    line = report(
        f"{nodes.backend}, visibility timeout {vt}s, consumers dropping leases",
        f"sent={v.sent} delivered={v.delivered} redeliveries={redelivered} "
        f"duplicates={v.duplicates} acked={v.acked} lost={v.lost} "
        f"early_redeliveries={v.early_redeliveries} after_ack={v.after_ack} "
        f"ms={elapsed * 1000:.0f} | {v.line()}",
    )
    assert_invariants(v, log, line)
    assert redelivered > 0, f"nothing was redelivered, the test proved nothing: {line}"
    assert_drained(nodes, queue, line)
    admin.close()

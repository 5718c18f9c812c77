"""Dead letters, delays, priorities and dedup ids through HTTP, on two API nodes.

The same two ``pserve`` nodes as :mod:`tests.faults.test_work_queue` (one
SQLite file, or the shared Cassandra node): each test posts through one node
and consumes through the other, or through both, as users behind a load
balancer would. Times are the reader's wall clock around each call.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pytest

from tests.faults.test_work_queue import queue_name, report
from tests.faults.work_queue_support import (
    Consumer,
    HttpError,
    WorkLog,
    WorkQueueHttp,
    always,
)
from tests.support import wait_until


def settled(http: WorkQueueHttp, queue: str, count: int, timeout: float) -> list[dict]:
    """Poll a stream read until ``count`` messages are readable (the read delay
    hides the newest); the messages."""
    found: list[dict] = []

    def readable() -> bool:
        nonlocal found
        try:
            found = http.read_all(queue)
        except HttpError as exc:
            if exc.status != 404:  # a dead-letter queue is made when first needed
                raise
        return len(found) >= count

    wait_until(readable, timeout, lambda: f"{count} readable messages, got {len(found)}", 0.25)
    return found


# ------------------------------------------------------------------ dead letters


@pytest.mark.slow
def test_released_messages_are_dead_lettered_exactly_once(work_queue_nodes):
    """``max_attempts=2``; consumers on both nodes release everything with an
    error. Each message lands in ``<name>-dead`` once, with its body and the
    attributes source_queue, source_message_id, source_subscription,
    attempts=2 and the last error; the source subscription is empty. Reserved
    batches (7) and so releases span both partitions of the queue."""
    nodes = work_queue_nodes
    total, subscription = 120, "dlq-test"
    queue = queue_name("dl")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    admin.create_queue(queue, partitions=2, max_attempts=2)
    keys = [f"d{n}" for n in range(total)]
    posted = admin.post_batch(
        queue, [{"body": {"key": k, "n": i}, "partition": i % 2 + 1} for i, k in enumerate(keys)]
    )
    source_ids = {k: ref["message_id"] for k, ref in zip(keys, posted, strict=True)}
    log = WorkLog()
    stop = threading.Event()
    consumers = [
        Consumer(f"c{i}", (nodes.a, nodes.b)[i % 2].url, nodes.application, queue, log, stop,
                 limit=7, wait=1, subscription=subscription, policy=always("release"),
                 release_error=f"boom from c{i}")
        for i in range(2)
    ]  # fmt: skip

    def all_released_twice() -> bool:
        finished = [log.by_receipt[f.receipt] for f in list(log.finishes)]
        return {d.key for d in finished if d.attempts == 2} >= set(keys)

    started = time.monotonic()
    for c in consumers:
        c.start()
    try:
        wait_until(lambda: all_released_twice() or log.errors, 90, "every second release")
    finally:
        stop.set()
        for c in consumers:
            c.join(60)
    last_release = max(f.received for f in log.finishes)
    dead = f"{queue}-dead"
    reader = WorkQueueHttp(nodes.b.url, nodes.application)
    wait_until(lambda: time.time() > last_release + nodes.read_delay, nodes.read_delay + 2)
    with contextlib.suppress(AssertionError):  # counted below, with the figures
        settled(reader, dead, total, timeout=20)
    found = reader.read_all(dead)
    elapsed = time.monotonic() - started

    last_deliveries = [(log.by_receipt[f.receipt], f) for f in log.finishes]
    expected_error = {d.key: f.error for d, f in last_deliveries if d.attempts == 2}
    copies: dict[str, int] = {}
    wrong: list[str] = []
    for m in found:
        key = m["body"].get("key")
        copies[key] = copies.get(key, 0) + 1
        want = {
            "source_queue": queue,
            "source_message_id": source_ids.get(key),
            "source_subscription": subscription,
            "attempts": "2",
            "last_error": expected_error.get(key),
        }
        got = {k: str((m.get("attributes") or {}).get(k)) for k in want}
        if got != {k: str(v) for k, v in want.items()} or f"d{m['body'].get('n')}" != key:
            wrong.append(f"{key}: {m.get('attributes')} body={m['body']}")
    attempts_seen = sorted({d.attempts for d in log.deliveries})
    stats = reader.subscription_stats(queue, subscription)
    line = report(
        f"{nodes.backend}, max_attempts=2, every delivery released",
        f"sent={total} deliveries={len(log.deliveries)} attempts_seen={attempts_seen} "
        f"dead_lettered={len(copies)} dead_letter_copies={len(found)} "
        f"missing={len(set(keys) - set(copies))} wrong={len(wrong)} "
        f"release_statuses={sorted({f.status for f in log.finishes})} "
        f"stats={stats} ms={elapsed * 1000:.0f} wrong_examples={wrong[:2]}",
    )
    assert not log.errors, f"{log.errors[:3]} {line}"
    assert attempts_seen == [1, 2], line
    assert len(log.deliveries) == 2 * total, line
    assert {f.status for f in log.finishes} == {"acked"}, line
    assert set(copies) == set(keys) and len(found) == total, line
    assert not wrong, line
    assert stats.get("dead_lettered") == total, line
    assert stats.get("available") == 0 and stats.get("in_flight") == 0, line
    for node in (nodes.a, nodes.b):
        http = WorkQueueHttp(node.url, nodes.application)
        assert http.reserve(queue, subscription=subscription, limit=100) == [], line
        http.close()
    admin.close()
    reader.close()


# ------------------------------------------------------------------ delays


@pytest.mark.slow
def test_a_delayed_message_is_delivered_when_due_and_not_before(work_queue_nodes):
    """Messages posted through node A with ``delay=2`` (and one to a queue whose
    default ``delay`` is 2) are reserved through node B: never before the post
    was sent + 2 s by the reader's clock, and within a bound after (the read
    delay plus a second and a half of polling). An undelayed message is
    delivered at once; a stream read before the due time does not show the
    delayed ones."""
    nodes = work_queue_nodes
    delay, margin = 2, 0.002
    bound = nodes.read_delay + 1.5
    queue, by_default = queue_name("delay"), queue_name("qdelay")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    reader = WorkQueueHttp(nodes.b.url, nodes.application)
    admin.create_queue(queue, partitions=2)
    admin.create_queue(by_default, delay=delay)
    log = WorkLog()
    stop = threading.Event()
    consumers = [
        Consumer("on-b", nodes.b.url, nodes.application, queue, log, stop, wait=1),
        Consumer("on-a", nodes.a.url, nodes.application, by_default, log, stop, wait=1),
    ]
    for c in consumers:
        c.start()
    posts: dict[str, tuple[float, float, dict]] = {}
    try:
        for i in range(4):
            sent = time.time()
            ref = admin.post(queue, {"key": f"late{i}"}, delay=delay, partition=i % 2 + 1)
            posts[f"late{i}"] = (sent, time.time(), ref)
        sent = time.time()
        ref = admin.post(by_default, {"key": "default"})
        posts["default"] = (sent, time.time(), ref)
        admin.post(queue, {"key": "now"})
        log.expect([*posts, "now"])
        stream_sent = time.time()
        stream_early = {m["body"]["key"] for m in reader.read_all(queue)}
        stream_received = time.time()
        log.all_acked.wait(delay + bound + 20)
    finally:
        stop.set()
        for c in consumers:
            c.join(60)
    first = {}
    for d in sorted(log.deliveries, key=lambda d: d.received):
        first.setdefault(d.key, d)
    figures = {
        key: {
            "timestamp_minus_post_s": round(ref["timestamp"] - sent, 3),
            "delivered_after_post_s": (
                round(first[key].received - sent, 3) if key in first else None
            ),
            "late_after_due_s": (
                round(first[key].received - ref["timestamp"], 3) if key in first else None
            ),
        }
        for key, (sent, _, ref) in posts.items()
    }
    now_after = first["now"].received - stream_sent if "now" in first else None
    line = report(
        f"{nodes.backend}, delay={delay}s, posted through A, reserved through B",
        f"figures={figures} undelayed_delivered_after_s={now_after} "
        f"stream_read_before_due={sorted(stream_early)} errors={log.errors[:2]}",
    )
    assert not log.errors, line
    assert set(first) == {*posts, "now"}, f"not all delivered: {line}"
    for key, (sent, received, ref) in posts.items():
        assert sent + delay - margin <= ref["timestamp"] <= received + delay + margin, line
        assert first[key].received >= sent + delay, f"{key} delivered early: {line}"
        assert first[key].received <= received + delay + bound, f"{key} delivered late: {line}"
    earliest_due = min(sent for sent, _, _ in posts.values()) + delay
    if stream_received < earliest_due:
        assert not stream_early & set(posts), f"a stream read showed them early: {line}"
    if nodes.read_delay < delay:
        assert first["now"].received < earliest_due, line
    admin.close()
    reader.close()


# ------------------------------------------------------------------ priorities


@pytest.mark.slow
def test_higher_priority_is_reserved_first_through_either_node(work_queue_nodes):
    """50 messages of priorities 0-9 posted in shuffled order over 2 partitions;
    one subscription reserved in batches of 4, alternating nodes: priorities
    come out highest first, and oldest first within a priority."""
    nodes = work_queue_nodes
    queue = queue_name("prio")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    reader = WorkQueueHttp(nodes.b.url, nodes.application)
    admin.create_queue(queue, partitions=2)
    priorities = [p for p in range(10) for _ in range(5)]
    random.Random(10).shuffle(priorities)
    admin.post_batch(
        queue,
        [
            {"body": {"key": f"p{i}", "p": p}, "priority": p, "partition": i % 2 + 1}
            for i, p in enumerate(priorities)
        ],
    )
    settled(reader, queue, len(priorities), timeout=nodes.read_delay + 30)
    got: list[dict] = []
    for round_no in range(40):
        http = (admin, reader)[round_no % 2]
        batch = http.reserve(queue, limit=4)
        if not batch:
            break
        got.extend(batch)
        answer = http.ack(queue, [m["receipt"] for m in batch])
        assert answer.get("acked") == len(batch), answer
    order = [(m["priority"], m["timestamp"]) for m in got]
    inversions = [
        (a, b) for a, b in zip(order, order[1:], strict=False) if (-a[0], a[1]) > (-b[0], b[1])
    ]
    line = report(
        f"{nodes.backend}, priorities through two nodes",
        f"delivered={len(got)} priorities={[m['priority'] for m in got]} "
        f"inversions={inversions[:3]}",
    )
    assert len(got) == len(priorities), line
    assert all(m["priority"] == m["body"]["p"] for m in got), line
    assert not inversions, line
    admin.close()
    reader.close()


# ------------------------------------------------------------------ dedup ids


@pytest.mark.slow
def test_a_dedup_id_posted_through_both_nodes_stores_one_message(work_queue_nodes):
    """20 dedup ids posted through one node and again through the other (single
    posts, then a batch): every repeat answers the first message's id and
    stores nothing; a stream read and a subscription see each once. Once the
    window has passed, the same dedup id stores a new message."""
    nodes = work_queue_nodes
    queue = queue_name("dedup")
    a = WorkQueueHttp(nodes.a.url, nodes.application)
    b = WorkQueueHttp(nodes.b.url, nodes.application)
    a.create_queue(queue, partitions=3)
    first: dict[str, dict] = {}
    repeats: list[tuple[str, dict]] = []
    for i in range(20):
        one, other = (a, b) if i % 2 == 0 else (b, a)
        first[f"id-{i}"] = one.post(queue, {"key": f"x{i}", "copy": 1}, dedup_id=f"id-{i}")
        repeat = other.post(queue, {"key": f"x{i}", "copy": 2}, dedup_id=f"id-{i}")
        repeats.append((f"id-{i}", repeat))
    batch = b.post_batch(
        queue,
        [{"body": {"key": f"x{i}", "copy": 3}, "dedup_id": f"id-{i}"} for i in range(5)]
        + [{"body": {"key": "fresh", "copy": 1}, "dedup_id": "id-fresh"}],
    )
    repeats += [(f"id-{i}", ref) for i, ref in enumerate(batch[:5])]
    answered_other = [d for d, ref in repeats if ref["message_id"] != first[d]["message_id"]]
    last_post = time.time()
    settled(b, queue, 21, timeout=nodes.read_delay + 30)
    wait_until(lambda: time.time() > last_post + nodes.read_delay + 0.5, nodes.read_delay + 2)
    stored = b.read_all(queue)
    keys = sorted(m["body"]["key"] for m in stored)
    reserved: list[dict] = []
    for http in (a, b, a, b):
        reserved += http.reserve(queue, limit=100)
    wait_until(lambda: time.time() > last_post + nodes.dedup_window + 1, nodes.dedup_window + 3)
    again = a.post(queue, {"key": "x0", "copy": 4}, dedup_id="id-0")
    after_window = again["message_id"] != first["id-0"]["message_id"]
    line = report(
        f"{nodes.backend}, dedup ids through two nodes",
        f"ids=21 repeats={len(repeats)} repeats_answered_another_id={len(answered_other)} "
        f"stored={len(stored)} reserved={len(reserved)} "
        f"copies={[m['body']['copy'] for m in stored if m['body']['copy'] != 1][:5]} "
        f"new_message_after_window={after_window}",
    )
    assert not answered_other, line
    assert len(stored) == 21 and len(set(keys)) == 21, line
    assert all(m["body"]["copy"] == 1 for m in stored), line
    assert batch[5]["message_id"] not in {r["message_id"] for r in first.values()}, line
    assert sorted(m["message_id"] for m in reserved) == sorted(m["message_id"] for m in stored), (
        line
    )
    assert after_window, line
    a.close()
    b.close()


@pytest.mark.slow
def test_concurrent_posts_of_one_dedup_id_through_two_nodes_store_one_message(work_queue_nodes):
    """The same dedup id posted at the same instant through both nodes (10 ids,
    the two posts released together by a barrier): both answers name one
    message, and one message is stored per id."""
    nodes = work_queue_nodes
    queue = queue_name("dedupc")
    a = WorkQueueHttp(nodes.a.url, nodes.application)
    b = WorkQueueHttp(nodes.b.url, nodes.application)
    a.create_queue(queue, partitions=2)
    answers: dict[str, list[str]] = {f"c-{i}": [] for i in range(10)}
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def post_all(http: WorkQueueHttp, copy: int) -> None:
        for dedup_id in answers:
            barrier.wait(30)
            try:
                ref = http.post(queue, {"key": dedup_id, "copy": copy}, dedup_id=dedup_id)
                answers[dedup_id].append(ref["message_id"])
            except Exception as exc:
                errors.append(str(exc)[:300])

    threads = [threading.Thread(target=post_all, args=(h, n)) for n, h in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    last_post = time.time()
    settled(a, queue, len(answers), timeout=nodes.read_delay + 30)
    wait_until(lambda: time.time() > last_post + nodes.read_delay + 0.5, nodes.read_delay + 2)
    stored = a.read_all(queue)
    two_ids = {d: ids for d, ids in answers.items() if len(set(ids)) != 1}
    line = report(
        f"{nodes.backend}, one dedup id posted concurrently through two nodes",
        f"ids={len(answers)} answered_two_ids={len(two_ids)} stored={len(stored)} "
        f"errors={errors[:2]}",
    )
    assert not errors, line
    assert not two_ids, line
    assert len(stored) == len(answers), line
    a.close()
    b.close()

"""What one message move task costs the store: bounded rounds, and pauses
between them at least as long as each round, so a task never holds the write
lock (one per host for SQLite) for long or most of the time."""

from __future__ import annotations

import json
import threading
import time

import pytest

from queuey.core.workqueues import WorkQueues
from queuey.model import NewMessage, QueueMeta
from queuey.sqs import movetasks
from queuey.sqs.movetasks import MoveTasks
from queuey.sqs.queues import Place
from tests.support import wait_until

pytestmark = pytest.mark.unit

PLACE = Place("http://127.0.0.1", "123456789012", "us-east-1", "us-east-1")
BODY = json.dumps("x" * 20_000)  # about 20 kB: a round holds about 50 of them


def test_rounds_are_bounded_and_leave_the_store_most_of_the_time(sqlite_storage, clock):
    storage = sqlite_storage
    source = storage.create_queue(QueueMeta(application="a", name="from", partitions=2))
    target = storage.create_queue(QueueMeta(application="a", name="to", partitions=2))
    for _ in range(6):
        storage.put_messages(source, [NewMessage(BODY, 1 + i % 2, 600) for i in range(50)])
    clock.advance(1)
    writes: list[tuple[float, float, int, int]] = []  # start, end, messages, body bytes
    lock = threading.Lock()
    put, delete = storage.put_messages, storage.delete_messages

    def recorded(call, sized):
        def wrapper(queue, items):
            began = time.monotonic()
            try:
                return call(queue, items)
            finally:
                with lock:
                    writes.append((began, time.monotonic(), len(items), sum(map(sized, items))))

        return wrapper

    storage.put_messages = recorded(put, lambda m: len(m.body.encode()))
    storage.delete_messages = recorded(delete, lambda ref: 0)
    moves = MoveTasks(storage, WorkQueues(storage, clock, max_ttl=3600), clock)
    moves.start(source, target, None, [source, target])

    def done():
        (task,) = moves.list(PLACE, storage.get_queue("a", "from"))
        return task if task["Status"] != "RUNNING" else None

    task = wait_until(done, timeout=60, what="the task to finish")
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 300)
    puts = [w for w in writes if w[3]]
    assert len(puts) >= 300 * len(BODY) // movetasks.ROUND_BYTES
    for _, _, count, size in puts:
        assert count <= movetasks.ROUND and size <= movetasks.ROUND_BYTES
    busy = sum(end - began for began, end, _, _ in writes)
    wall = max(end for _, end, _, _ in writes) - min(began for began, _, _, _ in writes)
    print(f"\n[move task, SQLite] rounds={len(puts)} busy={busy:.3f}s wall={wall:.3f}s")
    assert busy <= 0.6 * wall


def test_a_task_moving_into_its_source_still_ends(sqlite_storage, clock, monkeypatch):
    """Were a cycle to slip past the start's check, the task still moves each
    message once: it stops at the count its source held when it started."""
    monkeypatch.setattr(MoveTasks, "_check_cycle", lambda *args: None)
    storage = sqlite_storage
    queue = storage.create_queue(QueueMeta(application="a", name="loop"))
    storage.put_messages(queue, [NewMessage(json.dumps(f"m{i}"), 1, 600) for i in range(3)])
    clock.advance(1)
    moves = MoveTasks(storage, WorkQueues(storage, clock, max_ttl=3600), clock)
    moves.start(queue, queue, None, [queue])

    def done():
        (task,) = moves.list(PLACE, storage.get_queue("a", "loop"))
        return task if task["Status"] != "RUNNING" else None

    task = wait_until(done, timeout=10, what="the task to finish")
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 3)
    assert storage.stats(queue, clock.now_micros()).messages == 3

"""A worker whose user code fails in a hook: nothing acknowledged is lost.

The batch context, its ``__enter__`` and ``__exit__``, and the failure hook
are user code and may raise. A failed context is a failed batch: the
checkpoint stays where it was and the batch is processed again. A failed
failure hook leaves the message it was about unfinished. Real ZooKeeper and a
real Queuey server (SQLite) throughout.
"""

from __future__ import annotations

import threading

import pytest

from queuey.client import ReceivedMessage
from tests.client.test_worker import zk_checkpoints
from tests.support import wait_until


class Sink:
    """A transactional output: a batch's records become durable only when its
    context exits cleanly, like a file fsynced or a database transaction
    committed in ``__exit__``. The first ``fail_exits`` exits and
    ``fail_enters`` enters raise instead."""

    def __init__(self, fail_exits: int = 0, fail_enters: int = 0) -> None:
        self.fail_exits, self.fail_enters = fail_exits, fail_enters
        self.durable: list[str] = []
        self.pending: list[str] = []
        self.enters = self.exits = self.failures = 0
        self.lock = threading.Lock()

    def job(self, message: ReceivedMessage) -> None:
        self.pending.append(message.message_id)

    def context(self) -> Sink:
        return self

    def __enter__(self) -> Sink:
        with self.lock:
            self.enters += 1
            if self.enters <= self.fail_enters:
                self.failures += 1
                raise OSError("cannot open the output")
        self.pending = []
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self.lock:
            self.exits += 1
            batch, self.pending = self.pending, []
            if self.exits <= self.fail_exits:
                self.failures += 1
                raise OSError("fsync failed")
            if exc_type is None:
                self.durable.extend(batch)


def figures(posted, sink: Sink) -> tuple[dict, str]:
    sent = {p.message_id for p in posted}
    durable = set(sink.durable)
    numbers = {
        "sent": len(sent),
        "acknowledged": len(sent),
        "read back": len(durable & sent),
        "lost": len(sent - durable),
        "duplicates": len(sink.durable) - len(durable),
        "context failures": sink.failures,
    }
    text = ", ".join(f"{k}: {v}" for k, v in numbers.items())
    print(text)
    return numbers, text


@pytest.mark.zookeeper
def test_a_batch_whose_context_exit_fails_is_processed_again_not_committed(client, make_worker, zk):
    client.create_queue("q", partitions=1)
    posted = client.post_batch("q", [{"n": n} for n in range(25)])
    sink = Sink(fail_exits=2)
    runner = make_worker("w0", sink.job, context=sink.context, batch_size=10)
    wait_until(lambda: zk_checkpoints(zk) == {1: posted[-1].message_id}, 30, "the last checkpoint")
    numbers, text = figures(posted, sink)
    assert numbers["lost"] == 0, text
    assert sink.durable[:10] == [p.message_id for p in posted[:10]], "the failed batch redone"
    assert runner.worker.stats.batch_failures == 2, text


@pytest.mark.zookeeper
def test_the_checkpoint_stays_put_while_the_context_exit_keeps_failing(client, make_worker, zk):
    client.create_queue("q", partitions=1)
    posted = client.post_batch("q", [{"n": n} for n in range(5)])
    sink = Sink(fail_exits=10**6)
    runner = make_worker("w0", sink.job, context=sink.context, batch_size=10)
    wait_until(lambda: sink.failures >= 3, 30, "three failed batches")
    assert zk_checkpoints(zk) == {}, "nothing committed while every batch fails"
    assert runner.worker.stats.commits == 0
    sink.fail_exits = 0  # the disk is back
    wait_until(lambda: zk_checkpoints(zk) == {1: posted[-1].message_id}, 30, "the checkpoint")
    numbers, text = figures(posted, sink)
    assert numbers["lost"] == 0 and numbers["duplicates"] == 0, text


@pytest.mark.zookeeper
def test_a_context_enter_that_fails_processes_nothing_then_retries(client, make_worker, zk):
    client.create_queue("q", partitions=1)
    posted = client.post_batch("q", [{"n": n} for n in range(5)])
    sink = Sink(fail_enters=2)
    make_worker("w0", sink.job, context=sink.context, batch_size=10)
    wait_until(lambda: zk_checkpoints(zk) == {1: posted[-1].message_id}, 30, "the checkpoint")
    numbers, text = figures(posted, sink)
    assert numbers["lost"] == 0 and sink.failures == 2, text


@pytest.mark.zookeeper
def test_a_failure_hook_that_raises_leaves_the_message_unfinished(client, make_worker, zk):
    client.create_queue("q", partitions=1)
    posted = client.post_batch("q", [{"n": n} for n in range(6)])
    poison = posted[2].message_id
    done: list[str] = []
    hooked: list[str] = []
    calls = []

    def job(message: ReceivedMessage) -> None:
        if message.message_id == poison:
            raise ValueError("poison")
        done.append(message.message_id)

    checkpoints_at_calls: list[dict] = []

    def hook(message: ReceivedMessage, exc: BaseException) -> None:
        calls.append(message.message_id)
        checkpoints_at_calls.append(zk_checkpoints(zk))
        if len(calls) == 1:
            raise RuntimeError("the alerting service is down")
        hooked.append(message.message_id)

    make_worker("w0", job, failure_hook=hook, max_attempts=2)
    wait_until(lambda: zk_checkpoints(zk) == {1: posted[-1].message_id}, 30, "the checkpoint")
    print(f"hook calls: {len(calls)}, checkpoints at each call: {checkpoints_at_calls}")
    assert hooked == [poison], "the hook finally ran for the poison message"
    assert checkpoints_at_calls[1] == {1: posted[1].message_id}, (
        "after the failed hook, the work before the poison message is committed, not past it"
    )
    assert set(done) == {p.message_id for i, p in enumerate(posted) if i != 2}

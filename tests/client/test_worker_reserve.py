"""The worker's reserve mode against a real Queuey server (waitress + SQLite), no ZooKeeper.

Competing workers share one subscription: every message is processed exactly
once when nothing fails; a failing job is released with a backoff, redelivered
and dead-lettered by the server after the queue's ``max_attempts``; a slow job
keeps its lease; a stop (SIGTERM) acks what finished and releases the rest.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter

import pytest

from queuey.client import (
    NotFound,
    OutgoingMessage,
    QueueyClient,
    ReservedMessage,
    SubscriptionStats,
    WorkerConfig,
)
from queuey.client.worker.reserve import backoff_delay, error_text
from queuey.errors import ConfigurationError
from tests.client.conftest import REPO, Recorder, post_numbered, read_processed
from tests.support import wait_until

# ------------------------------------------------------------------------ config


@pytest.mark.unit
def test_reserve_mode_needs_no_zookeeper_and_reads_its_keys():
    config = WorkerConfig.from_mapping(
        {
            "queuey": {"urls": "http://a", "application": "app"},
            "worker": {
                "mode": "reserve",
                "queues": "jobs, mail",
                "job": "m:f",
                "subscription": "thumbnails",
                "visibility_timeout": "45",
                "wait": "20",
                "concurrency": "4",
                "batch_size": "100",
            },
        },
        environ={"QUEUEY_WORKER_WAIT": "3"},
    )
    assert config.mode == "reserve" and config.queues == ("jobs", "mail")
    assert (config.subscription, config.visibility_timeout) == ("thumbnails", 45)
    assert (config.wait, config.concurrency, config.batch_size) == (3, 4, 100)


@pytest.mark.unit
def test_the_default_mode_is_partitions_and_the_visibility_timeout_the_queues():
    config = WorkerConfig.from_mapping(
        {
            "queuey": {"urls": "http://a", "application": "app"},
            "zookeeper": {"hosts": "z:1"},
            "worker": {"group": "g", "queues": "q", "job": "m:f"},
        },
        environ={},
    )
    assert config.mode == "partitions" and config.visibility_timeout is None


@pytest.mark.unit
@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("mode", "lottery", "worker.mode"),
        ("batch_size", "101", "worker.batch_size"),
        ("wait", "21", "worker.wait"),
        ("wait", "soon", "worker.wait"),
        ("visibility_timeout", "0", "worker.visibility_timeout"),
        ("visibility_timeout", "43201", "worker.visibility_timeout"),
        ("concurrency", "0", "worker.concurrency"),
        ("subscription", "no spaces", "worker.subscription"),
        ("queues", "crash-*", "worker.queues"),
        ("max_attempts", "3", "worker.max_attempts"),
        ("failure_hook", "m:f", "worker.failure_hook"),
        ("job", "", "worker.job"),
    ],
)
def test_a_bad_reserve_setting_is_named(key, value, named):
    sections = {
        "queuey": {"urls": "http://a", "application": "app"},
        "worker": {"mode": "reserve", "queues": "q", "job": "m:f", key: value},
    }
    with pytest.raises(ConfigurationError) as info:
        WorkerConfig.from_mapping(sections, environ={})
    assert info.value.key == named


@pytest.mark.unit
def test_the_example_reserve_config_loads():
    config = WorkerConfig.from_ini(REPO / "examples" / "reserve_worker.ini", environ={})
    assert config.mode == "reserve" and config.subscription == "crash-processors"
    assert config.zookeeper_hosts == "" and config.visibility_timeout == 30


@pytest.mark.unit
def test_the_backoff_doubles_by_attempt_up_to_the_ceiling_in_whole_seconds():
    assert [backoff_delay(n, 0.5, 5) for n in range(1, 7)] == [1, 1, 2, 4, 5, 5]
    assert backoff_delay(3, 0, 30) == 0
    assert error_text(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert error_text(RuntimeError()) == "RuntimeError"
    assert len(error_text(ValueError("x" * 5000))) == 500


# ----------------------------------------------------------------------- workers


def read_if_any(client, queue: str) -> list:
    """The queue's messages; none while it does not exist (a dead-letter queue
    is created with its first dead letter)."""
    try:
        return client.read(queue)
    except NotFound:
        return []


def subscription_stats(client, queue: str = "q", subscription: str = "default"):
    """The subscription's stats; all zero before it was first used."""
    found = client.stats(queue).subscription(subscription)
    return found or SubscriptionStats(subscription, 0, 0, 0, 0, None)


@pytest.mark.slow
def test_competing_workers_process_every_message_exactly_once(client, make_reserve_worker):
    client.create_queue("q", partitions=4)
    posted = post_numbered(client, "q", 0, 600, 4)
    recorder = Recorder()
    workers = [
        make_reserve_worker(f"w{n}", recorder.job_for(f"w{n}"), concurrency=2) for n in range(3)
    ]
    wait_until(lambda: recorder.count() >= 600, 90, lambda: f"600 processed, {recorder.count()}")
    wait_until(lambda: subscription_stats(client).in_flight == 0, 30, "every ack to land")
    for worker in workers:
        worker.stop()
    counts = Counter(recorder.ids())
    per_worker = Counter(name for name, _ in recorder.seen)
    duplicates = sum(c - 1 for c in counts.values())
    lost = len({p.message_id for p in posted} - set(counts))
    stats = subscription_stats(client)
    text = (
        f"sent {len(posted)}, delivered {recorder.count()}, duplicates {duplicates}, "
        f"lost {lost}, per worker {dict(per_worker)}, left available {stats.available}, "
        f"in flight {stats.in_flight}"
    )
    print(text)
    assert duplicates == 0 and lost == 0, text
    assert len(per_worker) == 3, "every worker took a share: " + text
    assert stats.available == 0 and stats.in_flight == 0, text
    assert sum(w.worker.stats.processed for w in workers) == 600, text


@pytest.mark.slow
def test_one_worker_serves_several_queues_in_turn(client, make_reserve_worker):
    for name in ("mail", "sms"):
        client.create_queue(name)
    recorder = Recorder()
    worker = make_reserve_worker("w", recorder.job_for("w"), queues="mail, sms", wait=2)
    posted = post_numbered(client, "mail", 0, 30, 1) + post_numbered(client, "sms", 30, 30, 1)
    wait_until(lambda: recorder.count() >= 60, 30, lambda: f"60 processed, {recorder.count()}")
    worker.stop()
    assert Counter(recorder.ids()) == Counter(p.message_id for p in posted)


@pytest.mark.cassandra
@pytest.mark.slow
def test_competing_workers_over_two_api_nodes_on_cassandra(make_live_server, make_reserve_worker):
    """Two API nodes on one Cassandra keyspace, a worker starting on each (and
    failing over to the other): every message once."""
    nodes = [make_live_server(backend="cassandra") for _ in range(2)]
    name = f"q{uuid.uuid4().hex[:12]}"
    with QueueyClient(nodes[0].url, nodes[0].application, nodes[0].key) as client:
        client.create_queue(name, partitions=4)
        posted = post_numbered(client, name, 0, 200, 4)
        recorder = Recorder()
        workers = [
            make_reserve_worker(
                f"w{n}",
                recorder.job_for(f"w{n}"),
                queues=name,
                server=node,
                urls=f"{node.url},{nodes[1 - n].url}",
                concurrency=2,
            )
            for n, node in enumerate(nodes)
        ]
        # each node hides the newest read_delay (6 s) until it has settled
        wait_until(lambda: recorder.count() >= 200, 90, lambda: f"200, {recorder.count()}")
        wait_until(lambda: subscription_stats(client, name).in_flight == 0, 30, "every ack")
        for worker in workers:
            worker.stop()
        counts = Counter(recorder.ids())
        duplicates = sum(c - 1 for c in counts.values())
        lost = len({p.message_id for p in posted} - set(counts))
        text = (
            f"sent 200 over 2 API nodes, delivered {recorder.count()}, duplicates {duplicates}, "
            f"lost {lost}, per worker {dict(Counter(n for n, _ in recorder.seen))}"
        )
        print(text)
        assert duplicates == 0 and lost == 0, text


@pytest.mark.slow
def test_a_failing_job_is_released_with_backoff_then_dead_lettered(client, make_reserve_worker):
    client.create_queue("q", max_attempts=3, visibility_timeout=30)
    poison = client.post_batch("q", [OutgoingMessage({"n": 0}, attributes={"kind": "poison"})])[0]
    attempts: list[tuple[float, int]] = []
    done = Recorder()

    def job(message: ReservedMessage) -> None:
        if message.body["n"] == 0:
            attempts.append((time.monotonic(), message.attempts))
            raise ValueError(f"cannot process {message.body}\nsecond line is not kept")
        done.job_for("w")(message)

    worker = make_reserve_worker("w", job, retry_backoff=1, retry_max_backoff=2)
    client.post("q", {"n": 1})
    letters = wait_until(lambda: read_if_any(client, "q-dead"), 60, "the dead letter")
    wait_until(lambda: done.count() >= 1, 10, "the good message")
    worker.stop()

    (letter,) = letters
    attrs = letter.attributes or {}
    gaps = [round(b[0] - a[0], 2) for a, b in zip(attempts, attempts[1:], strict=False)]
    text = (
        f"attempts {[n for _, n in attempts]}, gaps {gaps} s (backoff 1, 2), "
        f"dead letter attributes {attrs}, released {worker.worker.stats.released}"
    )
    print(text)
    assert [n for _, n in attempts] == [1, 2, 3], "redelivered with its attempt count: " + text
    assert gaps[0] >= 1 - 0.05 and gaps[1] >= 2 - 0.05, "released with a growing delay: " + text
    assert letter.body == {"n": 0}
    assert attrs["source_queue"] == "q" and attrs["source_message_id"] == poison.message_id
    assert attrs["attempts"] == "3" and attrs["source_subscription"] == "default"
    assert attrs["last_error"] == "ValueError: cannot process {'n': 0}", text
    assert client.reserve("q", limit=10) == [], "nothing left: the poison is no longer in q"
    assert worker.worker.stats.processed == 1 and worker.worker.stats.failed == 3


@pytest.mark.slow
def test_a_slow_job_keeps_its_lease_past_the_visibility_timeout(client, make_reserve_worker):
    client.create_queue("q", visibility_timeout=2)
    slow = client.post("q", {"n": 0})
    finish = threading.Event()
    seen = Recorder()

    def slow_job(message: ReservedMessage) -> None:
        seen.job_for("slow")(message)
        assert finish.wait(60), "the test never let the slow job finish"

    first = make_reserve_worker("slow", slow_job, batch_size=1)
    wait_until(lambda: seen.count() == 1, 15, "the slow job to start")
    started = time.monotonic()
    rival = make_reserve_worker("rival", seen.job_for("rival"))
    keeper = first.worker.keeper
    # Three renewals of a 2 s lease, each due after half of it: well past 2 s.
    wait_until(lambda: keeper.extended >= 3, 30, lambda: f"3 renewals, {keeper.extended}")
    held_for = time.monotonic() - started
    finish.set()
    wait_until(lambda: first.worker.stats.processed == 1, 15, "the slow job's ack")
    rival.stop()
    first.stop()
    text = (
        f"held {held_for:.1f} s with a 2 s visibility timeout, renewals {keeper.extended}, "
        f"lost leases {keeper.lost}, deliveries {[name for name, _ in seen.seen]}"
    )
    print(text)
    assert held_for > 2, text
    assert [m.message_id for _, m in seen.seen] == [slow.message_id], "delivered once: " + text
    assert keeper.lost == 0 and first.worker.stats.ack_expired == 0, text
    assert subscription_stats(client).in_flight == 0


@pytest.mark.slow
def test_a_stop_finishes_the_job_in_hand_and_releases_the_rest(client, make_reserve_worker):
    client.create_queue("q", visibility_timeout=60)
    posted = client.post_batch("q", [OutgoingMessage({"n": n}) for n in range(5)])
    running, finish = threading.Event(), threading.Event()
    done = Recorder()

    def job(message: ReservedMessage) -> None:
        running.set()
        assert finish.wait(30)
        done.job_for("w")(message)

    handle = make_reserve_worker("w", job, batch_size=5)
    assert running.wait(15), "the first job started"
    handle.worker.stop()
    finish.set()
    handle.thread.join(30)
    assert not handle.thread.is_alive()

    back = client.reserve("q", limit=10)  # at once: released without delay, not after 60 s
    finished = done.ids()
    text = (
        f"sent 5, finished {len(finished)}, released {handle.worker.stats.released}, "
        f"available again at once {len(back)}"
    )
    print(text)
    assert finished == [posted[0].message_id], text
    assert sorted(m.message_id for m in back) == sorted(p.message_id for p in posted[1:]), text
    assert all(m.attempts == 2 for m in back), "the stopped delivery counted as an attempt"


@pytest.mark.slow
def test_a_failing_batch_context_acks_nothing(client, make_reserve_worker):
    client.create_queue("q")
    client.post_batch("q", [OutgoingMessage({"n": n}) for n in range(3)])
    exits = Counter()
    recorder = Recorder()

    class FailingExit:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            exits["calls"] += 1
            if exits["calls"] == 1:
                raise OSError("fsync failed")
            return False

    worker = make_reserve_worker("w", recorder.job_for("w"), context=FailingExit)
    wait_until(lambda: recorder.count() >= 6, 30, "the batch to be processed twice")
    wait_until(lambda: worker.worker.stats.processed == 3, 15, "the second batch's acks")
    worker.stop()
    counts = Counter(recorder.ids())
    text = f"jobs run {dict(Counter(counts.values()))}, stats {worker.worker.stats}"
    print(text)
    assert sorted(counts.values()) == [2, 2, 2], "the voided batch was processed again: " + text
    assert worker.worker.stats.batch_failures == 1 and worker.worker.stats.ack_expired == 0


# ------------------------------------------------------------- a real process


@pytest.mark.slow
def test_queuey_worker_in_reserve_mode_end_to_end(client, make_reserve_worker_process):
    client.create_queue("q", partitions=2, visibility_timeout=30)
    workers = [make_reserve_worker_process(f"p{n}", concurrency=2) for n in range(2)]
    for worker in workers:  # running, its signal handlers installed
        wait_until(lambda w=worker: "reserve mode" in w.log_text(), 30, f"{worker.name} to start")
    posted = post_numbered(client, "q", 0, 100, 2)
    output = make_reserve_worker_process.output
    wait_until(lambda: len(read_processed(output)) >= 100, 60, "100 crashes processed")
    wait_until(lambda: subscription_stats(client).in_flight == 0, 30, "every ack")
    for worker in workers:
        worker.proc.send_signal(signal.SIGTERM)
    codes = [worker.wait(30) for worker in workers]
    lines = read_processed(output)
    counts = Counter(line["message_id"] for line in lines)
    text = (
        f"sent {len(posted)}, processed {len(lines)}, duplicates "
        f"{sum(c - 1 for c in counts.values())}, per process "
        f"{dict(Counter(line['pid'] for line in lines))}, exit codes {codes}"
    )
    print(text)
    assert codes == [0, 0], workers[0].log_text()[-3000:]
    assert set(counts) == {p.message_id for p in posted} and max(counts.values()) == 1, text


@pytest.mark.slow
def test_sigterm_releases_what_the_worker_process_had_not_started(
    client, make_reserve_worker_process
):
    client.create_queue("q", visibility_timeout=60)
    posted = post_numbered(client, "q", 0, 10, 1)
    worker = make_reserve_worker_process("p0", delay=0.5, batch_size=10)
    output = make_reserve_worker_process.output
    wait_until(lambda: subscription_stats(client).in_flight == 10, 30, "the batch leased")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log_text()[-3000:]
    done = {line["message_id"] for line in read_processed(output)}
    back = {m.message_id for m in client.reserve("q", limit=10)}
    text = f"sent 10, processed {len(done)}, released and reserved again at once {len(back)}"
    print(text)
    assert back, text
    assert done | back == {p.message_id for p in posted} and not done & back, text
    assert "releasing the messages not started" in worker.log_text()

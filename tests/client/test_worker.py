"""Workers on a real ZooKeeper and a real Queuey server: nothing lost, order kept."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections import Counter

import pytest

from queuey.client import Checkpoint, OutgoingMessage, QueueyClient, WorkerConfig
from queuey.client.worker.config import Runner
from queuey.errors import ConfigurationError
from tests.client.conftest import (
    REBALANCE_TIMEOUT,
    REPO,
    SESSION_TIMEOUT,
    Recorder,
    owners,
    post_numbered,
    read_processed,
)
from tests.client.test_group import expire_session
from tests.support import wait_until

GROUP_ROOT = "/queuey/groups/testers"


def zk_checkpoints(zk, queue: str = "q") -> dict[int, str]:
    path = f"{GROUP_ROOT}/checkpoints/{queue}"
    if not zk.exists(path):
        return {}
    found = {}
    for child in zk.get_children(path):
        cp = Checkpoint.from_bytes(zk.get(f"{path}/{child}")[0])
        found[int(child)] = cp.message_id
    return found


def last_per_partition(posted) -> dict[int, str]:
    last = {}
    for p in posted:
        last[p.partition] = p.message_id
    return last


def assert_in_order(recorder: Recorder) -> None:
    for partition, messages in recorder.by_partition().items():
        ns = [m.body["n"] for m in messages]
        # a re-delivered tail may repeat, but never goes backwards past what follows it
        firsts = list(dict.fromkeys(ns))
        assert firsts == sorted(firsts), f"partition {partition} out of order"


class Poster:
    """Posts numbered messages from its own thread until stopped."""

    def __init__(self, live_server, queue: str, partitions: int, start: int) -> None:
        self.client = QueueyClient(live_server.url, live_server.application, live_server.key)
        self.queue, self.partitions, self.next = queue, partitions, start
        self.posted = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = [
                OutgoingMessage({"crash_id": f"c{n}", "n": n}, partition=n % self.partitions + 1)
                for n in range(self.next, self.next + 5)
            ]
            self.posted.extend(self.client.post_batch(self.queue, batch))
            self.next += 5
            self._stop.wait(0.02)

    def stop(self) -> list:
        self._stop.set()
        self._thread.join()
        self.client.close()
        return self.posted


# ----------------------------------------------------------------------- config


@pytest.mark.unit
def test_config_from_ini_with_environment_override(tmp_path):
    ini = tmp_path / "w.ini"
    ini.write_text(
        "[queuey]\nurls = http://a:1, http://b:2\napplication = app\nkey = k\n"
        "[zookeeper]\nhosts = z:2181/chroot\nsession_timeout = 6\n"
        "[worker]\ngroup = g\nqueues = crashes\n  other-*\njob = examples.crash_worker:process\n"
        "batch_size = 50\npythonpath = ..\n"
    )
    config = WorkerConfig.from_ini(ini, environ={"QUEUEY_QUEUEY_KEY": "from-env"})
    assert config.urls == ("http://a:1", "http://b:2")
    assert config.key == "from-env"
    assert config.queues == ("crashes", "other-*")
    assert config.session_timeout == 6.0 and config.batch_size == 50
    assert config.failure_queue == "{queue}-failed" and config.max_attempts == 5
    assert config.pythonpath == (str(tmp_path.parent.resolve()),)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("section", "key", "value", "named"),
    [
        ("worker", "batch_size", "0", "worker.batch_size"),
        ("worker", "batch_size", "many", "worker.batch_size"),
        ("worker", "job", "nocolon", "worker.job"),
        ("worker", "per_batch", "perhaps", "worker.per_batch"),
        ("worker", "failure_queue", "dead", "worker.failure_queue"),
        ("zookeeper", "hosts", "", "zookeeper.hosts"),
    ],
)
def test_a_bad_setting_is_named(section, key, value, named):
    sections = {
        "queuey": {"urls": "http://a", "application": "app"},
        "zookeeper": {"hosts": "z:1"},
        "worker": {"group": "g", "queues": "q", "job": "m:f"},
    }
    sections[section][key] = value
    with pytest.raises(ConfigurationError) as info:
        WorkerConfig.from_mapping(sections, environ={})
    assert info.value.key == named


@pytest.mark.unit
@pytest.mark.parametrize("value", ["true", "false"])
def test_queuey_auto_dedup_reaches_the_client_of_either_worker(value):
    """Both workers (partitions and reserve mode) build their clients through
    ``Runner._client``; ``queuey.auto_dedup`` reaches it in either mode."""

    class Bare(Runner):
        def __init__(self, config: WorkerConfig) -> None:
            self.config = config

    sections = {
        "queuey": {"urls": "http://a", "application": "app", "auto_dedup": value},
        "zookeeper": {"hosts": "z:1"},
        "worker": {"group": "g", "queues": "q", "job": "m:f"},
    }
    client = Bare(WorkerConfig.from_mapping(sections, environ={}))._client()
    assert client.auto_dedup is (value == "true")
    client.close()


@pytest.mark.unit
def test_the_sample_config_loads():
    config = WorkerConfig.from_ini(REPO / "etc" / "worker.ini", environ={})
    assert config.job == "examples.crash_worker:process"
    assert config.context == "examples.crash_worker:batch_context"


# ---------------------------------------------------------------------- workers


@pytest.mark.zookeeper
def test_three_workers_consume_27_partitions_once_each_in_order(client, make_worker, zk):
    client.create_queue("q", partitions=27)
    posted = post_numbered(client, "q", 0, 540, 27)
    recorder = Recorder()
    workers = [make_worker(f"w{i}", recorder.job_for(f"w{i}")) for i in range(3)]
    wait_until(lambda: recorder.count() >= 540, 60, "every message to be processed")
    wait_until(lambda: zk_checkpoints(zk) == last_per_partition(posted), 10, "final checkpoints")

    assert Counter(recorder.ids()) == Counter(p.message_id for p in posted), "each once"
    assert_in_order(recorder)
    per_worker = {}
    for name, message in recorder.seen:
        per_worker.setdefault(name, set()).add(message.partition)
    assert set().union(*per_worker.values()) == set(range(1, 28))
    # The partitions end 9, 9, 9. Who processed which message is not asserted:
    # a worker that joins late (a busy box) finds some partitions already
    # drained by their owner before the rebalance (seen once: [8, 9, 10]).
    wait_until(
        lambda: sorted(len(w.group.owned()) for w in workers) == [9, 9, 9],
        REBALANCE_TIMEOUT * 2,
        "the partitions to spread 9, 9, 9",
    )
    assert sum(w.worker.stats.processed for w in workers) == 540


@pytest.mark.zookeeper
@pytest.mark.slow
def test_join_and_session_expiry_lose_nothing(
    client, make_worker, zk, zookeeper_chroot, live_server
):
    partitions, batch = 12, 10
    client.create_queue("q", partitions=partitions)
    before = post_numbered(client, "q", 0, 240, partitions)
    recorder = Recorder()

    def slow(name):
        record = recorder.job_for(name)

        def job(message):
            time.sleep(0.002)
            record(message)

        return job

    workers = [make_worker(f"w{i}", slow(f"w{i}"), batch_size=batch) for i in range(2)]
    poster = Poster(live_server, "q", partitions, start=10_000)
    wait_until(lambda: recorder.count() >= 100, 30, "processing to start")

    started = time.monotonic()
    workers.append(make_worker("w2", slow("w2"), batch_size=batch))
    wait_until(
        lambda: all(w.group.settled and len(w.group.members) == 3 for w in workers),
        REBALANCE_TIMEOUT,
        "the newcomer's share",
    )
    join_seconds = time.monotonic() - started
    assert not [i for i, n in Counter(recorder.ids()).items() if n > 1], (
        "a join re-delivers nothing"
    )

    victim = workers[0]
    victim_owned = len(victim.group.owned())
    expire_session(victim.group.zk, zookeeper_chroot)
    started = time.monotonic()
    wait_until(
        lambda: victim.group.stats.sessions == 2, SESSION_TIMEOUT * 2, "the victim's new session"
    )
    wait_until(
        lambda: all(w.group.settled and len(w.group.members) == 3 for w in workers),
        SESSION_TIMEOUT + REBALANCE_TIMEOUT,
        "the group to settle after the expiry",
    )
    expiry_seconds = time.monotonic() - started

    time.sleep(0.5)  # let the poster add messages after the rebalance too
    after = poster.stop()
    posted = before + after
    wait_until(lambda: set(recorder.ids()) >= {p.message_id for p in posted}, 60, "everything")

    counts = Counter(recorder.ids())
    duplicates = sum(n - 1 for n in counts.values())
    print(
        f"join settled in {join_seconds:.2f}s, expiry in {expiry_seconds:.2f}s, "
        f"{len(posted)} messages, {duplicates} duplicate(s)"
    )
    assert set(counts) == {p.message_id for p in posted}, "none lost"
    assert duplicates <= batch * victim_owned
    assert_in_order(recorder)


@pytest.mark.zookeeper
def test_a_clean_restart_resumes_from_every_partitions_checkpoint(client, make_worker, zk):
    client.create_queue("q", partitions=27)
    first = post_numbered(client, "q", 0, 270, 27)
    recorder = Recorder()
    workers = [make_worker(f"a{i}", recorder.job_for("first")) for i in range(3)]
    wait_until(lambda: recorder.count() >= 270, 60, "the first round")
    for w in workers:
        w.stop()
    assert zk_checkpoints(zk) == last_per_partition(first), "every partition committed on stop"

    second = post_numbered(client, "q", 270, 270, 27)
    # other member names: a different assignment, so partitions change hands
    workers = [make_worker(f"b{i}", recorder.job_for("second")) for i in range(3)]
    wait_until(lambda: recorder.count() >= 540, 60, "the second round")
    time.sleep(0.3)  # a re-delivery would show up now
    counts = Counter(recorder.ids())
    assert max(counts.values()) == 1, "nothing processed twice after a clean restart"
    assert {m.message_id for name, m in recorder.seen if name == "second"} == {
        p.message_id for p in second
    }
    assert_in_order(recorder)


@pytest.mark.zookeeper
def test_a_poison_message_is_parked_and_later_ones_processed(client, make_worker, zk):
    client.create_queue("q", partitions=1)
    posted = client.post_batch("q", [{"crash_id": f"c{n}", "n": n} for n in range(10)])
    recorder = Recorder()
    failures = []
    make_worker(
        "w0",
        recorder.job_for("w0", fail_when=lambda m: m.body["n"] == 3),
        max_attempts=3,
        failure_hook=lambda message, exc: failures.append((message.message_id, exc)),
    )
    wait_until(lambda: recorder.count() >= 9 and failures, 30, "processing past the poison")
    assert [m.body["n"] for _, m in recorder.seen] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert failures[0][0] == posted[3].message_id
    assert isinstance(failures[0][1], ValueError)

    parked = client.read("q-failed", order="ascending")
    assert len(parked) == 1
    record = parked[0].body
    assert record["message_id"] == posted[3].message_id
    assert record["partition"] == 1 and record["queue"] == "q"
    assert record["attempts"] == 3
    assert record["body"] == {"crash_id": "c3", "n": 3}
    assert record["error"]["type"] == "builtins.ValueError"
    assert "cannot process" in record["error"]["message"]
    assert "Traceback" in record["error"]["traceback"]
    wait_until(lambda: zk_checkpoints(zk) == {1: posted[-1].message_id}, 5, "the checkpoint")


@pytest.mark.zookeeper
def test_per_batch_jobs_with_a_context_fall_back_to_single_messages(client, make_worker):
    client.create_queue("q", partitions=2)
    client.post_batch("q", [OutgoingMessage({"n": n}, partition=1) for n in range(6)])
    batches, contexts = [], []

    def job(messages):
        if any(m.body["n"] == 4 for m in messages):
            raise RuntimeError("bad batch")
        batches.append([m.body["n"] for m in messages])

    @contextlib.contextmanager
    def context():
        contexts.append("enter")
        yield

    make_worker("w0", job, per_batch="true", batch_size=3, max_attempts=2, context=context)
    wait_until(lambda: sum(len(b) for b in batches) >= 5, 30, "the batches")
    assert batches[0] == [0, 1, 2]
    assert [n for b in batches[1:] for n in b] == [3, 5]  # 4 parked, alone
    assert len(contexts) >= 2
    wait_until(lambda: len(client.read("q-failed")) == 1, 10, "the parked message")


def consume_with_a_mirror(client, make_worker, recorder: Recorder) -> list:
    """Post 30 messages to 3 partitions, consume them with checkpoints mirrored, stop."""
    client.create_queue("q", partitions=3)
    posted = post_numbered(client, "q", 0, 30, 3)
    first = make_worker("w0", recorder.job_for("w0"), mirror_checkpoints="true")
    wait_until(
        lambda: client.get_checkpoints("q", "testers") == last_per_partition(posted),
        30,
        "mirrored checkpoints",
    )
    first.stop()
    return posted


@pytest.mark.zookeeper
def test_checkpoints_are_mirrored_to_the_http_api_and_restored_from_it(client, make_worker, zk):
    recorder = Recorder()
    posted = consume_with_a_mirror(client, make_worker, recorder)
    # A group under another ZooKeeper root has no checkpoints there: it reads the mirror.
    make_worker(
        "w1", recorder.job_for("w1"), mirror_checkpoints="true", zookeeper_root="/elsewhere"
    )
    more = post_numbered(client, "q", 30, 3, 3)
    wait_until(lambda: recorder.count() >= 33, 30, "the new messages")
    time.sleep(0.3)
    assert Counter(recorder.ids()) == Counter(p.message_id for p in posted + more)


# ------------------------------------------------------------- real processes


@pytest.mark.zookeeper
@pytest.mark.slow
def test_sigterm_finishes_the_batch_commits_and_exits_0(client, make_worker_process, zk):
    client.create_queue("q", partitions=4)
    posted = post_numbered(client, "q", 0, 200, 4)
    worker = make_worker_process("p0", delay=0.01)
    output = make_worker_process.output
    wait_until(lambda: len(read_processed(output)) >= 30, 30, "the worker to get going")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log_text()[-3000:]

    done = read_processed(output)
    last_done = {}
    for line in done:
        last_done[line["partition"]] = line["message_id"]
    assert zk_checkpoints(zk) == last_done, "the committed checkpoint is the last finished message"
    assert owners(zk, "q") == {}, "ownership released"
    assert zk.get_children(f"{GROUP_ROOT}/members") == []
    assert "finishing the current batch" in worker.log_text()

    make_worker_process("p1")
    wait_until(lambda: len(read_processed(output)) >= 200, 60, "a new worker to finish")
    ids = [line["message_id"] for line in read_processed(output)]
    assert Counter(ids) == Counter(p.message_id for p in posted), "none lost, none twice"


@pytest.mark.zookeeper
@pytest.mark.slow
def test_a_killed_worker_process_loses_nothing(client, make_worker_process, zk, live_server):
    partitions, batch = 8, 10
    client.create_queue("q", partitions=partitions)
    before = post_numbered(client, "q", 0, 400, partitions)
    procs = [make_worker_process(f"p{i}", delay=0.003, batch_size=batch) for i in range(2)]
    output = make_worker_process.output
    wait_until(lambda: set(owners(zk, "q").values()) == {"p0", "p1"}, 30, "both to own partitions")
    poster = Poster(live_server, "q", partitions, start=10_000)
    wait_until(lambda: len(read_processed(output)) >= 100, 30, "processing to start")

    procs.append(make_worker_process("p2", delay=0.003, batch_size=batch))
    wait_until(lambda: set(owners(zk, "q").values()) == {"p0", "p1", "p2"}, 30, "p2 to join")

    victim_owned = [p for p, m in owners(zk, "q").items() if m == "p0"]
    procs[0].kill()
    killed_at = time.monotonic()
    wait_until(
        lambda: len(owners(zk, "q")) == partitions and "p0" not in owners(zk, "q").values(),
        SESSION_TIMEOUT + REBALANCE_TIMEOUT + 2,
        "the survivors to own every partition",
    )
    takeover = time.monotonic() - killed_at
    time.sleep(0.5)
    posted = before + poster.stop()
    expected = {p.message_id for p in posted}
    wait_until(lambda: {x["message_id"] for x in read_processed(output)} >= expected, 60, "all")

    counts = Counter(x["message_id"] for x in read_processed(output))
    duplicates = sum(n - 1 for n in counts.values())
    print(
        f"takeover after kill -9: {takeover:.2f}s (session {SESSION_TIMEOUT}s); "
        f"{len(posted)} messages, {duplicates} duplicate(s); victim owned {len(victim_owned)}"
    )
    assert set(counts) == expected
    assert takeover <= SESSION_TIMEOUT + REBALANCE_TIMEOUT
    assert duplicates <= batch * len(victim_owned)
    for proc in procs[1:]:
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


# ------------------------------------------------------------------- Cassandra


@pytest.mark.zookeeper
@pytest.mark.cassandra
@pytest.mark.slow
def test_a_group_consumes_a_cassandra_backed_queue(make_live_server, make_worker, zk):
    server = make_live_server(backend="cassandra")
    with QueueyClient(server.url, server.application, server.key) as c:
        name = f"q{int(time.time() * 1000)}"
        c.create_queue(name, partitions=6)
        posted = post_numbered(c, name, 0, 120, 6)
        recorder = Recorder()
        for i in range(2):
            make_worker(f"w{i}", recorder.job_for(f"w{i}"), queues=name, server=server)
        # the Cassandra server hides the newest read_delay (6 s) of every partition
        wait_until(lambda: recorder.count() >= 120, 60, "every message")
        assert Counter(recorder.ids()) == Counter(p.message_id for p in posted)
        assert_in_order(recorder)
        wait_until(
            lambda: zk_checkpoints(zk, name) == last_per_partition(posted), 10, "checkpoints"
        )
        json.dumps(recorder.by_partition(), default=str)  # results are plain data

"""A consumer killed with ``kill -9`` while holding leases loses nothing.

A consumer process (this module run as ``python -m
tests.faults.test_work_queue_kill URL APP QUEUE COUNT VT OUT``) reserves
``COUNT`` messages through one API node with leases of ``VT`` seconds, logs
each delivery to ``OUT`` (one synced JSON line) and then holds them without
ever acking. The test kills it with SIGKILL; consumers on both nodes then
ack everything, and the held messages must come back once their leases end,
not before, with their attempt counts, and none may be lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.faults.conftest import REPO
from tests.faults.faults_support import read_log
from tests.faults.test_work_queue import assert_invariants, post_keys, queue_name, report
from tests.faults.work_queue_support import (
    Consumer,
    Delivery,
    WorkLog,
    WorkQueueHttp,
    run_consumers,
    statuses,
)
from tests.faults.work_queue_verdict import verdict
from tests.support import KEY, wait_until


def hold_leases(url: str, application: str, queue: str, count: int, vt: int, out: Path) -> None:
    """Reserve ``count`` messages, log each (synced), then hold them forever."""
    http = WorkQueueHttp(url, application)
    got = 0
    with out.open("a", encoding="utf-8") as f:
        while got < count:
            sent = time.time()
            messages = http.reserve(
                queue, limit=min(10, count - got), visibility_timeout=vt, wait=1
            )
            received = time.time()
            for m in messages:
                record = {"key": m["body"].get("key"), "sent": sent, "received": received, **m}
                f.write(json.dumps(record) + "\n")
            got += len(messages)
            f.flush()
            os.fsync(f.fileno())
        f.write(json.dumps({"holding": got}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    while True:
        time.sleep(3600)


def read_held(path: Path) -> tuple[list[dict], bool]:
    """The deliveries a holder logged, and whether it said it holds them all."""
    records, holding = [], False
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by the kill
            if "holding" in record:
                holding = True
            else:
                records.append(record)
    return records, holding


@pytest.mark.slow
def test_a_consumer_killed_with_its_leases_loses_nothing(work_queue_nodes, tmp_path):
    """A consumer process reserves 40 of 200 messages (4 s leases) through node A
    and is killed with SIGKILL while holding them. Consumers on both nodes ack
    everything: the 40 come back once their leases end (not before) with
    attempts 2, and the dead consumer's receipts are ``expired`` afterwards."""
    nodes = work_queue_nodes
    total, held, vt = 200, 40, 4
    queue = queue_name("kill")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    admin.create_queue(queue, partitions=2)
    keys = [f"k{n}" for n in range(total)]
    post_keys(admin, queue, keys, partitions=2)
    out = tmp_path / "held.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.test_work_queue_kill",
         nodes.a.url, nodes.application, queue, str(held), str(vt), str(out)],
        cwd=REPO,
    )  # fmt: skip
    try:
        wait_until(lambda: read_held(out)[1] or holder.poll() is not None, 60, "the holder")
        assert holder.poll() is None, f"the holding consumer exited with {holder.returncode}"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    killed_at = time.time()
    records, _ = read_held(out)
    log = WorkLog(keys)
    log.delivered(
        [
            Delivery("holder", r["key"], r["message_id"], r["partition"], r["timestamp"],
                     r.get("priority", 0), r["attempts"], r["receipt"], vt, r["sent"],
                     r["received"])
            for r in records
        ]
    )  # fmt: skip
    stop = threading.Event()
    consumers = [
        Consumer(f"c{i}", (nodes.b, nodes.a)[i % 2].url, nodes.application, queue, log, stop,
                 limit=10, visibility_timeout=30, wait=1)
        for i in range(3)
    ]  # fmt: skip
    run_consumers(consumers, log, timeout=60)
    held_keys = {r["key"] for r in records}
    back = [d for d in log.deliveries if d.key in held_keys and d.consumer != "holder"]
    recovered = held_keys & log.acked_keys
    zombie = admin.ack(queue, [r["receipt"] for r in records])
    late = statuses(zombie, [r["receipt"] for r in records])
    v = verdict(log)
    lease_end = min(r["sent"] for r in records) + vt
    first_back = min((d.received for d in back), default=float("nan"))
    line = report(
        f"{nodes.backend}, kill -9 of a consumer holding {held} leases of {vt}s",
        f"leased={len(records)} killed=1 recovered={len(recovered)} "
        f"lost={len(held_keys - log.acked_keys)} "
        f"first_back_after_kill_s={first_back - killed_at:.2f} "
        f"first_back_after_first_lease_end_s={first_back - lease_end:.2f} "
        f"zombie_acks={sorted(set(late.values()))} | {v.line()}",
    )
    assert len(records) == held, line
    assert_invariants(v, log, line)
    assert recovered == held_keys, line
    assert all(d.attempts == 2 for d in back), line
    assert set(late.values()) == {"expired"}, line
    admin.close()


WORKER_INI = """\
[queuey]
urls = {url}
application = {application}
key = {key}
timeout = 10
retries = 5

[worker]
mode = reserve
queues = {queue}
job = tests.faults.faults_support:process
context = tests.faults.faults_support:batch_context
pythonpath = {repo}
batch_size = 10
visibility_timeout = {vt}
wait = 1
concurrency = 1
retry_backoff = 1
retry_max_backoff = 1
"""


def start_worker(name: str, url: str, nodes, queue: str, vt: int, delay: float, workdir: Path):
    """A ``queuey-worker`` in reserve mode, logging what it processes (faults_support)."""
    ini = workdir / f"{name}.ini"
    ini.write_text(
        WORKER_INI.format(
            url=url, application=nodes.application, key=KEY, queue=queue, vt=vt, repo=REPO
        )
    )
    env = {
        **os.environ,
        "FAULT_WORKER_NAME": name,
        "FAULT_PROCESSING_LOG": str(workdir / "processing.jsonl"),
        "FAULT_JOB_DELAY": str(delay),
    }
    script = Path(sys.executable).with_name("queuey-worker")
    with (workdir / f"{name}.log").open("ab") as out:
        return subprocess.Popen(
            [str(script), "-c", str(ini)], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.mark.slow
def test_a_queuey_worker_killed_mid_batch_loses_nothing(work_queue_nodes, tmp_path):
    """Two ``queuey-worker`` processes in reserve mode, a slow one on node A
    (0.2 s per message, 4 s leases it keeps extending) and a fast one on node
    B, share 300 messages. The slow one is killed with SIGKILL in the middle
    of a batch: every message is still processed and acked, the killed
    batch's messages by the other worker after the kill, and the
    subscription ends empty. Reprocessed messages (at-least-once) are counted."""
    nodes = work_queue_nodes
    total, vt = 300, 4
    queue = queue_name("wkill")
    admin = WorkQueueHttp(nodes.a.url, nodes.application)
    admin.create_queue(queue, partitions=2, visibility_timeout=vt)
    for start in range(0, total, 100):
        admin.post_batch(
            queue, [{"body": {"key": f"w{n}", "n": n}} for n in range(start, start + 100)]
        )
    path = tmp_path / "processing.jsonl"
    slow = start_worker("slow", nodes.a.url, nodes, queue, vt, 0.2, tmp_path)
    fast = None
    try:
        wait_until(
            lambda: (
                sum(r["worker"] == "slow" for r in read_log(path)) >= 15 or slow.poll() is not None
            ),
            60,
            "the slow worker to be in its second batch",
        )
        assert slow.poll() is None, (tmp_path / "slow.log").read_text(errors="replace")[-2000:]
        fast = start_worker("fast", nodes.b.url, nodes, queue, vt, 0.003, tmp_path)
        slow.send_signal(signal.SIGKILL)
        slow.wait(10)
        killed_at = time.time()

        def all_done() -> bool:
            stats = admin.subscription_stats(queue)
            done = {r["n"] for r in read_log(path)} >= set(range(total))
            return done and stats.get("available") == 0 and stats.get("in_flight") == 0

        wait_until(all_done, 90, lambda: f"every message done: {admin.subscription_stats(queue)}")
    finally:
        for proc in (slow, fast):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    records = read_log(path)
    by_slow = [r for r in records if r["worker"] == "slow"]
    last_batch = max(r["batch"] for r in by_slow)
    cut = {r["n"] for r in by_slow if r["batch"] == last_batch}  # processed, never acked
    redone = {r["n"] for r in records if r["worker"] == "fast" and r["n"] in cut}
    redone_after_kill = {
        r["n"] for r in records if r["worker"] == "fast" and r["n"] in cut and r["at"] > killed_at
    }
    processed = {r["n"] for r in records}
    line = report(
        f"{nodes.backend}, kill -9 of a queuey-worker mid-batch",
        f"messages={total} processed_by_killed={len(by_slow)} cut_batch={len(cut)} "
        f"redone={len(redone)} redone_after_kill={len(redone_after_kill)} "
        f"lost={total - len(processed & set(range(total)))} "
        f"reprocessed={len(records) - len(processed)} stats={admin.subscription_stats(queue)}",
    )
    assert processed >= set(range(total)), line
    assert redone_after_kill == cut, line
    assert admin.reserve(queue, limit=100) == [], line
    admin.close()


if __name__ == "__main__":
    url, app, queue, count, vt, out = sys.argv[1:7]
    hold_leases(url, app, queue, int(count), int(vt), Path(out))

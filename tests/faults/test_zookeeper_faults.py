"""ZooKeeper faults under running workers: restarts, an expired session, a frozen worker.

Three members of one group consume an 8-partition queue while a producer
keeps posting: two ``queuey-worker`` processes (``w0``, ``w1``) and one
in-process worker (``w2``, in this process so the test can read its session
id and password, which the expiry needs). On the test's own ZooKeeper (port
12381), one after the other:

(a) ZooKeeper is stopped and started again at once (same port and data);
(b) ``w2``'s session is expired on the server (a second client attaches to
    the session and closes it);
(c) ZooKeeper is stopped for twice the session timeout, then started;
(d) ``w0`` is frozen (SIGSTOP) until the others own all its partitions, then
    thawed (a long GC pause or a suspended VM).

After each, the group must settle again and processing go on. A sampler
polls the owner nodes throughout. What must hold (the evidence is
:mod:`tests.faults.faults_support`):

* no partition is processed by two workers at once: no two batches of a
  partition by different workers overlap in time (the processing log), no
  record was written while ZooKeeper held another member's owner node
  throughout, and no owner node outlives its member's session. The one
  exception is (d): a frozen worker finishes the message its job was in the
  middle of (nothing can stop a job already running); it may start no other,
  and that message is left out of the overlap checks;
* nothing is processed while ZooKeeper is down;
* every posted message is processed at least once;
* duplicates are at most ``batch_size`` per partition that changed hands.

The last tests check the detectors themselves on made-up records (pure logic).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from queuey.client import QueueyClient, Worker, WorkerConfig
from tests.client.conftest import (
    REBALANCE_TIMEOUT,
    SESSION_TIMEOUT,
    RunningWorker,
    post_numbered,
    worker_settings,
)
from tests.client.test_group import expire_session
from tests.faults.conftest import REPO, AckingPoster
from tests.faults.faults_support import (
    Owner,
    OwnershipSampler,
    ProcessingLog,
    Sample,
    longest_gap,
    overlapping_batches,
    processed_by_non_owner,
    read_log,
    worker_changes,
)
from tests.support import wait_until

PARTITIONS = 8
BATCH = 10
JOB_DELAY = 0.003
MEMBERS = {"w0", "w1", "w2"}


class WorkerProcesses:
    """``queuey-worker`` processes writing to one processing log; killed if left running."""

    def __init__(self, workdir: Path, server, hosts: str) -> None:
        self.workdir, self.server, self.hosts = workdir, server, hosts
        self.log = workdir / "processing.jsonl"
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> subprocess.Popen:
        sections = worker_settings(self.server, self.hosts, "q", batch_size=BATCH)
        sections["worker"].update(
            job="tests.faults.faults_support:process",
            context="tests.faults.faults_support:batch_context",
            pythonpath=str(REPO),
        )
        ini = self.workdir / f"{name}.ini"
        ini.write_text(
            "".join(
                f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
                for section, values in sections.items()
            )
        )
        env = {
            **os.environ,
            "FAULT_WORKER_NAME": name,
            "FAULT_PROCESSING_LOG": str(self.log),
            "FAULT_JOB_DELAY": str(JOB_DELAY),
        }
        script = Path(sys.executable).with_name("queuey-worker")
        with (self.workdir / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [str(script), "-c", str(ini), "--member-id", name],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def terminate(self) -> dict[str, int]:
        """SIGTERM each (finish the batch, commit, leave); their exit codes."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait(10)
        return codes

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def log_text(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]


@pytest.fixture
def worker_processes(tmp_path, live_server, own_zookeeper_chroot):
    procs = WorkerProcesses(tmp_path, live_server, own_zookeeper_chroot)
    yield procs
    procs.kill_all()


@pytest.fixture
def in_process_worker(tmp_path, live_server, own_zookeeper_chroot, worker_processes):
    """``w2``: a Worker on a thread here, logging to the processes' processing log."""
    log = ProcessingLog("w2", worker_processes.log, delay=JOB_DELAY)
    config = WorkerConfig.from_mapping(
        worker_settings(live_server, own_zookeeper_chroot, "q", batch_size=BATCH), environ={}
    )
    worker = Worker(config, job=log.process, context=log.batch_context, member_id="w2")
    handle = RunningWorker(worker)
    yield handle
    if handle.thread.is_alive():
        handle.stop()
    worker.client.close()


def settled(sampler: OwnershipSampler) -> bool:
    """Every partition owned, by the three members, each by its member's live session."""
    with contextlib.suppress(Exception):
        owners = sampler.owners()
        sessions = sampler.member_sessions()
        return (
            len(owners) == PARTITIONS
            and {o.member for o in owners.values()} == MEMBERS
            and all(sessions.get(o.member) == o.session for o in owners.values())
        )
    return False


class Phases:
    """Runs each fault, then waits for the group to settle and for ``more``
    messages to be processed after it; remembers when each began and ended
    (wall-clock, as the processing log) and how long settling took."""

    def __init__(self, sampler: OwnershipSampler, log: Path, more: int = 400) -> None:
        self.sampler, self.log, self.more = sampler, log, more
        self.windows: dict[str, tuple[float, float]] = {}
        self.settled_s: dict[str, float] = {}

    def processed(self) -> int:
        return len(read_log(self.log))

    def after(self, name: str, fault) -> None:
        mark = self.processed()
        began, started = time.time(), time.monotonic()
        fault()
        wait_until(lambda: settled(self.sampler), 90, f"the group to settle after {name}")
        self.settled_s[name] = round(time.monotonic() - started, 2)
        wait_until(
            lambda: self.processed() >= mark + self.more, 90, f"processing to go on after {name}"
        )
        self.windows[name] = (began, time.time())

    def figures(self, records: list[dict]) -> dict[str, dict[str, float]]:
        """Per fault: seconds until settled, longest time without processing, handovers."""
        return {
            name: {
                "settled_s": self.settled_s[name],
                "no_processing_s": round(longest_gap(records, since, until), 2),
                "handovers": self.sampler.handovers(since, until),
            }
            for name, (since, until) in self.windows.items()
        }


def taken_over(sampler: OwnershipSampler, member: str) -> bool:
    """Every partition owned, none by ``member``."""
    with contextlib.suppress(Exception):
        owners = sampler.owners()
        return len(owners) == PARTITIONS and member not in {o.member for o in owners.values()}
    return False


def late_records(records: list[dict], worker: str, frozen: float, thawed: float) -> list[dict]:
    """What ``worker`` wrote after it was thawed in a batch it had begun before it froze."""
    return [
        r
        for r in records
        if r["worker"] == worker and r["batch_started"] < frozen and r["at"] >= thawed
    ]


@pytest.mark.slow
@pytest.mark.zookeeper
def test_zookeeper_faults_keep_one_owner_per_partition_and_lose_nothing(
    live_server, own_zookeeper, own_zookeeper_chroot, worker_processes, in_process_worker
):
    started = time.monotonic()
    client = QueueyClient(live_server.url, live_server.application, live_server.key)
    client.create_queue("q", partitions=PARTITIONS)
    before = post_numbered(client, "q", 0, 400, PARTITIONS)
    log = worker_processes.log

    sampler = OwnershipSampler(own_zookeeper_chroot, "testers", "q").start()
    phases = Phases(sampler, log)
    worker_processes.start("w0")
    worker_processes.start("w1")
    victim = in_process_worker.start()
    sessions, down, frozen = {}, {}, {}
    try:
        wait_until(lambda: settled(sampler), 60, "three members owning every partition")
        poster = AckingPoster(
            "z", [live_server.url], live_server.application, "q", PARTITIONS, batch=5, pause=0.02
        ).start()
        wait_until(lambda: phases.processed() >= 600, 60, "processing to start")

        # (a) ZooKeeper stops and starts again at once, on the same port and data.
        sessions["before"] = victim.group.stats.sessions
        phases.after("restart", own_zookeeper.restart)
        sessions["after_restart"] = victim.group.stats.sessions

        # (b) the in-process member's session is expired on the server.
        victim_owned = len(victim.group.owned())

        def expire() -> None:
            expire_session(victim.group.zk, own_zookeeper_chroot)
            wait_until(
                lambda: victim.group.stats.sessions > sessions["after_restart"],
                SESSION_TIMEOUT * 4,
                "the victim's new session",
            )

        phases.after("expiry", expire)

        # (c) ZooKeeper down for longer than the session timeout.
        def outage() -> None:
            own_zookeeper.stop()
            down["from"] = time.time()
            time.sleep(SESSION_TIMEOUT * 2)  # the fault itself: how long ZooKeeper is away
            down["to"] = time.time()
            own_zookeeper.start()

        phases.after("long_outage", outage)
        sessions["after_outage"] = victim.group.stats.sessions

        # (d) a worker process frozen (SIGSTOP) past its session timeout, then resumed.
        frozen_proc = worker_processes.procs["w0"]

        def freeze() -> None:
            frozen["held"] = sorted(p for p, o in sampler.owners().items() if o.member == "w0")
            frozen_proc.send_signal(signal.SIGSTOP)
            frozen["from"] = time.time()
            try:
                wait_until(
                    lambda: taken_over(sampler, "w0"),
                    SESSION_TIMEOUT + REBALANCE_TIMEOUT + 30,
                    "the others to take the frozen worker's partitions",
                )
            finally:
                frozen["to"] = time.time()
                frozen_proc.send_signal(signal.SIGCONT)
            frozen["takeover_s"] = round(frozen["to"] - frozen["from"], 2)

        phases.after("frozen_worker", freeze)

        posted = poster.stop()
        expected = {p.message_id for p in before} | posted.acked_ids
        wait_until(
            lambda: {r["message_id"] for r in read_log(log)} >= expected,
            90,
            "every posted message to be processed",
        )
    finally:
        sampler.stop()
    victim.stop()
    codes = worker_processes.terminate()
    client.close()

    records = read_log(log)
    counts = Counter(r["message_id"] for r in records)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    handovers = max(sampler.handovers(), worker_changes(records))
    # (d)'s frozen worker may finish the one message under way (see the module doc).
    late = late_records(records, "w0", frozen["from"], frozen["to"])
    checked = [r for r in records if r not in late]
    overlaps = overlapping_batches(checked)
    strangers = processed_by_non_owner(checked, sampler.samples)
    # a member pauses once its connection drops; allow for a message already under way
    during_outage = sum(1 for r in records if down["from"] + 0.5 <= r["at"] <= down["to"])
    figures = (
        f"posted={len(expected)} post_failures={posted.failures} processed_records={len(records)} "
        f"unprocessed={len(expected - set(counts))} duplicates={duplicates} "
        f"duplicate_bound={BATCH * handovers} handovers={handovers} "
        f"overlapping_batches={len(overlaps)} processed_by_non_owner={len(strangers)} "
        f"stale_owner_nodes={len(sampler.stale)} samples={len(sampler.samples)} "
        f"processed_while_zookeeper_down={during_outage} "
        f"frozen_worker_held={frozen['held']} takeover_s={frozen['takeover_s']} "
        f"finished_after_thaw={len(late)} "
        f"victim_owned={victim_owned} victim_sessions={sessions} {phases.figures(records)} "
        f"total_s={time.monotonic() - started:.1f} exit_codes={codes}"
    )
    print("\n[zookeeper faults] " + figures)
    assert len(late) <= 1, f"{figures}\n{late}"
    assert during_outage == 0, figures
    assert not overlaps, f"{figures}\nfirst overlaps: {overlaps[:3]}"
    assert not strangers, f"{figures}\nfirst: {strangers[:3]}"
    assert not sampler.stale, f"{figures}\nfirst: {sampler.stale[:3]}"
    assert expected <= set(counts), figures
    assert duplicates <= BATCH * handovers, figures
    assert all(code == 0 for code in codes.values()), (
        f"{figures}\n{worker_processes.log_text('w0')}"
    )


HEARTBEAT_OUTAGE = 30.0  # seconds ZooKeeper stays away: long enough for any backoff to grow


@pytest.mark.slow
@pytest.mark.zookeeper
def test_the_heartbeat_sees_zookeeper_again_soon_after_it_returns(make_api_node, own_zookeeper):
    """A load balancer reading ``/__heartbeat__`` takes API nodes out while ZooKeeper
    is away; they must be back within seconds of its return, not after a backoff
    that grew with the outage."""
    node = make_api_node("api", **{"queuey.zookeeper.hosts": own_zookeeper.hosts})

    def zookeeper_check() -> str | None:
        with contextlib.suppress(requests.RequestException, ValueError):
            body = requests.get(node.url + "/__heartbeat__", timeout=5).json()
            return body.get("checks", {}).get("zookeeper")
        return None

    wait_until(lambda: zookeeper_check() == "ok", 30, "the heartbeat to see ZooKeeper")
    own_zookeeper.stop()
    down = time.monotonic()
    wait_until(lambda: zookeeper_check() == "unavailable", 30, "the heartbeat to see it gone")
    time.sleep(HEARTBEAT_OUTAGE)  # the fault itself: how long ZooKeeper is away
    own_zookeeper.start()  # returns once ZooKeeper answers ruok
    back = time.monotonic()
    wait_until(lambda: zookeeper_check() == "ok", 120, "the heartbeat to see ZooKeeper again")
    recovered = time.monotonic() - back
    figures = (
        f"zookeeper_down_s={back - down:.1f} heartbeat_ok_again_after_zookeeper_s={recovered:.2f}"
    )
    print(f"\n[heartbeat] {figures}")
    assert recovered <= 5, figures


# --------------------------------------------------- the detector (pure logic)


def _record(worker: str, batch: int, at: float, partition: int = 1) -> dict:
    return {"worker": worker, "batch": batch, "partition": partition, "at": at, "message_id": at}


@pytest.mark.unit
def test_the_overlap_detector_tells_a_handover_from_interleaving():
    handover = [_record("a", 1, 1.0), _record("a", 1, 2.0), _record("b", 7, 3.0)]
    handover += [_record("b", 7, 4.0), _record("a", 2, 5.0)]  # and back to a: fine
    assert overlapping_batches(handover) == []
    assert worker_changes(handover) == 2

    interleaved = [_record("a", 1, 1.0), _record("b", 7, 1.5), _record("a", 1, 2.0)]
    assert len(overlapping_batches(interleaved)) == 1
    # other partitions never conflict
    assert overlapping_batches([_record("a", 1, 1.0, 1), _record("b", 1, 1.5, 2)]) == []
    # a short batch inside a long one of another worker, met after a third
    nested = [_record("a", 1, 0.0), _record("a", 1, 10.0), _record("a", 2, 11.0)]
    nested += [_record("b", 3, 5.0)]
    assert len(overlapping_batches(nested)) == 1


@pytest.mark.unit
def test_a_record_is_blamed_only_while_one_owner_node_of_another_lasted():
    a1, b1, a2 = Owner("a", 1, 100), Owner("b", 2, 200), Owner("a", 3, 300)
    samples = [
        Sample(0.0, 0.1, {1: a1}),
        Sample(1.0, 1.1, {1: a1}),
        Sample(2.0, 2.1, {1: b1}),  # a's node gone, b's made: a handover in between
        Sample(3.0, 3.1, {1: a2}),  # a again, with a new node
    ]
    records = [
        _record("a", 1, 0.5),  # a's node before and after: fine
        _record("b", 2, 0.5),  # the same node of a's around it: b is blamed
        _record("b", 2, 1.5),  # a handover between the samples: cannot tell
        _record("a", 1, 2.5),  # b's node, then a new node of a's: cannot tell
        _record("a", 4, 9.0),  # after the last sample: not judged
    ]
    assert processed_by_non_owner(records, samples) == [records[1]]

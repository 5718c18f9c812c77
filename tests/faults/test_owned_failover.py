"""Failover of owned Cassandra work queues: an owning API node killed or frozen.

Two API nodes, each ``pserve`` + granian with 2 worker processes (the server
as shipped), on the harness Cassandra node, with the owned work queue and a
short owner term (4 s): each worker process owns some (subscription, queue
partition) pairs, named with its peer address in ``work_owners``, and the
others forward calls there. Four consumers (two per node) drain an
8-partition queue; after a third is acked the process group (pserve, workers,
refresher) of the node owning more partitions, the *victim*, is killed with
SIGKILL or frozen with SIGSTOP for two terms; its consumers move to the
*survivor* when it dies (as behind a load balancer), and wait when it is
frozen. Owners are *fresh* (node A took every partition first; hand-off
requests pending, as after a start) or *settled* (spread by rank).

Asserted, as a user would notice it (the figures are printed): the survivor
owns every partition within the term + 2 s claimed plus polling slack (term +
4 s; for a frozen victim, while frozen, the survivor acking meanwhile); no
message is handed out while an earlier lease of it could run
(``redelivered_early``) or leased twice at once whichever answer came first
(``double_leased``); an ack is final; nothing is lost. What a frozen victim
answers on waking (its consumers' calls, a probe's ack and reserve) keeps the
same rules; it may answer a reserve only after the leases it made ended and
went to others, so such late answers are counted and the invariants judged
in lease order by checked attempt counts
(:func:`~tests.faults.work_queue_verdict.verdict_in_lease_order`): anything
the verdict in answer order finds beyond late answers fails (``unexplained``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from queuey.storage.cassandra.ownership import SETTLE
from tests.faults import work_queue_verdict as verdicts
from tests.faults.conftest import ApiNode
from tests.faults.test_work_queue import assert_invariants, post_keys, queue_name, report
from tests.faults.work_queue_support import (
    Consumer,
    FailoverHttp,
    HttpError,
    WorkLog,
    WorkQueueHttp,
    always,
)
from tests.support import server_settings, wait_until

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

TERM = 4  # queuey.cassandra.owner_term, seconds (3 at least)
PARTITIONS = 8
VT = 6  # the visibility timeout of every lease, seconds
TOTAL = 3000
#: The takeover the design claims (term + 2 s) and slack for polling the rows.
TAKEOVER_BOUND = TERM + 4


class Owners:
    """``work_owners`` read with the Cassandra driver: the peer port owning
    each partition of a queue's ``default`` subscription."""

    def __init__(self, settings: dict[str, str]) -> None:
        from cassandra.cluster import Cluster

        from harness.cassandra import PROTOCOL_VERSION, connection_class

        self.keyspace = settings["queuey.cassandra.keyspace"]
        self.cluster = Cluster(settings["queuey.cassandra.contact_points"].split(","),
                               port=int(settings["queuey.cassandra.port"]),
                               protocol_version=PROTOCOL_VERSION,
                               connection_class=connection_class())  # fmt: skip
        self.session = self.cluster.connect()

    def incarnation(self, application: str, queue: str) -> str:
        row = self.session.execute(
            f"SELECT incarnation FROM {self.keyspace}.queues WHERE application = %s AND name = %s",
            (application, queue),
        ).one()
        assert row is not None, f"queue {queue} has no row"
        return str(row[0])

    def ports(self, incarnation: str) -> dict[int, int | None]:
        """Per partition, the peer port its owner row names (None: no owner)."""
        found: dict[int, int | None] = dict.fromkeys(range(1, PARTITIONS + 1))
        for partition, owner, address in self.session.execute(
            f"SELECT partition, owner, address FROM {self.keyspace}.work_owners WHERE "
            f"incarnation = %s AND subscription = 'default' AND partition IN "
            f"({', '.join(map(str, found))})",
            (incarnation,),
        ):
            if owner and address:
                found[partition] = int(address.rpartition(":")[2])
        return found


def peer_ports(node: ApiNode) -> set[int]:
    """The ports the node's processes listen on besides its public one: the
    peer ports its workers serve forwarded calls on."""
    import psutil

    ports: set[int] = set()
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(node.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                for conn in child.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr.port != node.port:
                        ports.add(conn.laddr.port)
    return ports


def log_summary(node: ApiNode) -> dict[str, int]:
    """The node log's warnings, errors and tracebacks by kind (ids, numbers
    and anything in parentheses masked): evidence for the report."""
    found: Counter = Counter()
    for line in node.log_path.read_text(errors="replace").splitlines():
        found["traceback"] += line.startswith("Traceback")
        m = re.search(r"(WARNI|ERROR|CRITI) \[([\w.]+)\] (.*)", line)
        if m and not m.group(2).endswith("admin.session"):
            text = re.sub(r"\(.*|[0-9a-f]{12,}|\d+", "#", m.group(3))[:70]
            found[f"{m.group(1)} {m.group(2).rsplit('.', 1)[-1]}: {text}"] += 1
    return {k: n for k, n in found.items() if n}


@dataclass
class OwnedPair:
    a: ApiNode
    b: ApiNode
    application: str
    owners: Owners


@pytest.fixture
def owned_nodes(request, tmp_path, applications_file, test_apps) -> Iterator[OwnedPair]:
    """Nodes A and B for this test (a fault leaves one dead or frozen), stopped even on failure."""
    settings = server_settings(request, applications_file, "cassandra", tmp_path / "unused.db")
    settings["queuey.cassandra.work_queue"] = "owned"
    settings["queuey.cassandra.owner_term"] = str(TERM)
    nodes: list[ApiNode] = []
    owners = None
    try:
        for name in ("node-a", "node-b"):
            nodes.append(ApiNode(name, tmp_path, settings, server="granian", workers=2))
        for node in nodes:
            node.wait_ready()
        owners = Owners(settings)
        yield OwnedPair(nodes[0], nodes[1], test_apps.app, owners)
    finally:
        if owners is not None:
            owners.cluster.shutdown()
        for node in nodes:
            with contextlib.suppress(OSError):
                os.killpg(node.proc.pid, signal.SIGCONT)  # a stopped worker would hold up the stop
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                node.stop()


@dataclass
class Run:
    """One drain of a queue by 4 consumers, and what happened around the fault."""

    pair: OwnedPair
    queue: str
    incarnation: str
    log: WorkLog
    stop: threading.Event
    consumers: list[Consumer] = field(default_factory=list)
    fault_at: float = 0.0
    victim: ApiNode | None = None  # the node the fault hits
    survivor: ApiNode | None = None
    victim_owned: list[int] = field(default_factory=list)  # its partitions at the fault
    takeover_s: float | None = None
    rows_after: dict[int, int | None] = field(default_factory=dict)
    overlaps: list = field(default_factory=list)  # double leases
    unexplained: list[str] = field(default_factory=list)  # see beyond_late_answers

    @classmethod
    def start(cls, pair: OwnedPair, tag: str, settled: bool) -> Run:
        """Make the queue, start 2 consumers per node (each moves to the other
        node when its own stops answering), then post every message.

        A's consumers start first, so a process of A takes every partition
        with its first reserve. ``settled``: wait until hand-offs have spread
        the partitions by rank before posting (nodes that have served a
        while); else post at once (nodes just started, hand-offs pending)."""
        queue, keys = queue_name(tag), [f"{tag}{n}" for n in range(TOTAL)]
        admin = FailoverHttp([pair.b.url], pair.application, WorkLog())
        admin.create_queue(queue, partitions=PARTITIONS, visibility_timeout=VT)
        run = cls(pair, queue, pair.owners.incarnation(pair.application, queue), WorkLog(keys),
                  threading.Event())  # fmt: skip
        try:
            for own, other in ((pair.a, pair.b), (pair.b, pair.a)):
                for i in range(2):
                    c = Consumer(f"{own.name[-1]}{i}", own.url, pair.application, queue, run.log,
                                 run.stop, limit=10, visibility_timeout=VT, wait=1)  # fmt: skip
                    c.http.close()
                    c.http = FailoverHttp([own.url, other.url], pair.application, run.log)
                    run.consumers.append(c)
                    c.start()
                if own is pair.a:
                    run.wait_for("node A to own a partition", lambda: run.owned_by(pair.a), 15)
            if settled:
                run.settle()
            post_keys(admin, queue, keys, partitions=PARTITIONS)
        except BaseException:
            run.stop.set()
            raise
        finally:
            admin.close()
        return run

    def wait_for(self, what: str, predicate: Callable[[], object], timeout: float) -> None:
        wait_until(
            lambda: predicate() or bool(self.log.errors),
            timeout,
            lambda: f"{what} (acked {len(self.log.acked_keys)}, errors {self.log.errors[:2]})",
            interval=0.05,
        )
        assert not self.log.errors, f"consumers failed: {self.log.errors[:3]}"

    def owned_by(self, node: ApiNode) -> list[int]:
        """The partitions the processes of ``node`` own now."""
        ports = peer_ports(node)
        return [p for p, port in self.pair.owners.ports(self.incarnation).items() if port in ports]

    def settle(self) -> None:
        """Wait until the owner rows have not changed for 2 s, :data:`SETTLE`
        + 2 s or more after the first take (an owner hands a partition over
        once it has held it that long)."""
        started = since = time.monotonic()
        last: dict[int, int | None] = {}

        def settled() -> bool:
            nonlocal last, since
            rows, now = self.pair.owners.ports(self.incarnation), time.monotonic()
            if rows != last:
                last, since = rows, now
            return now - since >= 2 and now - started >= SETTLE + 2

        self.wait_for("the owners to settle", settled, 40)

    def before_fault(self) -> None:
        """Wait until a third is acked, then pick the victim: the node owning
        more partitions (A on a tie; fresh owners are mostly A's)."""
        self.wait_for("a third acked", lambda: len(self.log.acked_keys) >= TOTAL // 3, 60)

        def pick() -> bool:
            a, b = self.owned_by(self.pair.a), self.owned_by(self.pair.b)
            nodes = (self.pair.a, self.pair.b) if len(a) >= len(b) else (self.pair.b, self.pair.a)
            self.victim, self.survivor = nodes
            self.victim_owned = a if self.victim is self.pair.a else b
            return bool(self.victim_owned)

        self.wait_for("a node to own a partition", pick, 15)

    def measure_takeover(self, timeout: float) -> None:
        """Poll the owner rows until every partition names a process of the
        survivor, for at most ``timeout`` seconds (else ``takeover_s`` stays
        None); its ports are read again when a row names one not seen yet."""
        survivor = self.survivor
        assert survivor is not None
        ports = peer_ports(survivor)

        def taken() -> bool:
            nonlocal ports
            self.rows_after = rows = self.pair.owners.ports(self.incarnation)
            if not set(rows.values()) - {None} <= ports:
                ports = peer_ports(survivor)
            return all(port in ports for port in rows.values())

        with contextlib.suppress(AssertionError):  # figures first, then the assertion
            wait_until(taken, timeout, "every partition owned by the survivor")
            self.takeover_s = time.time() - self.fault_at

    def finish(self, timeout: float) -> float:
        """Wait until every message is acked (or a consumer failed, or
        ``timeout``), stop the consumers; the seconds since the fault."""
        deadline = time.monotonic() + timeout
        while not self.log.all_acked.wait(0.25):
            if self.log.errors or time.monotonic() > deadline:
                break
        self.stop.set()
        for c in self.consumers:
            c.join(60)
            assert not c.is_alive(), f"{c.name} is stuck"
        return time.time() - self.fault_at

    def figures(self, headline: str, extra: str = "") -> str:
        """Print the figures (the line every assertion carries)."""
        v = verdicts.verdict_in_lease_order(self.log)
        strict, self.unexplained = verdicts.beyond_late_answers(self.log)
        self.overlaps = verdicts.double_leases(self.log)
        back = [d.received for d in self.log.deliveries
                if d.partition in self.victim_owned and d.sent > self.fault_at]  # fmt: skip
        first_back = f"{min(back) - self.fault_at:.2f}" if back else "none"
        takeover = "none" if self.takeover_s is None else f"{self.takeover_s:.2f}"
        examples = v.examples[:3] + self.unexplained[:3]
        examples += [f"{a.key}: {a.consumer} & {b.consumer}" for a, b in self.overlaps[:3]]
        examples += self.histories(sorted(self.log.expected - self.log.acked_keys)[:4])
        return report(
            headline,
            f"takeover_s={takeover} (bound {TAKEOVER_BOUND}) first_delivery_from_victim_"
            f"partitions_s={first_back} victim={self.victim.name if self.victim else None} "
            f"victim_owned={self.victim_owned} posted={TOTAL} acknowledged={v.acked} "
            f"delivered={v.delivered} deliveries={v.deliveries} "
            f"redelivered_early={v.early_redeliveries} double_leased={len(self.overlaps)} "
            f"acked_then_delivered_again={v.after_ack} lost={v.lost} "
            f"(of which acked_after_a_503_then_gone={v.unsure}) "
            f"wrong_attempts={v.wrong_attempts} false_expired={v.false_expired} "
            f"ack_statuses={v.ack_statuses} unknown_outcomes={v.unavailable} "
            f"answered_after_lease_could_end={len(verdicts.stale_answers(self.log))} "
            f"in_answer_order=("
            f"early={strict.early_redeliveries} after_ack={strict.after_ack} "
            f"wrong_attempts={strict.wrong_attempts} false_expired={strict.false_expired} "
            f"unexplained={len(self.unexplained)}) "
            f"moves={[m for c in self.consumers for m in c.http.moves][:4]} "
            f"rows_after={self.rows_after} {extra}"
            f"{f'examples={examples} ' if examples else ''}"
            f"| node-a log={log_summary(self.pair.a)} node-b log={log_summary(self.pair.b)}",
        )

    def histories(self, keys: list[str]) -> list[str]:
        """What happened to each of ``keys`` (lost ones): every delivery
        (consumer, partition, attempts, seconds from the fault sent and
        answered) and every answer to its receipts."""

        def span(sent: float, received: float) -> str:
            return f"{sent - self.fault_at:+.2f}/{received - self.fault_at:+.2f}"

        out = []
        for key in keys:
            events = []
            for d in (d for d in self.log.deliveries if d.key == key):
                when = span(d.sent, d.received)
                events.append(f"{d.consumer} p{d.partition} a{d.attempts} {d.receipt} {when}")
                events += [f"{f.verb}={f.status} {span(f.sent, f.received)}"
                           for f in self.log.finishes if f.receipt == d.receipt]  # fmt: skip
            out.append(f"lost {key}: {'; '.join(events)}")
        return out

    def left_over(self) -> list[str]:
        """The keys the survivor still hands out once every lease given so
        far has ended (a bounded wait: the visibility timeout)."""
        assert self.survivor is not None
        time.sleep(max(0.0, max(d.sent for d in self.log.deliveries) + VT + 1 - time.time()))
        http = WorkQueueHttp(self.survivor.url, self.pair.application)
        try:
            return [str(m["body"].get("key")) for m in http.reserve(self.queue, limit=100)]
        finally:
            http.close()

    def check(self, line: str) -> None:
        """The invariants (no double lease, ack final, none lost), then the
        takeover. An ack answered 503 and then "expired" (its write may have
        landed, the record of it gone since) finished its message if the
        queue hands it out no more once every lease ended."""
        assert not self.overlaps, line
        assert not self.unexplained, line
        v = verdicts.verdict_in_lease_order(self.log)
        if v.unsure:
            left = self.left_over()
            assert not left, f"still handed out after acks answered 503: {left} {line}"
        assert_invariants(v, self.log, line, drained=True)
        assert self.takeover_s is not None and self.takeover_s <= TAKEOVER_BOUND, line


# ------------------------------------------------------------------ kill -9


@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled"])
def test_kill_9_of_an_owning_node_while_4_consumers_drain(owned_nodes, settled):
    """3,000 messages, 4 consumers (2 per node); after a third is acked the
    victim's process group is killed with SIGKILL and its consumers move to
    the survivor, which owns every partition within the term + 4 s. No
    message is leased twice at once or delivered after its ack; all are acked
    in the end (those the victim's consumers held, once their leases end)."""
    run = Run.start(owned_nodes, "kill", settled)
    try:
        run.before_fault()
        assert run.victim is not None
        run.fault_at = time.time()
        run.victim.kill()
        run.measure_takeover(TAKEOVER_BOUND + 10)
        since_fault = run.finish(timeout=60)
    finally:
        run.stop.set()
    line = run.figures(
        f"owned, {'settled' if settled else 'fresh'} owners, kill -9 of an owning node, "
        f"term {TERM}s, vt {VT}s",
        f"drained_after_fault_s={since_fault:.1f} ",
    )
    run.check(line)


# ------------------------------------------------------------------ SIGSTOP


class Probe:
    """Calls to the victim answered only once it wakes: ``probe-held`` leases a
    batch before the freeze and acks it once the lease has ended (during the
    freeze), ``probe-woke`` reserves a batch during the freeze and acks it."""

    def __init__(self, run: Run) -> None:
        assert run.victim is not None
        self.run, self.threads = run, []
        self.held, self.woke = (
            Consumer(name, run.victim.url, run.pair.application, run.queue, run.log,
                     threading.Event(), limit=10, visibility_timeout=VT, policy=always(policy))
            for name, policy in (("probe-held", "late-ack"), ("probe-woke", "ack"))
        )  # fmt: skip
        for c in (self.held, self.woke):
            c.http.close()
            c.http = FailoverHttp([run.victim.url], run.pair.application, run.log)

    def _round(self, consumer: Consumer) -> None:
        try:
            consumer.round()
        except HttpError as exc:  # a 503 promises nothing either way: counted
            if exc.status != 503:
                self.run.log.failed(f"{consumer.consumer}: {exc}")
            self.run.log.unknown_outcome("reserve")
        except Exception as exc:  # recorded; the test asserts there were none
            self.run.log.failed(f"{consumer.consumer}: {type(exc).__name__}: {exc}")

    def start(self, consumer: Consumer) -> None:
        self.threads.append(threading.Thread(target=self._round, args=(consumer,), daemon=True))
        self.threads[-1].start()

    def held_count(self) -> int:
        return sum(d.consumer == "probe-held" for d in self.run.log.deliveries)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive(), "a probe call to the victim never returned"


@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled"])
def test_a_node_frozen_past_its_term_hands_its_partitions_over(owned_nodes, settled):
    """As the kill test, but the victim's process group is stopped (SIGSTOP)
    for two terms, then continued. The survivor owns every partition within
    the term + 4 s and acks messages meanwhile; what the victim answers on
    waking to calls sent during the freeze (its consumers', a probe's ack and
    reserve) keeps the rules: an ack it answers "acked" is final, a lease it
    gives does not overlap one the survivor gave, nothing is lost."""
    run = Run.start(owned_nodes, "freeze", settled)
    try:
        run.before_fault()
        victim, probe = run.victim, Probe(run)
        assert victim is not None
        probe.start(probe.held)
        run.wait_for(
            "the probe's lease", lambda: probe.held_count() or not probe.threads[0].is_alive(), 10
        )
        run.fault_at = time.time()
        os.killpg(victim.proc.pid, signal.SIGSTOP)  # pserve, granian and its workers
        try:
            probe.start(probe.woke)
            # Measured while frozen only: once awake, the victim may take partitions back.
            thaw_due = run.fault_at + 2 * TERM
            run.measure_takeover(max(0.0, thaw_due - time.time()))
            run.stop.wait(max(0.0, thaw_due - time.time()))  # the rest of the freeze
        finally:
            thaw_at = time.time()
            os.killpg(victim.proc.pid, signal.SIGCONT)
        since_fault = run.finish(timeout=60)
        probe.join()
    finally:
        run.stop.set()
    survivor_side = "a" if victim is owned_nodes.b else "b"
    acked_meanwhile = sum(
        1 for f in run.log.finishes
        if f.status == "acked" and run.log.by_receipt[f.receipt].consumer[0] == survivor_side
        and run.fault_at < f.received < thaw_at
    )  # fmt: skip
    pairs = verdicts.double_leases(run.log)
    woke, broken = verdicts.answered_across(run.log, thaw_at, (victim.name[-1], "probe"), pairs)
    line = run.figures(
        f"owned, {'settled' if settled else 'fresh'} owners, SIGSTOP of an owning node for "
        f"{thaw_at - run.fault_at:.1f}s, term {TERM}s, vt {VT}s",
        f"probe_held={probe.held_count()} answered_on_waking=({woke}) broken={broken[:3]} "
        f"acked_by_survivor_while_frozen={acked_meanwhile} "
        f"drained_after_fault_s={since_fault:.1f} ",
    )
    assert not broken, line
    run.check(line)
    assert acked_meanwhile > 0, f"the survivor served nothing during the freeze: {line}"

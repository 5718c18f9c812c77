"""A 3-node Cassandra cluster (RF 3, ``strong`` queues at LOCAL_QUORUM) behind
the real API, with nodes crashing (``kill -9``) under concurrent posts and reads.

One node down: a quorum remains, so posts and reads go on, and nothing
acknowledged is lost once it returns. Two nodes down: no quorum, so every
request gets a clean 503 with ``Retry-After`` within the request timeout (never
a 500 or a hang), and service resumes by itself when the nodes come back.
The cluster is this module's own, on its own ports and directory.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import SimpleStatement

from harness import cassandra, cassandra_config, process
from tests.faults.cassandra_support import (
    Figures,
    Traffic,
    api_settings,
    crash_under_load,
    serve,
)
from tests.faults.test_work_queue import assert_invariants, post_keys, queue_name, report
from tests.faults.work_queue_support import Consumer, WorkLog, WorkQueueHttp, run_consumers
from tests.faults.work_queue_verdict import verdict
from tests.support import wait_until

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

PORTS = {"port": 19442, "storage_port": 17400, "jmx_port": 17500}
REPLICATION = "{'class': 'SimpleStrategy', 'replication_factor': 3}"
#: The service's Cassandra request timeout (api_settings). A request makes at
#: most two storage calls in a row (the queue's metadata, then its messages),
#: each bounded by it, so no answer may take longer than twice that.
REQUEST_TIMEOUT = 5.0
#: Slack for a busy 2-core machine on top of the request timeout.
SLACK = 3.0
LOAD_SECONDS = 4.0
OUTAGE_SECONDS = 6.0
#: Each client's pause between requests: a steady load that leaves the three
#: JVMs on this 2-core machine room to replay their commit logs on restart.
PAUSE = 0.25
DEADLINE = 180.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nodes of our own on 127.0.0.1..3, started once for the module by the
    harness (the same call ``make cassandra-cluster`` makes); at the end the
    harness stops all three and leaves no process, pidfile or port behind."""
    base = tmp_path_factory.mktemp("cassandra-cluster")
    try:
        cluster = cassandra.ensure_running(3, base_dir=base, **PORTS)
        yield cluster
    finally:
        stopped = cassandra.stop(3, base_dir=base)
    assert stopped == 3
    for st in cassandra.status(3, PORTS["port"], base_dir=base):
        assert st.pid is None and not st.cql_ok
        assert not st.node.pidfile.exists()
        assert not process.port_open(st.node.address, st.node.native_port)


def test_the_harness_cluster_replicates_at_consistency_all(cluster) -> None:
    """The harness's cluster is three real replicas: a write and a read at
    consistency ALL need every node's answer."""
    assert cluster.contact_points == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert {"127.0.0.2", "127.0.0.3"} <= cassandra.peers_of(cluster.nodes[0])
    assert all(cassandra.cql_answers(n) for n in cluster.nodes)
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1"))
    client = Cluster(
        contact_points=cluster.contact_points,
        port=cluster.port,
        protocol_version=cassandra.PROTOCOL_VERSION,
        connection_class=cassandra.connection_class(),
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=policy, request_timeout=20)
        },
    )
    try:
        session = client.connect()
        ks = f"harness_rf3_{uuid.uuid4().hex[:8]}"
        session.execute(f"CREATE KEYSPACE {ks} WITH replication = {REPLICATION}")
        session.execute(f"CREATE TABLE {ks}.t (k int PRIMARY KEY, v text)")
        all_nodes = ConsistencyLevel.ALL
        write = SimpleStatement(
            f"INSERT INTO {ks}.t (k, v) VALUES (1, 'everywhere')", consistency_level=all_nodes
        )
        session.execute(write)
        read = SimpleStatement(f"SELECT v FROM {ks}.t WHERE k = 1", consistency_level=all_nodes)
        assert session.execute(read).one().v == "everywhere"
        session.execute(f"DROP KEYSPACE {ks}")
    finally:
        client.shutdown()


@pytest.fixture
def api_node(cluster, applications_file, test_apps):
    """An API node on the cluster, its keyspace replicated to all three nodes."""
    settings = api_settings(
        cluster.contact_points,
        cluster.port,
        applications_file,
        **{"queuey.cassandra.replication": REPLICATION},
    )
    with serve(settings, test_apps.app) as server:
        yield server


def _crash(cluster, server, queue: str, victims):
    """Kill ``victims`` under posts and reads; restart them through the harness."""

    def kill() -> None:
        for node in victims:
            assert cassandra.kill_node(node)

    return crash_under_load(
        server,
        queue,
        kill=kill,
        restart=lambda: cassandra.ensure_running(3, base_dir=cluster.base_dir, **PORTS),
        load_s=LOAD_SECONDS,
        outage_s=OUTAGE_SECONDS,
        readers=2,
        pause=PAUSE,
        deadline=DEADLINE,
    )


def test_one_node_down_service_goes_on_and_loses_nothing(cluster, api_node):
    run = _crash(cluster, api_node, "minority", cluster.nodes[1:2])
    traffic = run.traffic
    statuses = Traffic.statuses(traffic.posts + traffic.reads)
    figures = Figures.of(
        run,
        commitlog=str(cassandra_config.rendered_commitlog(cluster.nodes[0])),
        failed_reads=sum(o.status != 200 for o in traffic.reads),
        requests_while_down=len(run.during),
        acked_posts_while_down=sum(o.status == 201 for o in run.during),
        ok_reads_while_down=sum(o.status == 200 for o in run.during),
        failed_while_down=sum(o.status not in (200, 201) for o in run.during),
        statuses=statuses,
    ).show("3 nodes, RF 3, one node killed")
    extra = figures.extra
    assert figures.lost == 0, f"acknowledged messages lost: {figures}"
    assert figures.duplicates == 0, f"messages read twice: {figures}"
    assert "500" not in statuses and "None" not in statuses, f"500 or no answer: {figures}"
    assert extra["acked_posts_while_down"] > 0 and extra["ok_reads_while_down"] > 0, (
        f"one node down stopped the service: {figures}"
    )
    # Requests in flight on the crashed node may fail (never acknowledged, so
    # nothing is lost); the rest go on.
    assert extra["failed_while_down"] <= max(10, extra["requests_while_down"] // 10), (
        f"too many failures with a quorum up: {figures}"
    )


def test_two_nodes_down_answer_503_then_service_resumes(cluster, api_node):
    # The API node is never restarted: _crash waits until it acknowledges a
    # post again after the nodes return (resumed_after_restart_s).
    run = _crash(cluster, api_node, "majority", cluster.nodes[1:])
    failures = [o for o in run.during if o.status not in (200, 201)]
    figures = Figures.of(
        run,
        commitlog=str(cassandra_config.rendered_commitlog(cluster.nodes[0])),
        requests_while_down=len(run.during),
        answered_503=sum(o.status == 503 for o in failures),
        without_retry_after=sum(o.status == 503 and not o.retry_after for o in failures),
        other_failures=sorted({str(o.status) for o in failures} - {"503"}),
        slowest_failure_s=round(max((o.ended - o.started for o in failures), default=0.0), 1),
        slowest_request_s=round(max((o.ended - o.started for o in run.during), default=0.0), 1),
        statuses=Traffic.statuses(run.traffic.posts + run.traffic.reads),
    ).show("3 nodes, RF 3, two nodes killed")
    extra = figures.extra
    assert figures.lost == 0, f"acknowledged messages lost: {figures}"
    assert figures.duplicates == 0, f"messages read twice: {figures}"
    assert extra["answered_503"] > 0, f"no 503 with a quorum down: {figures}"
    assert not extra["other_failures"], f"failures other than 503: {figures}"
    assert extra["without_retry_after"] == 0, f"503 without Retry-After: {figures}"
    assert extra["slowest_failure_s"] <= 2 * REQUEST_TIMEOUT + SLACK, (
        f"a request hung past the request timeout: {figures}"
    )


def test_one_node_down_work_queue_loses_nothing_and_never_leases_twice(cluster, api_node):
    """A work queue drained by four consumers while one Cassandra node of three
    is killed and restarted: its owner's plain writes and term renewals go on
    at quorum, so nothing acknowledged comes back, no message is leased twice
    while a lease runs, and every message is acknowledged in the end (an ack
    answered 503 and then "expired" is proven by the queue handing nothing
    out once every lease ended)."""
    total, vt, partitions = 1500, 20, 4
    queue = queue_name("cluster")
    admin = WorkQueueHttp(api_node.url, api_node.application)
    admin.create_queue(queue, partitions=partitions, visibility_timeout=vt)
    keys = [f"k{n}" for n in range(total)]
    post_keys(admin, queue, keys, partitions)
    log = WorkLog(keys)
    stop = threading.Event()
    consumers = [
        Consumer(f"c{i}", api_node.url, api_node.application, queue, log, stop,
                 limit=10, visibility_timeout=vt, wait=1)
        for i in range(4)
    ]  # fmt: skip
    victim = cluster.nodes[2]

    def fault() -> None:
        wait_until(lambda: len(log.deliveries) >= total // 3, 120, "a third delivered")
        assert cassandra.kill_node(victim)
        time.sleep(OUTAGE_SECONDS)  # the fault's own duration
        cassandra.ensure_running(3, base_dir=cluster.base_dir, **PORTS)

    killer = threading.Thread(target=fault, daemon=True)
    killer.start()
    elapsed = run_consumers(consumers, log, timeout=240)
    killer.join(120)
    v = verdict(log)
    line = report(
        "3 nodes, RF 3, one node killed under a work queue",
        f"sent={v.sent} delivered={v.delivered} acked={v.acked} lost={v.lost} "
        f"duplicates={v.duplicates} early_redeliveries={v.early_redeliveries} "
        f"after_ack={v.after_ack} s={elapsed:.1f} | {v.line()}",
    )
    if v.unsure:
        # An ack answered 503 while the node was down, then "expired" when
        # sent again: its first write may have landed (the lease finished, the
        # record of it gone since). It finished its message if the queue hands
        # nothing out once every lease given has ended.
        time.sleep(max(0.0, max(d.sent for d in log.deliveries) + vt + 1 - time.time()))
        left = [str(m["body"].get("key")) for m in admin.reserve(queue, limit=100)]
        assert not left, f"still handed out after acks answered 503: {left} {line}"
    assert_invariants(v, log, line, drained=bool(v.unsure))

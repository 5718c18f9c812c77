"""Real Apache Cassandra nodes on loopback for tests and development.

Jars come from Maven Central through ``etc/cassandra/pom.xml``; each node is a
detached JVM with its own directory under ``var/``, placed as
:mod:`harness.cassandra_nodes` says (a single node or an N-node cluster, on
ports away from Cassandra's stock 9042/7000/7199 so a system install is never
disturbed). This module starts, stops and reports on them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

from harness import cassandra_config, process
from harness.cassandra_config import CommitLogSync
from harness.cassandra_cql import (  # noqa: F401 - part of this module's API
    PROTOCOL_VERSION,
    connection_class,
    cql_answers,
    peers_of,
)
from harness.cassandra_nodes import (  # noqa: F401 - part of this module's API
    CassandraCluster,
    CassandraNode,
    cluster_spec,
)
from harness.process import HarnessError

log = logging.getLogger(__name__)

ETC = process.ETC_DIR / "cassandra"
POM = ETC / "pom.xml"
JVM_OPTIONS = ETC / "jvm17-server.options"
LOGBACK = ETC / "logback.xml"
MAIN_CLASS = "org.apache.cassandra.service.CassandraDaemon"

SINGLE_HEAP = "512m"
CLUSTER_HEAP = "384m"
DEFAULT_TIMEOUT = 180.0


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    """Liveness of one node, as reported by ``status``."""

    node: CassandraNode
    pid: int | None
    cql_ok: bool
    rss_bytes: int | None
    commitlog: CommitLogSync | None = None


# ------------------------------------------------------------------ start/stop


def _record(node: CassandraNode) -> None:
    """Remember a node's ports, so ``status`` without ``--port`` probes the right ones."""
    state = {key: value for key, value in dataclasses.asdict(node).items() if key != "directory"}
    (node.directory / "node.json").write_text(json.dumps(state) + "\n")


def _recorded(node: CassandraNode) -> CassandraNode:
    try:
        state = json.loads((node.directory / "node.json").read_text())
        return dataclasses.replace(
            node,
            address=str(state["address"]),
            native_port=int(state["native_port"]),
            storage_port=int(state["storage_port"]),
            jmx_port=int(state["jmx_port"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return node


def _java_argv(node: CassandraNode, config: Path, classpath: list[Path], heap: str) -> list[str]:
    jamm = [jar for jar in classpath if jar.name.startswith("jamm-")]
    argv = [
        str(process.find_java()),
        process.marker_arg(node.marker),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *process.read_jvm_options(JVM_OPTIONS),
    ]
    if jamm:
        # jamm measures object sizes for memtable accounting; Cassandra's own
        # launcher always loads it as an agent.
        argv.append(f"-javaagent:{jamm[0]}")
    argv += [
        f"-XX:HeapDumpPath={node.log_dir}",
        f"-Xlog:gc=warning:file={node.log_dir}/gc.log:time,uptime:filecount=2,filesize=5M",
        f"-Dcassandra.config={config.as_uri()}",
        f"-Dcassandra.storagedir={node.directory}",
        f"-Dcassandra.logdir={node.log_dir}",
        f"-Dcassandra.triggers_dir={node.directory / 'triggers'}",
        f"-Dlogback.configurationFile={LOGBACK.as_uri()}",
        f"-Dcassandra.jmx.local.port={node.jmx_port}",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.ring_delay_ms=1000",
        # The default role is set up in the background, retried after this
        # delay while a peer is down: 0 spins a core (and floods the log)
        # whenever a cluster node restarts with another node still down.
        "-Dcassandra.superuser_setup_delay_ms=1000",
        "-Dcassandra.migration_task_wait_in_seconds=1",
        # Stopping announces shutdown to peers and then sleeps 2 s by default.
        "-Dcassandra.shutdown_announce_in_ms=200",
        "-cp",
        os.pathsep.join(str(jar) for jar in classpath),
        MAIN_CLASS,
    ]
    return argv


def _start_node(
    cluster: CassandraCluster,
    node: CassandraNode,
    classpath: list[Path],
    heap: str,
    timeout: float,
    commitlog: CommitLogSync,
) -> None:
    """Start one node (unless already up) and wait until it answers CQL."""
    pid = process.running_pid(node.pidfile)
    if pid is not None and _recorded(node) != node:
        running = _recorded(node)
        raise HarnessError(
            f"node{node.index} in {node.directory} already runs with CQL port "
            f"{running.native_port}, storage port {running.storage_port}, JMX port "
            f"{running.jmx_port}; stop it first or use another --base-dir"
        )
    if pid is None:
        for address, port in (
            (node.address, node.native_port),
            (node.address, node.storage_port),
            ("127.0.0.1", node.jmx_port),
        ):
            if process.port_open(address, port):
                raise HarnessError(
                    f"{address}:{port} is already in use by a process we did not start; "
                    "choose other ports (--port, --storage-port, --jmx-port or the "
                    "QUEUEY_CASSANDRA_* variables)"
                )
        config = cassandra_config.render(cluster, node, commitlog)
        _record(node)
        argv = _java_argv(node, config, classpath, heap)
        pid = process.start_detached(
            argv,
            pidfile=node.pidfile,
            log_file=node.stdout_log,
            cwd=node.directory,
            marker=node.marker,
        )
    else:
        log.info("node%d already running as pid %d", node.index, pid)

    def ready() -> bool:
        if process.running_pid(node.pidfile) is None:
            raise _NodeDied
        return cql_answers(node) is not None

    try:
        process.wait_for(
            ready, timeout=timeout, interval=1.0, what=f"CQL on {node.address}:{node.native_port}"
        )
    except _NodeDied:
        raise HarnessError(
            f"Cassandra node{node.index} exited during start-up\n" + _log_tails(node)
        ) from None
    except HarnessError as exc:
        raise HarnessError(f"{exc}\n{_log_tails(node)}") from None


class _NodeDied(HarnessError):
    """The node's JVM exited while we waited for it; ends the wait at once."""


def _log_tails(node: CassandraNode) -> str:
    return (
        f"--- {node.system_log} (tail) ---\n{process.tail(node.system_log)}\n"
        f"--- {node.stdout_log} (tail) ---\n{process.tail(node.stdout_log, 30)}"
    )


def ensure_running(
    nodes: int = 1,
    port: int | None = None,
    *,
    storage_port: int | None = None,
    jmx_port: int | None = None,
    base_dir: Path | str | None = None,
    heap: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    commitlog: CommitLogSync | str | None = None,
) -> CassandraCluster:
    """Start the single node or an N-node cluster unless it already runs; wait until usable.

    Idempotent: nodes whose pidfile process is alive and answering CQL are left
    alone, so this also restarts the nodes of a cluster that died. Nodes start
    one after another (Cassandra serialises joins); for a cluster the call
    returns once every node answers CQL and lists all the others in
    system.peers. ``timeout`` applies to each node and to the final peers
    check. ``heap`` defaults to ``$QUEUEY_CASSANDRA_HEAP``, else 512m for a
    single node and 384m per cluster node. ``commitlog`` (``periodic[:MS]``,
    ``group[:MS]`` or ``batch``) defaults to the deployment's durable mode
    (:func:`cassandra_config.commitlog_for`); a node already running keeps the
    mode it was started with.
    """
    cluster = cluster_spec(
        nodes, port, storage_port=storage_port, jmx_port=jmx_port, base_dir=base_dir
    )
    sync = cassandra_config.commitlog_for(nodes, commitlog)
    heap = (
        heap
        or os.environ.get("QUEUEY_CASSANDRA_HEAP")
        or (SINGLE_HEAP if nodes == 1 else CLUSTER_HEAP)
    )
    cluster.base_dir.mkdir(parents=True, exist_ok=True)
    with process.file_lock(cluster.base_dir / "harness.lock"):
        if _already_up(cluster):
            _warn_other_commitlog(cluster, sync)
            return cluster
        classpath = process.resolve_classpath(POM, name="cassandra")
        started = time.monotonic()
        for node in cluster.nodes:
            _start_node(cluster, node, classpath, heap, timeout, sync)
            log.info(
                "node%d (%s) answers CQL after %.1fs",
                node.index,
                node.address,
                time.monotonic() - started,
            )
        if nodes > 1:
            process.wait_for(
                lambda: _peers_complete(cluster),
                timeout=timeout,
                interval=1.0,
                what="every node's system.peers to list all other nodes",
            )
        log.info("%s ready in %.1fs", cluster.name, time.monotonic() - started)
    return cluster


def _warn_other_commitlog(cluster: CassandraCluster, wanted: CommitLogSync) -> None:
    for node in cluster.nodes:
        running = cassandra_config.rendered_commitlog(node)
        if running != wanted:
            log.warning(
                "node%d runs with commit-log sync %s, not %s; restart it to change",
                node.index,
                running,
                wanted,
            )


def kill_node(node: CassandraNode, timeout: float = 30.0) -> bool:
    """Crash one node we started (SIGKILL: no flush, no last commit-log sync) and
    wait until it is gone; for fault tests. False if it was not running."""
    killed = process.kill_process(node.pidfile, timeout=timeout)
    _wait_ports_closed(node, timeout)
    return killed


def _wait_ports_closed(node: CassandraNode, timeout: float) -> None:
    """A JVM may show as dead while its threads still hold its sockets; wait
    until they are closed, so the node (or another) can bind them at once."""
    addresses = [
        (node.address, node.native_port),
        (node.address, node.storage_port),
        ("127.0.0.1", node.jmx_port),
    ]
    process.wait_for(
        lambda: not any(process.port_open(host, port, timeout=0.2) for host, port in addresses),
        timeout=timeout,
        interval=0.05,
        what=f"node{node.index}'s ports to close",
    )


def _peers_complete(cluster: CassandraCluster) -> bool:
    """Every node lists every other node in system.peers (gossip has converged)."""
    addresses = {node.address for node in cluster.nodes}
    return all(addresses - {node.address} <= peers_of(node) for node in cluster.nodes)


def _already_up(cluster: CassandraCluster) -> bool:
    """All nodes are ours, alive, answering CQL and (for a cluster) know each other."""
    try:
        return all(
            process.running_pid(node.pidfile) and cql_answers(node) for node in cluster.nodes
        ) and (len(cluster.nodes) == 1 or _peers_complete(cluster))
    except Exception as exc:  # noqa: BLE001 - any failure means "start or wait for it"
        log.debug("%s not fully up yet: %s", cluster.name, exc)
        return False


def stop(nodes: int = 1, *, base_dir: Path | str | None = None, timeout: float = 60.0) -> int:
    """Stop every node we started under the single-node (``nodes=1``) or cluster base dir.

    Returns how many live nodes were stopped. Only pids recorded in our
    pidfiles are signalled.
    """
    cluster = cluster_spec(nodes, base_dir=base_dir)
    with process.file_lock(cluster.base_dir / "harness.lock"):
        pidfiles = sorted(cluster.base_dir.glob("node*/cassandra.pid"))
        live = [_recorded(n) for n in cluster.nodes if process.running_pid(n.pidfile)]
        stopped = process.stop_processes(pidfiles, timeout=timeout)
        for node in live:
            _wait_ports_closed(node, timeout)
    log.info("stopped %d node(s) under %s", stopped, cluster.base_dir)
    return stopped


def status(
    nodes: int = 1, port: int | None = None, *, base_dir: Path | str | None = None
) -> list[NodeStatus]:
    """Pid, CQL liveness and memory of each node of the single node or cluster."""
    cluster = cluster_spec(nodes, port, base_dir=base_dir)
    result = []
    for node in cluster.nodes:
        if port is None:
            node = _recorded(node)
        pid = process.running_pid(node.pidfile)
        result.append(
            NodeStatus(
                node=node,
                pid=pid,
                cql_ok=pid is not None and cql_answers(node) is not None,
                rss_bytes=process.rss_bytes(pid) if pid else None,
                commitlog=cassandra_config.rendered_commitlog(node),
            )
        )
    return result

"""What a harness node's ``cassandra.yaml`` says, and above all when its commit
log reaches the disk.

Cassandra answers a write once the mutation is in its memtable and commit-log
buffer; ``commitlog_sync`` decides whether that answer waits for an fsync. With
``periodic`` it does not: the log is synced every period, and on replay after a
crash Cassandra keeps only what a sync marked complete, so a ``kill -9`` or a
power cut loses the writes of the last period although they were acknowledged.
``group`` makes each write wait for the next sync, taken at most a window apart
so concurrent writes share one fsync; ``batch`` syncs as soon as a write arrives
(writes arriving during a sync share the next one).

The default is chosen per deployment (see :data:`SINGLE_COMMITLOG` and
:data:`CLUSTER_COMMITLOG`); ``$QUEUEY_CASSANDRA_COMMITLOG`` or an explicit
argument (``periodic[:MS]``, ``group[:MS]``, ``batch``) overrides it.
"""

from __future__ import annotations

import dataclasses
import os
import string
from pathlib import Path

from harness import process
from harness.cassandra_nodes import CassandraCluster, CassandraNode
from harness.process import HarnessError

YAML_TEMPLATE = process.ETC_DIR / "cassandra" / "cassandra.yaml.in"
MODES = ("periodic", "group", "batch")
#: Cassandra's stock periodic sync period and a short group window.
DEFAULT_WINDOWS_MS = {"periodic": 10_000, "group": 10, "batch": 0}
ENV = "QUEUEY_CASSANDRA_COMMITLOG"
#: Directories every node gets under its own directory.
NODE_DIRS = ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "triggers", "logs", "conf")


@dataclasses.dataclass(frozen=True)
class CommitLogSync:
    """A commit-log sync mode and its window (periodic: the sync period; group:
    the longest a write waits for the shared fsync; batch: none)."""

    mode: str
    window_ms: int

    @classmethod
    def parse(cls, text: str) -> CommitLogSync:
        """``periodic``, ``periodic:10000``, ``group``, ``group:10`` or ``batch``."""
        mode, _, window = text.strip().lower().partition(":")
        if mode not in MODES:
            raise HarnessError(f"commit-log mode must be one of {', '.join(MODES)}, got {text!r}")
        if not window:
            return cls(mode, DEFAULT_WINDOWS_MS[mode])
        if mode == "batch":
            raise HarnessError("batch mode syncs on every write and takes no window")
        if not window.isdigit() or not 1 <= int(window) <= 60_000:
            raise HarnessError(f"commit-log window must be 1..60000 ms, got {window!r}")
        return cls(mode, int(window))

    @property
    def durable(self) -> bool:
        """Whether an acknowledged write has reached the disk."""
        return self.mode != "periodic"

    def yaml(self) -> str:
        """The ``cassandra.yaml`` lines; Cassandra refuses a window of another mode."""
        lines = [f"commitlog_sync: {self.mode}"]
        if self.mode == "periodic":
            lines.append(f"commitlog_sync_period: {self.window_ms}ms")
        elif self.mode == "group":
            lines.append(f"commitlog_sync_group_window: {self.window_ms}ms")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.mode if self.mode == "batch" else f"{self.mode}:{self.window_ms}"


#: One node holds the only copy, so a write is acknowledged only once it is on
#: disk. ``batch`` rather than ``group``: the same guarantee, and measured here
#: (bench/durability.py) a lone write waits ~1 ms in batch mode against a whole
#: window in group mode (10 ms at group:10), while concurrent writers still
#: share each fsync in both, so throughput shows no difference.
SINGLE_COMMITLOG = CommitLogSync("batch", 0)
#: A harness cluster's nodes share this machine's disk and power: one host
#: crash takes every replica at once, which replication cannot survive with
#: ``periodic``, so the cluster is durable too, for the same small cost.
#: Production clusters with replicas on separate hosts may choose ``periodic``
#: knowing that a crash of a quorum of replicas within one period loses
#: acknowledged writes.
CLUSTER_COMMITLOG = CommitLogSync("batch", 0)


def commitlog_for(nodes: int, value: CommitLogSync | str | None = None) -> CommitLogSync:
    """The commit-log sync of a deployment: ``value``, else ``$QUEUEY_CASSANDRA_COMMITLOG``,
    else the default for a single node or a cluster."""
    if isinstance(value, CommitLogSync):
        return value
    text = value or os.environ.get(ENV)
    if text:
        return CommitLogSync.parse(text)
    return SINGLE_COMMITLOG if nodes == 1 else CLUSTER_COMMITLOG


def initial_token(index: int, count: int) -> int:
    """Evenly spaced Murmur3 tokens, so an N-node ring is balanced without allocation."""
    return -(2**63) + (2**64 // count) * (index - 1)


def config_path(node: CassandraNode) -> Path:
    """Where :func:`render` writes ``node``'s ``cassandra.yaml``."""
    return node.directory / "conf" / "cassandra.yaml"


def render(cluster: CassandraCluster, node: CassandraNode, commitlog: CommitLogSync) -> Path:
    """Write ``node``'s ``conf/cassandra.yaml`` (creating its directories); its path."""
    dirs = {key: node.directory / key for key in NODE_DIRS}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    seed = cluster.nodes[0]
    text = string.Template(YAML_TEMPLATE.read_text()).substitute(
        cluster_name=cluster.name,
        initial_token=initial_token(node.index, len(cluster.nodes)),
        seeds=f"{seed.address}:{seed.storage_port}",
        address=node.address,
        storage_port=node.storage_port,
        native_port=node.native_port,
        data_dir=dirs["data"],
        commitlog_dir=dirs["commitlog"],
        saved_caches_dir=dirs["saved_caches"],
        hints_dir=dirs["hints"],
        cdc_raw_dir=dirs["cdc_raw"],
        commitlog_sync=commitlog.yaml(),
    )
    config = config_path(node)
    config.write_text(text)
    return config


def rendered_commitlog(node: CassandraNode) -> CommitLogSync | None:
    """The commit-log sync a node was last started with (from its rendered yaml)."""
    try:
        text = config_path(node).read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("commitlog_sync"):
            values[key.strip()] = value.strip().removesuffix("ms")
    mode = values.get("commitlog_sync")
    if mode not in MODES:
        return None
    key = "commitlog_sync_period" if mode == "periodic" else "commitlog_sync_group_window"
    window = values.get(key)
    return CommitLogSync(mode, int(window) if window and window.isdigit() else 0)

"""Where harness Cassandra nodes live: their addresses, ports and directories.

A single node (default CQL port 19042) and an N-node cluster (default CQL port
19142, nodes on 127.0.0.1 .. 127.0.0.N) use separate directories and ports so
both can run at once. The config renderer (:mod:`harness.cassandra_config`), the
CQL probes (:mod:`harness.cassandra_cql`) and the start/stop logic
(:mod:`harness.cassandra`) all describe nodes with these values, so they live
below all three.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import process
from harness.process import HarnessError

SINGLE_DEFAULTS = {"native": 19042, "storage": 17000, "jmx": 17199}
CLUSTER_DEFAULTS = {"native": 19142, "storage": 17100, "jmx": 17200}


@dataclasses.dataclass(frozen=True)
class CassandraNode(process.ServiceDirectory):
    """One node's identity, addresses and directories."""

    kind = "cassandra"

    index: int
    address: str
    native_port: int
    storage_port: int
    jmx_port: int
    directory: Path

    @property
    def system_log(self) -> Path:
        return self.log_dir / "system.log"


@dataclasses.dataclass(frozen=True)
class CassandraCluster:
    """What a client needs (contact points and port) plus the nodes behind them."""

    name: str
    port: int
    nodes: tuple[CassandraNode, ...]
    base_dir: Path

    @property
    def contact_points(self) -> list[str]:
        return [node.address for node in self.nodes]


def cluster_spec(
    nodes: int = 1,
    port: int | None = None,
    *,
    storage_port: int | None = None,
    jmx_port: int | None = None,
    base_dir: Path | str | None = None,
) -> CassandraCluster:
    """Resolve ports and directories for a single node (``nodes=1``) or a cluster.

    Explicit arguments win, then environment variables, then defaults:
    single node ``QUEUEY_CASSANDRA_PORT`` / ``_STORAGE_PORT`` / ``_JMX_PORT``,
    cluster ``QUEUEY_CASSANDRA_CLUSTER_PORT`` / ``_STORAGE_PORT`` / ``_JMX_PORT``.
    JMX ports are ``jmx_port + index - 1`` since every node's JMX binds 127.0.0.1.
    """
    if not 1 <= nodes <= 9:
        raise HarnessError(f"nodes must be between 1 and 9, got {nodes}")
    single = nodes == 1
    prefix = "QUEUEY_CASSANDRA_" if single else "QUEUEY_CASSANDRA_CLUSTER_"
    defaults = SINGLE_DEFAULTS if single else CLUSTER_DEFAULTS
    native = port if port is not None else process.env_int(prefix + "PORT", defaults["native"])
    storage = (
        storage_port
        if storage_port is not None
        else process.env_int(prefix + "STORAGE_PORT", defaults["storage"])
    )
    jmx = (
        jmx_port if jmx_port is not None else process.env_int(prefix + "JMX_PORT", defaults["jmx"])
    )
    name = "cassandra" if single else "cassandra-cluster"
    base = Path(base_dir).resolve() if base_dir else process.var_dir() / name
    members = tuple(
        CassandraNode(
            index=i,
            address=f"127.0.0.{i}",
            native_port=native,
            storage_port=storage,
            jmx_port=jmx + i - 1,
            directory=base / f"node{i}",
        )
        for i in range(1, nodes + 1)
    )
    return CassandraCluster(name=f"queuey-{name}", port=native, nodes=members, base_dir=base)

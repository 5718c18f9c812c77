"""Asking one harness Cassandra node something over CQL: is it up, whom does it know.

Used while nodes start and by ``status``; re-exported by
:mod:`harness.cassandra`, whose API it is part of.
"""

from __future__ import annotations

import logging

from harness import process
from harness.cassandra_nodes import CassandraNode

log = logging.getLogger(__name__)

# Cassandra 5.0's newest non-beta native protocol; pinning it spares the
# driver's downgrade negotiation (and its warnings) on every connect.
PROTOCOL_VERSION = 5


def connection_class() -> type:
    """The driver's libev reactor: the asyncore one warns on Python 3.11+."""
    from cassandra.io.libevreactor import LibevConnection

    return LibevConnection


def _query_node(node: CassandraNode, cql: str, timeout: float = 5.0) -> list[tuple]:
    """Run one statement against exactly ``node`` and return the rows."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([node.address]), request_timeout=timeout
    )
    cluster = Cluster(
        contact_points=[node.address],
        port=node.native_port,
        protocol_version=PROTOCOL_VERSION,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connection_class=connection_class(),
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        schema_metadata_enabled=False,
        token_metadata_enabled=False,
    )
    try:
        session = cluster.connect()
        return [tuple(row) for row in session.execute(cql)]
    finally:
        cluster.shutdown()


def cql_answers(node: CassandraNode) -> str | None:
    """The node's release_version if it answers a real CQL query, else None."""
    if not process.port_open(node.address, node.native_port):
        return None
    try:
        rows = _query_node(node, "SELECT release_version FROM system.local")
    except Exception as exc:  # noqa: BLE001 - any driver failure means "not answering"
        log.debug("CQL probe of %s failed: %s", node.address, exc)
        return None
    return rows[0][0] if rows else None


def peers_of(node: CassandraNode) -> set[str]:
    """Addresses ``node`` lists in system.peers."""
    return {str(row[0]) for row in _query_node(node, "SELECT peer FROM system.peers")}

"""The harness runs a real Cassandra: CQL and TTL expiry work on it (its 3-node
cluster is proven by tests/faults/test_cassandra_cluster.py, on that module's cluster)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

from harness import cassandra

pytestmark = pytest.mark.cassandra


def _connect(contact_points: list[str], port: int, policy) -> Cluster:
    profile = ExecutionProfile(load_balancing_policy=policy, request_timeout=20)
    return Cluster(
        contact_points=contact_points,
        port=port,
        protocol_version=cassandra.PROTOCOL_VERSION,
        connection_class=cassandra.connection_class(),
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
    )


@pytest.fixture(scope="module")
def node() -> cassandra.CassandraCluster:
    return cassandra.ensure_running(1)


@pytest.fixture(scope="module")
def session(node: cassandra.CassandraCluster) -> Iterator[Session]:
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1"))
    client = _connect(node.contact_points, node.port, policy)
    try:
        yield client.connect()
    finally:
        client.shutdown()


@pytest.fixture
def keyspace(session: Session) -> Iterator[str]:
    name = f"harness_{uuid.uuid4().hex[:12]}"
    session.execute(
        f"CREATE KEYSPACE {name} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        yield name
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}")


def test_node_runs_cassandra_5(node: cassandra.CassandraCluster) -> None:
    version = cassandra.cql_answers(node.nodes[0])
    assert version is not None and version.startswith("5.0.")
    assert node.contact_points == ["127.0.0.1"]


def test_ensure_running_is_idempotent(node: cassandra.CassandraCluster) -> None:
    before = [st.pid for st in cassandra.status(1, node.port)]
    again = cassandra.ensure_running(1, node.port)
    after = [st.pid for st in cassandra.status(1, node.port)]
    assert again == node
    assert before == after and all(before)


def test_row_written_with_ttl_expires(session: Session, keyspace: str) -> None:
    session.execute(f"CREATE TABLE {keyspace}.items (k text PRIMARY KEY, v text)")
    insert = session.prepare(f"INSERT INTO {keyspace}.items (k, v) VALUES (?, ?) USING TTL 2")
    select = session.prepare(f"SELECT v, TTL(v) AS ttl FROM {keyspace}.items WHERE k = ?")
    session.execute(insert, ("key", "value"))

    row = session.execute(select, ("key",)).one()
    assert row is not None and row.v == "value"
    assert 0 < row.ttl <= 2

    deadline = time.monotonic() + 15
    while session.execute(select, ("key",)).one() is not None:
        assert time.monotonic() < deadline, "row outlived its 2 s TTL by more than 13 s"
        time.sleep(0.2)

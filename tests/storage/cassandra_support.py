"""Helpers for the Cassandra-specific storage tests (fixtures are in conftest.py).

Everything here runs against the project's real Cassandra node (harness); the
driver's request-init listener shows which statements were sent, at which
consistency level, so the tests check what Cassandra was actually asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassandra.query import BatchStatement, BoundStatement

from queuey import ids
from queuey.model import NewMessage
from queuey.storage.cassandra import CassandraStorage
from tests.support import CASSANDRA_KEYSPACE

#: Beside the run's own keyspace (``QUEUEY_TEST_KEYSPACE``), so parallel runs
#: on one node never share these tables either.
KEYSPACE = CASSANDRA_KEYSPACE + "_specific"
MICROS = ids.MICROS


@dataclass
class Sent:
    cql: str  # the prepared statement's text, or "BATCH <type>"
    consistency: int
    serial: int | None
    fetch_size: int | None
    values: list[Any]
    batch_type: Any = None


class Recorder:
    """Records every request the storage's session sends."""

    def __init__(self, storage: CassandraStorage) -> None:
        self.sent: list[Sent] = []
        self.session = storage.session
        self.session.add_request_init_listener(self._on_request)

    def _on_request(self, future: Any) -> None:
        query, message = future.query, future.message
        if isinstance(query, BatchStatement):
            self.sent.append(
                Sent(
                    f"BATCH {query.batch_type}",
                    message.consistency_level,
                    message.serial_consistency_level,
                    None,
                    [],
                    query.batch_type,
                )
            )
            return
        text = (
            query.prepared_statement.query_string
            if isinstance(query, BoundStatement)
            else str(query)
        )
        self.sent.append(
            Sent(
                text,
                message.consistency_level,
                message.serial_consistency_level,
                getattr(message, "fetch_size", None),
                list(getattr(query, "values", [])),
            )
        )

    def clear(self) -> None:
        self.sent.clear()

    def on(self, table: str, verb: str = "") -> list[Sent]:
        return [
            s
            for s in self.sent
            if f".{table} " in s.cql + " " and s.cql.upper().startswith(verb.upper())
        ]

    def close(self) -> None:
        self.session.remove_request_init_listener(self._on_request)


def bigint(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def put(store, queue, n, partition=1, ttl=600):
    return store.put_messages(queue, [NewMessage('{"n": %d}' % n, partition, ttl)])[0]


def raw(store: CassandraStorage, cql: str, params: tuple = ()) -> list[tuple]:
    return list(store.session.execute(cql, params))

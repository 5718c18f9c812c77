"""The ``queues`` table: queue rows, changed only by lightweight transactions
(so two API nodes can never both create a name or lose each other's update)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple, replace
from typing import Any

from queuey.errors import QueueExists, QueueNotFound, StorageUnavailable
from queuey.model import QueueMeta
from queuey.storage.asks import QueueChange
from queuey.storage.cassandra.session import P_META
from queuey.storage.cassandra.statements import Connection


def from_row(row: Sequence[Any]) -> QueueMeta:
    """Metadata from a row; a row written before schema v2 (nulls in the
    work-queue columns) reads as the defaults."""
    app, name, partitions, ttl, qtype, consistency, created, incarnation = row[:8]
    visibility_timeout, max_attempts, dead_letter_queue, delay, fifo, attributes = row[8:14]
    return QueueMeta(
        application=app,
        name=name,
        partitions=partitions,
        ttl=ttl,
        type=qtype,
        consistency=consistency,
        created=created or 0,
        incarnation=incarnation,
        visibility_timeout=30 if visibility_timeout is None else visibility_timeout,
        max_attempts=max_attempts or 0,
        dead_letter_queue=dead_letter_queue,
        delay=delay or 0,
        fifo=bool(fifo),
        attributes=json.loads(attributes) if attributes else {},
    )


def values(meta: QueueMeta) -> tuple:
    """The queue's columns in ``Statements._QUEUE_COLS`` order."""
    return (
        *astuple(meta)[:8],
        meta.visibility_timeout,
        meta.max_attempts,
        meta.dead_letter_queue,
        meta.delay,
        meta.fifo,
        _attributes_text(meta.attributes),
    )


def _attributes_text(attributes: Mapping[str, str]) -> str | None:
    if not attributes:
        return None
    return json.dumps(dict(attributes), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _applied(rows: Sequence[Sequence[Any]]) -> tuple[bool, bool]:
    """(applied, row existed) of a lightweight transaction's answer."""
    row = rows[0]
    return bool(row[0]), len(row) > 1


def create(c: Connection, meta: QueueMeta) -> QueueMeta:
    rows = c.session.execute(c.st.insert_queue, values(meta), execution_profile=P_META).all()
    applied, _ = _applied(rows)
    if not applied:
        raise QueueExists(meta.name)
    return meta


def read_row(c: Connection, application: str, name: str) -> Sequence[Any]:
    row = c.session.execute(c.st.select_queue, (application, name), execution_profile=P_META).one()
    if row is None:
        raise QueueNotFound(name)
    return row


def list_rows(c: Connection, application: str, limit: int, after: str | None) -> list[QueueMeta]:
    stmt = c.st.list_queues.bind((application, after or "", limit))
    stmt.fetch_size = limit
    rs = c.session.execute(stmt, execution_profile=P_META)
    return [from_row(row) for row in rs.current_rows]


def _compare_and_set(
    c: Connection,
    application: str,
    name: str,
    what: str,
    change: Callable[[QueueMeta], QueueMeta],
    execute: Callable[[Sequence[Any], QueueMeta], list],
) -> QueueMeta:
    """Read the queue row, apply ``change``, write it back only if unchanged (LWT).

    ``execute`` gets the row as stored (its condition must compare stored
    values, nulls included) and the new metadata. Retries on a concurrent
    change; ``QueueNotFound`` if the row is gone.
    """
    for _ in range(10):
        row = read_row(c, application, name)
        new = change(from_row(row))
        applied, existed = _applied(execute(row, new))
        if applied:
            return new
        if not existed:
            raise QueueNotFound(name)
    raise StorageUnavailable(f"cassandra: {what}: too much contention")


def update(c: Connection, application: str, name: str, change: QueueChange) -> QueueMeta:
    """Change the row; attribute keys are merged into the row as read, and the
    lightweight transaction's condition (the whole row as read) makes the merge
    atomic: a concurrent change of another key makes this one read again."""

    def execute(row: Sequence[Any], new: QueueMeta) -> list:
        fresh = values(new)
        return c.session.execute(
            c.st.update_queue,
            (
                *fresh[2:6],
                *fresh[8:12],
                fresh[13],
                application,
                name,
                *row[2:6],
                *row[8:12],
                row[13],
            ),
            execution_profile=P_META,
        ).all()

    return _compare_and_set(c, application, name, "update queue", change.apply, execute)


def delete(c: Connection, application: str, name: str) -> None:
    rows = c.session.execute(c.st.delete_queue, (application, name), execution_profile=P_META).all()
    applied, _ = _applied(rows)
    if not applied:
        raise QueueNotFound(name)
    c.session.execute(c.st.delete_checkpoints, (application, name), execution_profile=P_META)


def purge(c: Connection, application: str, name: str) -> QueueMeta:
    def execute(row: Sequence[Any], new: QueueMeta) -> list:
        return c.session.execute(
            c.st.purge_queue, (new.incarnation, application, name, row[7]), execution_profile=P_META
        ).all()

    return _compare_and_set(
        c,
        application,
        name,
        "purge queue",
        lambda cur: replace(cur, incarnation=uuid.uuid4().hex),
        execute,
    )

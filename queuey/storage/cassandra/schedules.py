"""Schedules on Cassandra: one row per schedule in the ``schedules`` table,
partitioned by application (listing an application's schedules reads one
partition).

Every write is a lightweight transaction: creation ``IF NOT EXISTS``, each
change ``IF version = ?`` (so of two API nodes advancing a schedule from the
same tick, exactly one wins), deletion ``IF EXISTS`` (no plain write mixes
with the transactions on a row). Reads use the queue metadata's quorum.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from cassandra.cluster import Session

from queuey.errors import ScheduleExists, ScheduleNotFound
from queuey.model import schedules as columns
from queuey.model.schedules import Schedule
from queuey.storage.cassandra.session import P_META, boundary
from queuey.storage.cassandra.statements import Connection


class _Statements:
    """The schedule statements, prepared once per session."""

    def __init__(self, session: Session, ks: str) -> None:
        p = session.prepare
        self.session = session
        self.insert = p(
            f"INSERT INTO {ks}.schedules ({columns.SELECT_LIST}) "
            f"VALUES ({columns.VALUE_MARKS}) IF NOT EXISTS"
        )
        self.select = p(
            f"SELECT {columns.SELECT_LIST} FROM {ks}.schedules WHERE application = ? AND name = ?"
        )
        self.list = p(f"SELECT {columns.SELECT_LIST} FROM {ks}.schedules WHERE application = ?")
        self.update = p(
            f"UPDATE {ks}.schedules SET {columns.SET_CHANGEABLE}, version = ? "
            "WHERE application = ? AND name = ? IF version = ?"
        )
        self.delete = p(f"DELETE FROM {ks}.schedules WHERE application = ? AND name = ? IF EXISTS")


class CassandraSchedules:
    """The :class:`~queuey.storage.Storage` schedule methods of
    :class:`~queuey.storage.cassandra.CassandraStorage` (mixed in; it
    provides ``_connection()`` and ``config``)."""

    _schedule_lock = threading.Lock()
    _schedule_statements: _Statements | None = None

    def _schedules(self) -> tuple[Session, _Statements]:
        c: Connection = self._connection()  # type: ignore[attr-defined]
        st = self._schedule_statements
        if st is None or st.session is not c.session:
            with self._schedule_lock:
                st = self._schedule_statements
                if st is None or st.session is not c.session:
                    st = _Statements(c.session, self.config.keyspace)  # type: ignore[attr-defined]
                    self._schedule_statements = st
        return c.session, st

    @boundary("create schedule")
    def create_schedule(self, schedule: Schedule) -> Schedule:
        session, st = self._schedules()
        stored = replace(schedule, version=1)
        row = session.execute(st.insert, columns.to_row(stored), execution_profile=P_META).one()
        if not row[0]:
            raise ScheduleExists(schedule.name)
        return stored

    @boundary("get schedule")
    def get_schedule(self, application: str, name: str) -> Schedule:
        session, st = self._schedules()
        row = session.execute(st.select, (application, name), execution_profile=P_META).one()
        if row is None:
            raise ScheduleNotFound(name)
        return columns.from_row(row)

    @boundary("list schedules")
    def list_schedules(self, application: str) -> list[Schedule]:
        session, st = self._schedules()
        rows = session.execute(st.list, (application,), execution_profile=P_META)
        return [columns.from_row(row) for row in rows]

    @boundary("update schedule")
    def update_schedule(self, schedule: Schedule) -> Schedule | None:
        session, st = self._schedules()
        version = schedule.version + 1
        values = (
            *columns.changeable_values(schedule),
            version,
            schedule.application,
            schedule.name,
        )
        row = session.execute(
            st.update, (*values, schedule.version), execution_profile=P_META
        ).one()
        return replace(schedule, version=version) if row[0] else None

    @boundary("delete schedule")
    def delete_schedule(self, application: str, name: str) -> None:
        session, st = self._schedules()
        row = session.execute(st.delete, (application, name), execution_profile=P_META).one()
        if not row[0]:
            raise ScheduleNotFound(name)

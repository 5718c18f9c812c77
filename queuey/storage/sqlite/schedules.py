"""Schedules on SQLite: one row per schedule in the ``schedules`` table.

Every change after creation is a compare-and-set: ``UPDATE ... WHERE version
= ?`` inside a write transaction, which holds the file's write lock, so of two
processes (or API nodes on one file) changing the same schedule from the same
version exactly one changes a row.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from queuey.errors import ScheduleExists, ScheduleNotFound
from queuey.model import schedules as columns
from queuey.model.schedules import Schedule
from queuey.storage.sqlite.database import Database

_UPDATE = (
    f"UPDATE schedules SET {columns.SET_CHANGEABLE}, version = version + 1 "
    "WHERE application = ? AND name = ? AND version = ?"
)


class SqliteSchedules:
    """The :class:`~queuey.storage.Storage` schedule methods of
    :class:`~queuey.storage.sqlite.SQLiteStorage` (mixed in; it provides
    ``_db``, its :class:`~queuey.storage.sqlite.database.Database`), on the
    ``schedules`` table."""

    _db: Database

    def create_schedule(self, schedule: Schedule) -> Schedule:
        stored = replace(schedule, version=1)
        with self._db.write() as conn:
            added = conn.execute(
                f"INSERT OR IGNORE INTO schedules ({columns.SELECT_LIST}) "
                f"VALUES ({columns.VALUE_MARKS})",
                columns.to_row(stored),
            ).rowcount
        if added != 1:
            raise ScheduleExists(schedule.name)
        return stored

    def get_schedule(self, application: str, name: str) -> Schedule:
        def run(conn: sqlite3.Connection) -> Schedule:
            row = conn.execute(
                f"SELECT {columns.SELECT_LIST} FROM schedules WHERE application = ? AND name = ?",
                (application, name),
            ).fetchone()
            if row is None:
                raise ScheduleNotFound(name)
            return columns.from_row(row)

        return self._db.read(run)

    def list_schedules(self, application: str) -> list[Schedule]:
        def run(conn: sqlite3.Connection) -> list[Schedule]:
            rows = conn.execute(
                f"SELECT {columns.SELECT_LIST} FROM schedules WHERE application = ? ORDER BY name",
                (application,),
            )
            return [columns.from_row(row) for row in rows]

        return self._db.read(run)

    def update_schedule(self, schedule: Schedule) -> Schedule | None:
        with self._db.write() as conn:
            key = (schedule.application, schedule.name, schedule.version)
            changed = conn.execute(_UPDATE, (*columns.changeable_values(schedule), *key)).rowcount
        return replace(schedule, version=schedule.version + 1) if changed == 1 else None

    def delete_schedule(self, application: str, name: str) -> None:
        with self._db.write() as conn:
            removed = conn.execute(
                "DELETE FROM schedules WHERE application = ? AND name = ?", (application, name)
            ).rowcount
        if removed != 1:
            raise ScheduleNotFound(name)

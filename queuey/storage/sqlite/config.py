"""What the ini and the command line call: ``load_from_config`` builds the
backend from settings; :func:`upgrade_schema` and :func:`schema_version` are
the ``queuey schema`` commands (the contract the CLI looks for on a backend).

Opening a storage migrates the file too (a developer's ``make serve`` on an
old file just works); the commands let an operator do it on purpose, see the
steps, and check a file without creating it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queuey import settings as queuey_settings
from queuey.clock import Clock
from queuey.settingstable import Table, setting
from queuey.storage.sqlite.backend import SQLiteStorage
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import SCHEMA_VERSION, current_version, migrate


@dataclass(frozen=True)
class SQLiteSettings:
    """The backend's settings (``queuey.sqlite.*``): the table :data:`SQLITE`."""

    path: str = setting("queuey.sqlite.path", "var/queuey.sqlite3", help="the database file")
    #: Seconds a write waits for another process holding the file's write lock.
    busy_timeout: float = setting("queuey.sqlite.busy_timeout", "10", minimum=0)
    #: Seconds between background sweeps of expired rows (0: no sweep).
    sweep_interval: float = setting("queuey.sqlite.sweep_interval", "60", minimum=0)


#: The backend's keys; ``QUEUEY_SQLITE_PATH`` and the like override them, as
#: the server's own keys are (docs/configuration.rst), named in the ini or not.
SQLITE = Table(SQLiteSettings, env_prefix="")


def sqlite_settings(settings: Mapping[str, Any]) -> SQLiteSettings:
    """The backend's settings from ``settings`` and the environment."""
    return SQLITE.parse(settings, os.environ)


def upgrade_schema(settings: Mapping[str, Any]) -> list[str]:
    """Create or migrate the file's schema; returns the steps applied (none when
    up to date). One write transaction, so a concurrent opener waits for it."""
    db = Database(sqlite_settings(settings).path, busy_timeout=30.0)
    try:
        with db.write() as conn:
            return migrate(conn)
    finally:
        db.close()


def schema_version(settings: Mapping[str, Any]) -> str:
    """``"<file's version> of <this release's>"``; ``0`` when there is no file yet
    (which this does not create)."""
    path = sqlite_settings(settings).path
    if not Path(path).exists():
        return f"0 of {SCHEMA_VERSION}"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return f"{current_version(conn)} of {SCHEMA_VERSION}"
    finally:
        conn.close()


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> SQLiteStorage:
    """Build the backend from ini settings (:data:`SQLITE` and
    ``queuey.dedup_window``, :func:`queuey.settings.dedup_window`)."""
    config = sqlite_settings(settings)
    return SQLiteStorage(
        config.path,
        clock,
        busy_timeout=config.busy_timeout,
        sweep_interval=config.sweep_interval,
        dedup_window=queuey_settings.dedup_window(settings),
    )

"""What the ini and the command line call: ``load_from_config`` builds the
backend from settings; :func:`upgrade_schema` and :func:`schema_version` are
the ``queuey schema`` commands (the contract the CLI looks for on a backend).

Opening a storage migrates the file too (a developer's ``make serve`` on an
old file just works); the commands let an operator do it on purpose, see the
steps, and check a file without creating it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from queuey import settings as queuey_settings
from queuey.clock import Clock
from queuey.errors import ConfigurationError
from queuey.storage.sqlite.backend import SQLiteStorage
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import SCHEMA_VERSION, current_version, migrate

DEFAULT_PATH = "var/queuey.sqlite3"


def _path(settings: Mapping[str, Any]) -> str:
    return str(settings.get("queuey.sqlite.path", DEFAULT_PATH))


def upgrade_schema(settings: Mapping[str, Any]) -> list[str]:
    """Create or migrate the file's schema; returns the steps applied (none when
    up to date). One write transaction, so a concurrent opener waits for it."""
    db = Database(_path(settings), busy_timeout=30.0)
    try:
        with db.write() as conn:
            return migrate(conn)
    finally:
        db.close()


def schema_version(settings: Mapping[str, Any]) -> str:
    """``"<file's version> of <this release's>"``; ``0`` when there is no file yet
    (which this does not create)."""
    path = _path(settings)
    if not Path(path).exists():
        return f"0 of {SCHEMA_VERSION}"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return f"{current_version(conn)} of {SCHEMA_VERSION}"
    finally:
        conn.close()


def _number(settings: Mapping[str, Any], key: str, default: float) -> float:
    value = settings.get(key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(key, f"not a number: {value!r}") from None
    if not 0 <= number < float("inf"):
        raise ConfigurationError(key, f"must be a number of seconds, 0 or more: {value!r}")
    return number


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> SQLiteStorage:
    """Build the backend from ini settings (``queuey.sqlite.*``).

    ``queuey.sqlite.sweep_interval`` (seconds, default 60; 0 turns the
    background sweep off), ``queuey.sqlite.busy_timeout`` (seconds a write
    waits for another process holding the file's write lock, default 10) and
    ``queuey.dedup_window`` (:func:`queuey.settings.dedup_window`).
    """
    path = _path(settings)
    busy = _number(settings, "queuey.sqlite.busy_timeout", 10.0)
    sweep = _number(settings, "queuey.sqlite.sweep_interval", 60.0)
    window = queuey_settings.dedup_window(settings)
    return SQLiteStorage(path, clock, busy_timeout=busy, sweep_interval=sweep, dedup_window=window)

"""The SQLite file's connections: one writer under a lock, one reader per thread.

WAL mode lets readers run beside the writer; ``synchronous=FULL`` makes every
commit durable before a caller is answered. Every ``sqlite3.Error`` leaves
here as :class:`~queuey.errors.StorageUnavailable`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from queuey.errors import StorageUnavailable

T = TypeVar("T")
log = logging.getLogger(__name__)


def unavailable(exc: sqlite3.Error) -> StorageUnavailable:
    """The error a caller sees for a failed SQLite call."""
    return StorageUnavailable(f"sqlite: {exc}", retry_after=1)


class Database:
    """Connections to one SQLite file, shared by the threads of a process."""

    def __init__(self, path: str, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        #: Held for every write transaction on :attr:`writer`.
        self.write_lock = threading.Lock()
        self._all_connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.writer = self._connect()
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,
        )
        self._use_wal(conn)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        with self._connections_lock:
            self._all_connections.append(conn)
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (once per file; a no-op after that).

        The switch needs the file to itself and SQLite's busy handler does not
        wait for it, so processes opening a new file together retry here until
        ``busy_timeout`` instead of failing with "database is locked".
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``, with SQLite errors turned into ``StorageUnavailable``."""
        try:
            return fn()
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement."""
        with self.write_lock:
            conn = self.writer
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                self.rollback()
                if isinstance(exc, sqlite3.Error):
                    raise unavailable(exc) from exc
                raise

    def rollback(self) -> None:
        """End the writer's open transaction, if any (caller holds :attr:`write_lock`).

        Called while another error is on its way out: a failed rollback is
        logged rather than raised over it.
        """
        if not self.writer.in_transaction:
            return
        try:
            self.writer.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.error("sqlite: rollback after a failed write failed: %s", exc)

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._all_connections:
                conn.close()
            self._all_connections.clear()
        self._local = threading.local()

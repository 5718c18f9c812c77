"""The SQLite file's connections: one writer under a lock, one reader per thread.

WAL mode lets readers run beside the writer; ``synchronous=FULL`` makes every
commit durable before a caller is answered. Every ``sqlite3.Error`` leaves
here as :class:`~queuey.errors.StorageUnavailable`.

Several server processes may share one file. SQLite makes a writer that finds
the file locked sleep and retry (its busy handler backs off up to 100 ms), so
writers of different processes would take turns by sleeping; instead every
write transaction first takes :class:`WriteLock`, which the kernel hands to
the next waiting process the moment it is released.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import sqlite3
import struct
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


class WriteLock:
    """One writer at a time: this process's threads, then every process's.

    A thread lock orders this process's threads; an exclusive ``flock`` on
    ``<file>-writer.lock`` orders processes (waiting for it releases the GIL).
    A context manager.
    """

    def __init__(self, path: str) -> None:
        self._thread = threading.Lock()
        self._fd: int | None = None
        if path != ":memory:":
            self._fd = os.open(f"{path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> WriteLock:
        self._thread.acquire()
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._thread.release()
                raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread.release()

    def close(self) -> None:
        with self._thread:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class SharedCounter:
    """A number every process using the file sees at once: 8 bytes of a shared
    memory map of ``<file>-<name>``, raised under an exclusive ``flock``.

    :class:`queuey.web.resources.QueueCache` uses one to hear, on every
    request, that another process changed a queue's metadata.
    """

    def __init__(self, path: str, name: str) -> None:
        self._fd = os.open(f"{path}-{name}", os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < 8:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size < 8:
                    os.ftruncate(self._fd, 8)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._map = mmap.mmap(self._fd, 8)

    def value(self) -> int:
        return struct.unpack_from("<Q", self._map)[0]

    def bump(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            struct.pack_into("<Q", self._map, 0, (self.value() + 1) % 2**64)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class Database:
    """Connections to one SQLite file, shared by the threads of a process."""

    def __init__(self, path: str, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        #: Held for every write transaction on :attr:`writer`.
        self.write_lock = WriteLock(self.path)
        self._all_connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
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
        self.write_lock.close()

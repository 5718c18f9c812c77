"""The SQLite file's connections: one writer under a lock, one reader per thread.

WAL mode lets readers run beside the writer; ``synchronous=FULL`` makes every
commit durable before a caller is answered. Every ``sqlite3.Error`` leaves
here as :class:`~queuey.errors.StorageUnavailable`.

Several server processes may share one file. SQLite makes a writer that finds
the file locked sleep and retry (its busy handler backs off up to 100 ms), so
writers of different processes would take turns by sleeping; instead every
write transaction first takes :class:`WriteLock`, which the kernel hands to
the next waiting process the moment it is released.

``busy_timeout`` (``queuey.sqlite.busy_timeout``) is the longest a write waits
for that lock, whoever holds it (a thread of this process, another process,
a stuck tool): past it the write fails with :class:`WriteLockTimeout`, a
``StorageUnavailable`` the API answers with 503 and ``Retry-After``. Long jobs
(purge, delete, the expiry sweep) work in short batches and let waiting
writers in between them, so they never make a post wait for the whole job.
"""

from __future__ import annotations

import collections
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


class WriteLockTimeout(StorageUnavailable):
    """The write lock stayed busy past the write's deadline (``busy_timeout``)."""


class FairLock:
    """This process's turn to write: handed to waiting threads in arrival order.

    A plain ``threading.Lock`` lets the thread that releases it take it straight
    back (a purge between two batches, a busy group commit) while a woken waiter
    is still being scheduled; here a release hands the lock to the longest
    waiter, and ``acquire`` gives up after ``timeout`` seconds.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    def acquire(self, timeout: float | None = None) -> bool:
        """True once held; False after ``timeout`` seconds (``None``: no limit)."""
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        if timeout is None:
            handed = turn.acquire()
        elif timeout > 0:
            handed = turn.acquire(timeout=timeout)
        else:
            handed = False
        if handed:
            return True
        with self._mutex:
            try:
                self._waiters.remove(turn)
            except ValueError:  # handed over while giving up: ours after all
                return True
            return False

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # still held: by the next waiter now
            else:
                self._held = False


class FileLock:
    """An exclusive ``flock`` on a file, waited for at most a deadline.

    ``flock`` itself cannot time out, so a helper thread makes the blocking
    call: the kernel wakes it the moment the holder lets go (no polling, no CPU
    while waiting), and the caller waits for the helper at most its deadline.
    A caller that gives up leaves the helper waiting for the next caller; if the
    lock comes when nobody wants it any more, the helper lets go at once. Only
    the holder of the process's :class:`FairLock` calls :meth:`acquire`, so one
    thread at a time waits here.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._cond = threading.Condition()
        self._asking = False  # the helper is (about to be) blocked in flock
        self._wanted = False  # a caller waits for the helper's lock
        self._granted = False  # the helper took the lock for the waiting caller
        self._closed = False
        self._helper: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        with self._cond:
            if self._closed:
                raise StorageUnavailable("sqlite: the store is closed", retry_after=1)
            if not self._asking:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
                self._asking = True
                if self._helper is None:
                    self._helper = threading.Thread(
                        target=self._wait_for_lock, name="queuey-sqlite-writer-lock", daemon=True
                    )
                    self._helper.start()
                self._cond.notify_all()
            self._wanted = True
            try:
                if self._cond.wait_for(lambda: self._granted, max(timeout, 0)):
                    self._granted = False
                    return True
                return False
            finally:
                self._wanted = False

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _wait_for_lock(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._asking or self._closed)
                if self._closed:
                    return
                fd = self._fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                log.error("sqlite: waiting for the writer lock failed: %s", exc)
                with self._cond:
                    self._asking = False
                continue
            with self._cond:
                self._asking = False
                if self._closed:  # close() left the descriptor to us
                    os.close(fd)
                    return
                if self._wanted:
                    self._granted = True
                    self._cond.notify_all()
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            if not self._asking:
                os.close(self._fd)


class WriteLock:
    """One writer at a time: this process's threads, then every process's.

    A :class:`FairLock` orders this process's threads; an exclusive ``flock``
    on ``<file>-writer.lock`` (:class:`FileLock`) orders processes. A writer
    waits at most ``timeout`` seconds for both together (``busy_timeout``),
    then gets :class:`WriteLockTimeout`, a ``StorageUnavailable``: the caller
    answers 503 with ``Retry-After`` instead of hanging behind a stuck or slow
    writer. A context manager (waiting up to ``timeout``).
    """

    def __init__(self, path: str, timeout: float) -> None:
        self.timeout = timeout
        self._thread = FairLock()
        self._file: FileLock | None = None
        if path != ":memory:":
            self._file = FileLock(f"{path}-writer.lock")

    def acquire(self, timeout: float) -> None:
        """Take the lock within ``timeout`` seconds or raise :class:`WriteLockTimeout`."""
        deadline = time.monotonic() + timeout
        if not self._thread.acquire(timeout):
            raise self._timed_out(timeout)
        if self._file is not None:
            try:
                got = self._file.acquire(deadline - time.monotonic())
            except BaseException:
                self._thread.release()
                raise
            if not got:
                self._thread.release()
                raise self._timed_out(timeout)

    def release(self) -> None:
        try:
            if self._file is not None:
                self._file.release()
        finally:
            self._thread.release()

    @staticmethod
    def _timed_out(timeout: float) -> WriteLockTimeout:
        return WriteLockTimeout(
            f"sqlite: another write held the file for longer than busy_timeout ({timeout:g}s)",
            retry_after=1,
        )

    def __enter__(self) -> WriteLock:
        self.acquire(self.timeout)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def close(self) -> None:
        """Wait for the current writer, then let go of the lock file."""
        self._thread.acquire()
        try:
            if self._file is not None:
                self._file.close()
                self._file = None
        finally:
            self._thread.release()


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
        self.write_lock = WriteLock(self.path, busy_timeout)
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

    def read(self, fn: Callable[[sqlite3.Connection], T], snapshot: bool = False) -> T:
        """``fn`` on this thread's read connection (with ``snapshot``, inside one
        read transaction), SQLite errors turned into ``StorageUnavailable``."""
        try:
            conn = self.reader()
            if not snapshot:
                return fn(conn)
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
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

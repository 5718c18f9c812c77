"""Tables of keyed slots in memory every process of a server (or host) maps.

Flow control keeps what it counts between requests (token buckets, posts
since a queue was measured) in :class:`SlotTable` s: one table per
application and purpose, so one application can fill only its own table and
never weaken another's limits. A table is a file mapped into memory by every
process that shares it (the production server's workers and refresher, or
every process using one SQLite file), under an exclusive ``flock`` held for
a few microseconds per call; without a file (a process serving alone) it is
anonymous memory of the same layout.

Each slot holds a 16-byte digest of its key and ``fields`` doubles. A key is
found by linear probing over at most :data:`PROBES` slots; a freed slot
becomes a tombstone, which lookups pass and claims reuse. At most
:attr:`SlotTable.cap` keys are live (half the slots, so a probe window is
rarely full); a claim past that first reclaims slots the owner calls idle
(a token bucket that is full again is the same as a new one) and otherwise
raises :class:`TableFull`: the application asking is refused, nobody else
is, and no limit silently falls back to a weaker per-process rule.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from queuey.core.refusals import TableFull

#: Slots probed for one key: a lookup or claim never looks further.
PROBES = 64
#: Seconds a caller refused for a full table is told to wait.
TABLE_FULL_RETRY = 5
_MAGIC = b"QSLOTS01"
_HEADER = struct.Struct("<8sIII")  # magic, slots, fields, live keys
_HEADER_SIZE = 64
_EMPTY = bytes(16)
_TOMBSTONE = b"\xff" * 16


def digest(name: str) -> bytes:
    """A key's 16-byte digest (never the empty or tombstone marker)."""
    found = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    return found if found not in (_EMPTY, _TOMBSTONE) else b"\x01" + found[1:]


class SlotTable:
    """``cap`` keys of ``fields`` doubles each, in ``path`` (None: this process only).

    Call every method inside ``with table.locked():``. A file made by
    another layout (another ``cap`` or ``fields``) is laid out anew.
    """

    def __init__(self, path: str | Path | None, cap: int, fields: int) -> None:
        self.path = Path(path) if path is not None else None
        self.cap = cap
        self.fields = fields
        self.slots = max(2 * cap, PROBES)
        self._slot = struct.Struct(f"<16s{fields}d")
        size = _HEADER_SIZE + self.slots * self._slot.size
        self._fd = -1
        if self.path is None:
            self._map = mmap.mmap(-1, size)
        else:
            self._fd = _open_private(self.path)
            with self._flocked():
                if os.fstat(self._fd).st_size != size or not self._valid():
                    os.ftruncate(self._fd, 0)
                    os.ftruncate(self._fd, size)
                    self._init_header()
            self._map = mmap.mmap(self._fd, size)
        if self.path is None:
            self._init_header()
        self._lock = threading.Lock()
        self._index: dict[str, int] = {}

    def _valid(self) -> bool:
        head = os.pread(self._fd, _HEADER.size, 0)
        if len(head) < _HEADER.size:
            return False
        magic, slots, fields, _ = _HEADER.unpack(head)
        return magic == _MAGIC and slots == self.slots and fields == self.fields

    def _init_header(self) -> None:
        head = _HEADER.pack(_MAGIC, self.slots, self.fields, 0)
        if self._fd >= 0:
            os.pwrite(self._fd, head, 0)
        else:
            self._map[: _HEADER.size] = head

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[None]:
        if self._fd < 0:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def locked(self) -> Iterator[SlotTable]:
        """Hold the table (this process's threads, then every process's)."""
        with self._lock, self._flocked():
            yield self

    # -- the header ---------------------------------------------------------------
    @property
    def live(self) -> int:
        return _HEADER.unpack_from(self._map, 0)[3]

    def _set_live(self, count: int) -> None:
        magic, slots, fields, _ = _HEADER.unpack_from(self._map, 0)
        _HEADER.pack_into(self._map, 0, magic, slots, fields, count)

    # -- slots ----------------------------------------------------------------------
    def _offset(self, index: int) -> int:
        return _HEADER_SIZE + index * self._slot.size

    def _key_at(self, index: int) -> bytes:
        offset = self._offset(index)
        return bytes(self._map[offset : offset + 16])

    def read(self, index: int) -> tuple[float, ...]:
        return self._slot.unpack_from(self._map, self._offset(index))[1:]

    def write(self, index: int, values: Sequence[float]) -> None:
        offset = self._offset(index)
        self._slot.pack_into(self._map, offset, self._map[offset : offset + 16], *values)

    def find(self, name: str) -> int | None:
        """The slot of ``name``, or None."""
        key = digest(name)
        cached = self._index.get(name)
        if cached is not None and self._key_at(cached) == key:
            return cached
        start = int.from_bytes(key[:8], "big") % self.slots
        for probe in range(min(PROBES, self.slots)):
            index = (start + probe) % self.slots
            found = self._key_at(index)
            if found == key:
                self._remember(name, index)
                return index
            if found == _EMPTY:
                return None
        return None

    def claim(
        self,
        name: str,
        initial: Sequence[float],
        idle: Callable[[tuple[float, ...]], bool] = lambda values: False,
    ) -> int:
        """The slot of ``name``, made with ``initial`` values when new.

        A new key takes the first empty slot, tombstone or idle slot of its
        probe window; past :attr:`cap` live keys only an idle slot will do.
        :class:`TableFull` when none is left."""
        found = self.find(name)
        if found is not None:
            return found
        key = digest(name)
        start = int.from_bytes(key[:8], "big") % self.slots
        free = reusable = None
        for probe in range(min(PROBES, self.slots)):
            index = (start + probe) % self.slots
            at = self._key_at(index)
            if at in (_EMPTY, _TOMBSTONE):
                free = index if free is None else free
                if at == _EMPTY:
                    break
            elif reusable is None and idle(self.read(index)):
                reusable = index
        if free is not None and self.live < self.cap:
            self._set_live(self.live + 1)
            index = free
        elif reusable is not None:
            index = reusable  # an idle key gives its slot up: the live count stays
        else:
            raise TableFull(
                "keys_per_application",
                f"{self.live} keys (rate buckets, counted queues) are in use for this "
                "application, the most its table holds (queuey.flow.keys_per_application); "
                "retry later",
                TABLE_FULL_RETRY,
            )
        self._slot.pack_into(self._map, self._offset(index), key, *initial)
        self._remember(name, index)
        return index

    def free(self, index: int) -> None:
        """Give a slot up (its key is gone)."""
        if self._key_at(index) in (_EMPTY, _TOMBSTONE):
            return
        self._slot.pack_into(self._map, self._offset(index), _TOMBSTONE, *([0.0] * self.fields))
        self._set_live(max(0, self.live - 1))

    def used(self) -> Iterator[tuple[int, bytes, tuple[float, ...]]]:
        """Every live slot: index, key digest, values."""
        for index in range(self.slots):
            key = self._key_at(index)
            if key not in (_EMPTY, _TOMBSTONE):
                yield index, key, self.read(index)

    def _remember(self, name: str, index: int) -> None:
        if len(self._index) >= 4 * self.slots:
            self._index.clear()
        self._index[name] = index

    def close(self) -> None:
        self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_private(path: Path) -> int:
    """Open (or create, 0600) a table file, refusing a symlink or a file of
    another user: its contents decide who is refused."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(f"{path} is not a regular file of this user")
    return fd


class TableSet:
    """One :class:`SlotTable` per application, made on first use: the files
    ``<directory>/<application digest>.<suffix>`` (a table per application in
    memory without a directory)."""

    def __init__(self, directory: str | Path | None, suffix: str, cap: int, fields: int) -> None:
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.suffix = suffix
        self.cap = cap
        self.fields = fields
        self._tables: dict[str, SlotTable] = {}
        self._lock = threading.Lock()

    def _path(self, application: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / f"{digest(application).hex()}.{self.suffix}"

    def existing(self, application: str) -> SlotTable | None:
        """The application's table if it was ever made (here, or as a file)."""
        table = self._tables.get(application)
        if table is None:
            path = self._path(application)
            if path is not None and path.exists():
                return self.of(application)
        return table

    def of(self, application: str) -> SlotTable:
        """The application's table, made on first use."""
        table = self._tables.get(application)
        if table is None:
            with self._lock:
                table = self._tables.get(application)
                if table is None:
                    path = self._path(application)
                    table = self._tables[application] = SlotTable(path, self.cap, self.fields)
        return table

    def close(self) -> None:
        with self._lock:
            for table in self._tables.values():
                table.close()
            self._tables.clear()

"""The operators' figures as a file: what the refresher process publishes
each pass and the server's workers read (:class:`queuey.core.overview.Overview`).

The file is written whole and renamed into place, so a reader sees the last
pass or the one before, never half of one. It is written by this server's
own refresher process in a directory only its user may enter (so unpickling
it trusts nothing from outside).
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: A snapshot file's identity: its mtime (nanoseconds) and inode. Each
#: publish replaces the file: a new inode, even within one mtime tick.
Stamp = tuple[int, int]

#: Held while a snapshot is unpickled (the collector is off meanwhile).
_UNPICKLING = threading.Lock()


def write_snapshot(path: Path, snapshot: dict) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(partial, path)


def read_snapshot(path: Path, last: Stamp | None) -> tuple[Stamp, dict] | None:
    """The snapshot and its stamp, if it changed since ``last`` (None when
    it did not, when there is none yet, or when it cannot be read)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    stamp = (found.st_mtime_ns, found.st_ino)
    if stamp == last:
        return None
    try:
        return stamp, _unpickled(path.read_bytes())
    except Exception as exc:  # noqa: BLE001 - unreadable, or written by other code: skip it
        log.warning("operators' figures not read from %s: %s", path, exc)
        return None


def _unpickled(data: bytes) -> dict:
    """A snapshot read back, with the cyclic garbage collector off meanwhile.

    A snapshot of 1,000 queues is some 20,000 objects, none in a cycle;
    made with the collector on, they set off its collections, and a full
    one walks the whole heap of a worker (large beside Cassandra's driver):
    on a Cassandra worker, those collections took most of a scrape that read
    a new snapshot.
    """
    with _UNPICKLING:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return pickle.loads(data)  # noqa: S301 - our own file (see above)
        finally:
            if enabled:
                gc.enable()

"""The busiest groups of the fair queues, over the server's processes, for the metrics.

Each process counts the posts it takes (:class:`queuey.core.fairness.GroupTracker`).
Served alone, :meth:`FairGroups.top` answers from that count. Under the
production server the posts are spread over its worker processes and a
metrics scrape reaches one of them, so each worker writes its busiest groups
to a small file of its own in the server's directory (on a post, at most
once per :data:`WRITE_SECONDS`, the posts in between by a timer) and the
scraped worker sums the files.

What the sum may get wrong: a worker that stopped posting is known by its
last file, whose counts are faded linearly to zero over the tracker's
:data:`~queuey.core.fairness.WINDOW` once it is older than
:data:`WRITE_SECONDS` (the tracker's own count drops to zero
over the same time, in steps of half a window); another worker's posts of
the last :data:`WRITE_SECONDS` may not be in its file yet; each
file holds a worker's :data:`PER_QUEUE` busiest groups, so a group just
below that in every worker is left out. Files older than :data:`STALE` are
removed by the next scrape (a worker that ended leaves one behind).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from queuey.core.fairness import WINDOW, GroupTracker, Key

log = logging.getLogger(__name__)

#: Least seconds between two writes of one process's file.
WRITE_SECONDS = 1.0
#: Groups kept per queue in a process's file (more than the metrics show, so
#: that the sum over processes ranks groups close to the top right).
PER_QUEUE = 50
#: Most fair queues one process follows (the most recently posted to).
MAX_QUEUES = 1000
#: Seconds after which a file no longer counts and is removed.
STALE = 60.0

Top = dict[Key, list[tuple[str, float]]]
_serial = itertools.count(1)


class FairGroups:
    """Recent posts per group of the fair queues: this process's, or with
    ``directory`` the sum over every process writing there."""

    def __init__(
        self,
        tracker: GroupTracker,
        now: Callable[[], float],
        directory: Path | None = None,
    ) -> None:
        self.tracker = tracker
        self.now = now
        self.directory = directory
        self.path = None
        if directory is not None:
            self.path = directory / f"fair-{os.getpid()}-{next(_serial)}.json"
        self._queues: dict[Key, None] = {}  # insertion order: the least recent first
        self._written = float("-inf")  # time.monotonic() of the last write
        self._pending = False  # a write is due (now or by a timer)
        self._lock = threading.Lock()

    def counted(self, queue: Key) -> None:
        """A post to ``queue`` was counted (the tracker's ``on_counted``): the
        file is written now, or by a timer :data:`WRITE_SECONDS` after the last
        write, so it never misses a post for longer than that."""
        with self._lock:
            self._queues.pop(queue, None)
            self._queues[queue] = None
            if len(self._queues) > MAX_QUEUES:
                del self._queues[next(iter(self._queues))]
            if self.path is None or self._pending:
                return
            self._pending = True
            wait = WRITE_SECONDS - (time.monotonic() - self._written)
        if wait <= 0:
            self._flush()
            return
        timer = threading.Timer(wait, self._flush)
        timer.daemon = True
        timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._pending = False
            self._written = time.monotonic()
        self._write()

    def _own(self, count: int) -> Top:
        with self._lock:
            queues = list(self._queues)
        found = {queue: self.tracker.top(queue, count) for queue in queues}
        with self._lock:
            for queue, groups in found.items():
                if not groups:
                    self._queues.pop(queue, None)
        return {queue: groups for queue, groups in found.items() if groups}

    def _write(self) -> None:
        assert self.path is not None
        own = self._own(PER_QUEUE)
        data = {
            "written": self.now(),
            "queues": [[app, name, groups] for (app, name), groups in own.items()],
        }
        partial = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(data), encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as exc:
            log.warning("fair queues' group figures not written to %s: %s", self.path, exc)

    def top(self, count: int, max_queues: int) -> Top:
        """The ``count`` groups with the most recent posts of each of the
        ``max_queues`` fair queues with the most, busiest first."""
        if self.directory is None:
            summed = self._own(count)
        else:
            self._write()
            summed = self._summed()
        ranked = sorted(summed.items(), key=lambda item: -sum(n for _, n in item[1]))
        return {
            queue: sorted(groups, key=lambda g: (-g[1], g[0]))[:count]
            for queue, groups in ranked[:max_queues]
        }

    def _summed(self) -> Top:
        now = self.now()
        totals: dict[Key, dict[str, float]] = {}
        for path in sorted(self.directory.glob("fair-*.json")):  # type: ignore[union-attr]
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                age = max(0.0, now - float(data["written"]))
                if age > STALE and path != self.path:
                    path.unlink(missing_ok=True)
                    continue
                # A file younger than WRITE_SECONDS is as fresh as files get.
                fade = 1.0 - max(0.0, age - WRITE_SECONDS) / WINDOW if path != self.path else 1.0
                if fade <= 0:
                    continue
                for app, name, groups in data["queues"]:
                    queue = totals.setdefault((app, name), {})
                    for group, posts in groups:
                        queue[group] = queue.get(group, 0.0) + posts * fade
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.debug("fair queues' group figures in %s skipped: %s", path, exc)
        return {
            queue: [(group, round(posts, 3)) for group, posts in groups.items() if posts > 0]
            for queue, groups in totals.items()
        }

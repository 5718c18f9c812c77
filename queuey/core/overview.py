"""What operators see of every queue: figures measured in the background, cached.

Counting a queue's messages is a scan (see :meth:`queuey.storage.Storage.stats`),
so neither a Prometheus scrape nor an admin page may pay for it. An
:class:`Overview` keeps the last figures of every queue and a refresher thread
measures them again, the stalest first, at most ``max_queues`` queues and at
most ``budget`` seconds of storage work per ``interval``. Readers only ever
look at the cache, so a scrape costs the same whatever the store holds.

The overview also keeps, per queue and per minute for the last hour, the depth
it measured and the messages this node accepted and acknowledged: the admin
page draws these as a chart.

Under the production server's worker processes (:mod:`queuey.server`) one
process of its own refreshes and *publishes* each pass to a snapshot file, and
the workers *follow* it: a worker reads the file again whenever it changed,
before answering from its cache. Measuring a large queue is seconds of Python
work; in a worker it would hold the interpreter lock while the worker's
requests wait (measured: single posts on Cassandra went from 2,195 to 476 per
second beside a refresher measuring queues of 300,000 messages).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queuey.clock import Clock
from queuey.core.figures import QueueFigures, measure
from queuey.core.flow import trim
from queuey.core.lengths import Lengths
from queuey.core.queues import every_queue
from queuey.core.snapshot import read_snapshot, write_snapshot
from queuey.errors import QueueNotFound
from queuey.ids import MICROS
from queuey.model import QueueMeta
from queuey.model.flow import queue_flow
from queuey.storage import Storage

__all__ = ["HISTORY_MINUTES", "Minute", "Overview", "QueueFigures", "measure"]

log = logging.getLogger(__name__)

#: Minutes of history kept per queue for the chart.
HISTORY_MINUTES = 60
#: Seconds between sweeps of the counts of queues deleted elsewhere, and how
#: long such a count must have been untouched to go (:meth:`Lengths.sweep`).
SWEEP_SECONDS = 60.0


@dataclass
class Minute:
    """One minute of a queue's history: ``at`` is the minute's start (seconds)."""

    at: int
    depth: int | None = None
    in_flight: int | None = None
    posted: int = 0
    acked: int = 0


@dataclass
class _Entry:
    meta: QueueMeta
    figures: QueueFigures | None = None
    history: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=HISTORY_MINUTES)
    )


class Overview:
    """The cached figures of every queue of every application, and their history.

    ``applications`` names the applications whose queues are watched (called
    on every discovery pass, so a reloaded applications file is followed).
    ``interval``: seconds between refresher passes. ``max_age``: a queue is
    measured again once its figures are older than this. ``budget``: most
    seconds of measuring per pass; the queues left wait for the next pass.
    ``max_queues``: most queues watched; more are counted in :attr:`unwatched`
    and left out (this bounds memory and the metrics' label sets).

    Flow control reads :meth:`length` and :meth:`usage` on every post. The
    queues they depend on, those with a ``max_length`` or of an application
    with a stored quota (:attr:`stored_quota`), are watched before the others
    and measured on every pass, before the stale ones; a ``drop_head`` queue
    found over its length is trimmed (:func:`queuey.core.flow.trim`), the
    deleted messages reported to :attr:`on_dropped`, and measured again.
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        applications: Callable[[], Iterable[str]],
        *,
        interval: float = 10.0,
        max_age: float = 30.0,
        budget: float = 2.0,
        max_queues: int = 5000,
        publish: Path | None = None,
        follow: Path | None = None,
        lengths: Lengths | None = None,
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.applications = applications
        self.interval = interval
        self.max_age = max_age
        self.budget = budget
        self.max_queues = max_queues
        self.unwatched = 0
        #: Wall seconds the last pass spent measuring.
        self.last_pass_seconds = 0.0
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_error = 0.0
        self._discovered = False
        self._swept = 0.0
        #: Called after every refresher pass (the consumer groups' refresh).
        self.after_pass: list[Callable[[], None]] = []
        #: Where the refresher writes each pass (``publish``), or where this
        #: process reads the figures another process measured (``follow``).
        self.publish_to = publish
        self.follow = follow
        self._followed: tuple[int, int] | None = None  # the snapshot last read: mtime, inode
        #: Extra state published beside the figures, by name: ``(get, set)``
        #: (the consumer groups' figures).
        self.shared: dict[str, tuple[Callable[[], Any], Callable[[Any, float], None]]] = {}
        #: Queue lengths and application usage for flow control, in the
        #: tables this server's processes share (:mod:`queuey.core.lengths`):
        #: each measurement is written there, for every process at once.
        self.lengths = lengths if lengths is not None else Lengths()
        #: An application's ``(max_messages, max_bytes)`` (0: none): the
        #: queues of one with either are measured every pass, with their bytes.
        self.stored_quota: Callable[[str], tuple[int, int]] = lambda application: (0, 0)
        #: Called with a ``drop_head`` queue and the messages a trim deleted.
        self.on_dropped: Callable[[QueueMeta, int], None] = lambda queue, count: None
        #: This server's part of the live API processes (:mod:`queuey.core.lengths`).
        self.share: Callable[[], float] = lambda: 1.0

    # -- reading the cache -----------------------------------------------------
    def queues(self, application: str) -> list[tuple[QueueMeta, QueueFigures | None]]:
        """The application's watched queues by name, each with its figures
        (``None`` for a queue not measured yet). The first call lists the
        queues itself rather than wait for the refresher's first pass."""
        self._follow()
        if not self._discovered:
            self._discover()
        with self._lock:
            found = [
                (e.meta, e.figures) for (app, _), e in self._entries.items() if app == application
            ]
        return sorted(found, key=lambda pair: pair[0].name)

    def figures(self, application: str, name: str) -> QueueFigures | None:
        """The queue's cached figures (``None`` until measured)."""
        self._follow()
        with self._lock:
            entry = self._entries.get((application, name))
            return entry.figures if entry else None

    def all_figures(self) -> list[QueueFigures]:
        """Every measured queue's figures (what a metrics scrape exposes)."""
        self._follow()
        with self._lock:
            return [e.figures for e in self._entries.values() if e.figures is not None]

    def watched(self) -> list[QueueMeta]:
        """Every watched queue's metadata as last discovered or measured
        (newer than its figures' between measurements): what the flow
        gauges show."""
        self._follow()
        with self._lock:
            return [e.meta for e in self._entries.values()]

    def length(self, meta: QueueMeta) -> int | None:
        """The queue's stored messages as last measured plus the posts since
        (None: unknown); what a ``max_length`` is checked against. How far it
        may be off: :mod:`queuey.core.lengths`."""
        return self.lengths.length(meta, self.share())

    def usage(self, application: str) -> tuple[int, int] | None:
        """``(messages, bytes)`` the application stores, as for :meth:`length`
        (None: nothing known yet)."""
        return self.lengths.usage(application, self.share())

    def history(self, application: str, name: str) -> list[Minute]:
        """The queue's last hour, a :class:`Minute` per minute seen, oldest first."""
        with self._lock:
            entry = self._entries.get((application, name))
            return [Minute(**vars(m)) for m in entry.history] if entry else []

    # -- feeding it ------------------------------------------------------------
    def count(self, meta: QueueMeta, *, posted: int = 0, acked: int = 0) -> None:
        """Add to this minute's posted and acknowledged counts of a watched queue."""
        at = self._minute()
        with self._lock:
            entry = self._entry(meta)
            if entry is None:
                return
            minute = self._minute_of(entry, at)
            minute.posted += posted
            minute.acked += acked

    def refresh(self, meta: QueueMeta) -> QueueFigures:
        """Measure one queue now (after an operator changed it) and cache it."""
        limited = self.limited(meta)
        sized = bool(self.stored_quota(meta.application)[1])
        mark = self.lengths.mark(meta) if limited else (0, 0)
        figures = measure(self.storage, meta, self.clock.now_micros(), sized=sized, mark=mark)
        if limited:
            self.lengths.measured(meta, figures.depth, figures.bytes or 0, mark, figures.measured)
        self._store(figures)
        return figures

    def forget(self, application: str, name: str) -> None:
        """Stop watching a deleted queue; its messages stop counting."""
        with self._lock:
            self._entries.pop((application, name), None)
        self.lengths.forget(application, name)

    def limited(self, meta: QueueMeta) -> bool:
        """Whether a post's admission depends on the queue's figures."""
        return bool(queue_flow(meta).max_length) or any(self.stored_quota(meta.application))

    def refresh_pass(self) -> int:
        """One refresher pass: discover queues, measure the stale ones within
        the budget, stalest first. Returns how many were measured."""
        self._discover()
        now = self.clock.now_micros()
        stale_before = now - int(self.max_age * MICROS)
        with self._lock:
            entries = [
                (e.figures.measured if e.figures else 0, k, e.meta)
                for k, e in self._entries.items()
            ]
        limited, stale = [], []
        for item in sorted(entries):
            if self.limited(item[2]):
                limited.append(item[2])
            elif item[0] <= stale_before:
                stale.append(item[2])
        started = time.monotonic()
        measured = 0
        # Each list gets at least one queue per pass: the limited cannot starve the rest.
        for due in (limited, stale):
            for n, meta in enumerate(due):
                if n and time.monotonic() - started >= self.budget:
                    break
                try:
                    self._measure(meta)
                except QueueNotFound:
                    self.forget(meta.application, meta.name)
                measured += 1
        self.last_pass_seconds = time.monotonic() - started
        return measured

    def _measure(self, meta: QueueMeta) -> None:
        """Measure a queue; trim it if it is a ``drop_head`` queue over its length."""
        figures = self.refresh(meta)
        flow = queue_flow(meta)
        if flow.overflow != "drop_head" or not flow.max_length < figures.depth:
            return
        dropped = trim(self.storage, meta, figures.depth, self.clock.now_micros())
        if dropped:
            self.on_dropped(meta, dropped)
            self.refresh(meta)

    # -- sharing between processes --------------------------------------------
    def publish(self) -> None:
        """Write every queue's figures (and :attr:`shared` state) to the
        snapshot file, whole: a reader sees the last pass or the one before."""
        with self._lock:
            entries = {key: (e.meta, e.figures) for key, e in self._entries.items()}
        snapshot = {
            "written": time.time(),
            "entries": entries,
            "unwatched": self.unwatched,
            "last_pass_seconds": self.last_pass_seconds,
            "shared": {name: get() for name, (get, _) in self.shared.items()},
        }
        write_snapshot(self.publish_to, snapshot)

    def _published(self) -> None:
        if self.publish_to is not None:
            self.publish()

    def _follow(self) -> None:
        """Take the published figures if the snapshot changed since last read.

        A queue keeps figures measured here (an operator's refresh) when they
        are newer than the snapshot's (:mod:`queuey.core.snapshot`).
        """
        if self.follow is None:
            return
        read = read_snapshot(self.follow, self._followed)
        if read is None:
            return
        self._followed, snapshot = read
        with self._lock:
            for key in list(self._entries):
                if key not in snapshot["entries"]:
                    del self._entries[key]
            for key, (meta, figures) in snapshot["entries"].items():
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = _Entry(meta)
                mine = entry.figures
                if figures is not None and (mine is None or mine.measured <= figures.measured):
                    entry.meta, entry.figures = meta, figures
            self.unwatched = snapshot["unwatched"]
            self.last_pass_seconds = snapshot["last_pass_seconds"]
            self._discovered = True
        age = max(0.0, time.time() - snapshot["written"])
        for name, value in snapshot["shared"].items():
            if name in self.shared:
                self.shared[name][1](value, age)

    # -- the refresher thread --------------------------------------------------
    def start(self) -> None:
        """Start the refresher thread (once; the app factory starts it)."""
        if self._thread is not None or self.interval <= 0:
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="queuey-overview", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for step in (self.refresh_pass, *self.after_pass, self._published):
                try:
                    step()
                except Exception as exc:  # noqa: BLE001 - the refresher must outlive any failure
                    if time.monotonic() - self._last_error > 60:
                        self._last_error = time.monotonic()
                        log.warning("operators' figures not refreshed: %s", exc)
            self._stop.wait(self.interval)

    # -- inside ----------------------------------------------------------------
    def _discover(self) -> None:
        """List the queues to watch: those flow control depends on first
        (:meth:`limited`), then the others, up to ``max_queues`` in all."""
        limited: list[QueueMeta] = []
        others: list[QueueMeta] = []
        total = 0
        listed: dict[str, list[str]] = {}
        for application in sorted(self.applications()):
            names = listed[application] = []
            for meta in every_queue(self.storage.list_queues, application):
                names.append(meta.name)
                total += 1
                if self.limited(meta):
                    limited.append(meta)
                elif len(others) < self.max_queues:
                    others.append(meta)
        watched = (limited + others)[: self.max_queues]
        seen = {(meta.application, meta.name): meta for meta in watched}
        unwatched = total - len(seen)
        with self._lock:
            for key in list(self._entries):
                if key not in seen:
                    del self._entries[key]
            for key, meta in seen.items():
                entry = self._entries.get(key)
                if entry is None:
                    self._entries[key] = _Entry(meta)
                elif entry.meta.incarnation != meta.incarnation or entry.meta != meta:
                    entry.meta = meta
            self.unwatched = unwatched
            self._discovered = True
        if time.monotonic() - self._swept >= SWEEP_SECONDS:
            self._swept = time.monotonic()
            for application, names in listed.items():
                self.lengths.sweep(application, names, SWEEP_SECONDS)

    def _entry(self, meta: QueueMeta) -> _Entry | None:
        key = (meta.application, meta.name)
        entry = self._entries.get(key)
        if entry is None and len(self._entries) < self.max_queues:
            entry = self._entries[key] = _Entry(meta)
        return entry

    def _store(self, figures: QueueFigures) -> None:
        at = self._minute()
        with self._lock:
            entry = self._entry(figures.meta)
            if entry is None:
                return
            entry.meta = figures.meta
            entry.figures = figures
            minute = self._minute_of(entry, at)
            minute.depth = figures.depth
            minute.in_flight = figures.in_flight

    def _minute(self) -> int:
        seconds = self.clock.now_micros() // MICROS
        return seconds - seconds % 60

    @staticmethod
    def _minute_of(entry: _Entry, at: int) -> Minute:
        if entry.history and entry.history[-1].at == at:
            return entry.history[-1]
        minute = Minute(at)
        entry.history.append(minute)
        return minute

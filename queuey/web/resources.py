"""Route contexts: what a request is about, loaded lazily."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyramid.decorator import reify

from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.storage import MetadataChanges
from queuey.web.params import queue_name


class ApplicationContext:
    """``/queue``: the calling application's collection of queues."""

    def __init__(self, request) -> None:
        self.request = request

    def is_public(self) -> bool:
        return False


class QueueContext:
    """``/queue/{name}...``: one queue of the calling application."""

    def __init__(self, request) -> None:
        self.request = request
        self.name = queue_name(request.matchdict["name"])

    @reify
    def meta(self) -> QueueMeta:
        request = self.request
        app = request.identity.application.name
        return request.registry.queue_cache.get(
            app, self.name, lambda: request.storage.get_queue(app, self.name)
        )

    def is_public(self) -> bool:
        """Whether a caller without the key may read it.

        A missing queue is not public: a caller who may not read private
        queues gets the same 401 for a private queue and for a missing one, so
        it cannot learn which private queues exist (``docs/api.rst``).
        """
        try:
            return self.meta.type == "public"
        except QueueNotFound:
            return False


class QueueCache:
    """Queue metadata for a short while, so a post costs one storage write.

    Changes made through this process (update, purge, delete) run inside
    :meth:`changing`, which drops the entry before and after the storage write;
    each drop bumps a generation, and a load stores what it read only if no
    drop happened while it ran. So once the write returns, nothing read before
    it is cached: a reader that fetched the old incarnation mid-purge cannot
    re-cache it, and a post after the purge returns lands in the new
    incarnation. Changes made through another API node are seen within ``ttl``
    seconds; until then that node may accept a message into a queue just purged
    or deleted elsewhere, which the purge then covers. ``ttl = 0`` turns the
    cache off.

    Server processes on one host that share a store with a ``shared`` counter
    (:meth:`queuey.storage.Storage.metadata_changes`: SQLite's, in shared
    memory) behave as one process: every change raises the counter, and a
    process that sees it moved drops everything it cached, before answering.
    """

    def __init__(
        self,
        ttl: float,
        max_entries: int = 10000,
        now: Callable[[], float] = time.monotonic,
        shared: MetadataChanges | None = None,
    ) -> None:
        self.ttl = ttl
        self.now = now
        self.max_entries = max_entries
        self.shared = shared
        self._entries: dict[tuple[str, str], tuple[float, QueueMeta]] = {}
        self._lock = threading.Lock()
        #: Bumped whenever a change starts or ends anywhere: a load that saw
        #: another value when it began may hold stale metadata.
        self._generation = 0
        self._seen = shared.value() if shared is not None else 0

    def _sync(self) -> None:
        """Drop everything if another process changed a queue (caller holds the lock)."""
        seen = self.shared.value()
        if seen != self._seen:
            self._seen = seen
            self._entries.clear()
            self._generation += 1

    def get(self, application: str, name: str, load: Callable[[], QueueMeta]) -> QueueMeta:
        if self.ttl <= 0:
            return load()
        key = (application, name)
        now = self.now()
        with self._lock:
            if self.shared is not None:
                self._sync()
            entry = self._entries.get(key)
            generation = self._generation
        if entry is not None and entry[0] > now:
            return entry[1]
        meta = load()
        with self._lock:
            if self.shared is not None:
                self._sync()
            if generation == self._generation:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
                self._entries[key] = (now + self.ttl, meta)
        return meta

    def forget(self, application: str, name: str) -> None:
        with self._lock:
            self._entries.pop((application, name), None)
            self._generation += 1
            if self.shared is not None:
                self.shared.bump()  # the next get here drops the rest too

    @contextmanager
    def changing(self, application: str, name: str) -> Iterator[None]:
        """Wrap a storage write that changes the queue's metadata or incarnation."""
        self.forget(application, name)
        try:
            yield
        finally:
            self.forget(application, name)

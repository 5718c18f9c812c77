"""Route contexts: what a request is about, loaded lazily."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pyramid.decorator import reify

from queuey.storage import QueueMeta
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
        return self.meta.type == "public"


class QueueCache:
    """Queue metadata for a short while, so a post costs one storage write.

    Changes made through this process (update, purge, delete) drop the entry at
    once; changes made through another API node are seen within ``ttl`` seconds.
    Until then that node may accept a message into a queue just purged or
    deleted elsewhere, which the purge then covers; DESIGN's consumers read
    metadata through the API, so they see growth within ``ttl`` too.
    ``ttl = 0`` turns the cache off.
    """

    def __init__(
        self, ttl: float, max_entries: int = 10000, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.now = now
        self.max_entries = max_entries
        self._entries: dict[tuple[str, str], tuple[float, QueueMeta]] = {}
        self._lock = threading.Lock()

    def get(self, application: str, name: str, load: Callable[[], QueueMeta]) -> QueueMeta:
        if self.ttl <= 0:
            return load()
        key = (application, name)
        now = self.now()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        meta = load()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (now + self.ttl, meta)
        return meta

    def forget(self, application: str, name: str) -> None:
        with self._lock:
            self._entries.pop((application, name), None)

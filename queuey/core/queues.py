"""A queue's lifecycle, with this node's cache of queue metadata.

:class:`Queues` is every door's one way to create, find, change, purge and
delete a queue: the REST API, the admin pages, the SQS endpoint and its move
tasks, and the work-queue service's dead-letter queues. Each change runs
inside :meth:`QueueCache.changing`, so no door forgets to drop what it
changed from the cache, or drops it before the write it reflects.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from queuey.core.messages import InvalidFields
from queuey.core.quotas import Quotas
from queuey.model import QueueMeta
from queuey.storage import MetadataChanges, Storage

#: Queues asked of ``list_queues`` per call by :func:`every_queue`.
LIST_PAGE = 1000
#: Longest queue name whose default dead-letter queue (``<name>-dead``) is a valid name.
_DEFAULT_DEAD_LETTER_ROOM = 50 - len("-dead")


def every_queue(
    list_queues: Callable[[str, int, str | None], list[QueueMeta]], application: str
) -> Iterable[QueueMeta]:
    """Every queue of ``application`` by name, listed a page at a time
    (``Storage.list_queues``)."""
    after = None
    while True:
        page = list_queues(application, LIST_PAGE, after)
        yield from page
        if len(page) < LIST_PAGE:
            return
        after = page[-1].name


class InvalidQueue(InvalidFields):
    """Queue settings that break a rule across fields: ``errors`` maps the
    field to fix to why."""


def check_queue_settings(
    name: str,
    ttl: int,
    delay: int,
    max_attempts: int,
    dead_letter_queue: str | None,
    changed: set[str],
) -> None:
    """Rules across a queue's settings that a static schema cannot state.

    Each error names a field the caller ``changed`` (the one to fix).
    """
    errors = {}
    if delay > ttl:
        if "delay" in changed:
            errors["delay"] = f"must be at most the ttl ({ttl} s)"
        else:
            errors["ttl"] = f"must be at least the queue's delay ({delay} s)"
    if dead_letter_queue == name:
        errors["dead_letter_queue"] = "must not be the queue itself"
    elif not dead_letter_queue and max_attempts and len(name) > _DEFAULT_DEAD_LETTER_ROOM:
        field = "max_attempts" if "max_attempts" in changed else "dead_letter_queue"
        errors[field] = (
            f"the default dead-letter queue name {name}-dead would be longer than 50 "
            "characters; give dead_letter_queue"
        )
    if errors:
        raise InvalidQueue(errors)


def queue_from(params: Any, application: str, now_micros: int) -> QueueMeta:
    """A new queue of ``application`` from validated ``create_queue`` fields (the
    REST API's and the admin form's), its settings checked
    (:class:`InvalidQueue`); a random 32-hex name when none is given."""
    name = params.queue_name or uuid.uuid4().hex
    check_queue_settings(
        name,
        params.ttl,
        params.delay,
        params.max_attempts,
        params.dead_letter_queue,
        changed={"delay", "max_attempts"},
    )
    return QueueMeta(
        application=application,
        name=name,
        partitions=params.partitions,
        ttl=params.ttl,
        type=params.type,
        consistency=params.consistency,
        created=now_micros,
        visibility_timeout=params.visibility_timeout,
        max_attempts=params.max_attempts,
        dead_letter_queue=params.dead_letter_queue or None,
        delay=params.delay,
    )


class MetadataCache(Protocol):
    """What :class:`Queues` needs of a queue-metadata cache."""

    def get(self, application: str, name: str, load: Callable[[], QueueMeta]) -> QueueMeta: ...

    def changing(self, application: str, name: str) -> AbstractContextManager[None]: ...


class NoCache:
    """Every lookup goes to storage (the command line, Spark, tests)."""

    def get(self, application: str, name: str, load: Callable[[], QueueMeta]) -> QueueMeta:
        return load()

    @contextmanager
    def changing(self, application: str, name: str) -> Iterator[None]:
        yield


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


class Queues:
    """Create, find, change, purge and delete queues, the cache kept right.

    ``quotas`` holds each application's queue limit
    (:meth:`queuey.core.quotas.Quotas.check_new_queue`); without it (the
    command line, Spark, tests) nothing is refused.
    """

    def __init__(
        self,
        storage: Storage,
        cache: MetadataCache | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.storage = storage
        self.cache: MetadataCache = cache or NoCache()
        self.quotas = quotas
        #: Called with the queue's new incarnation after a purge, and with
        #: the queue after a delete (flow control's counts, the metrics).
        self.on_purged: list[Callable[[QueueMeta], None]] = []
        self.on_deleted: list[Callable[[QueueMeta], None]] = []

    def create(self, meta: QueueMeta, *, limited: bool = True) -> QueueMeta:
        """Create a queue for a caller: within its application's queue limit
        (``TooManyQueues``), then stored (``QueueExists`` when the name is
        taken). ``limited=False`` skips the limit, for the dead-letter queues
        the service makes itself: refusing one would leave its source's failed
        messages cycling."""
        if limited and self.quotas is not None:
            self.quotas.check_new_queue(self.storage, meta.application)
        with self.cache.changing(meta.application, meta.name):
            return self.storage.create_queue(meta)

    def get(self, application: str, name: str) -> QueueMeta:
        """The queue's metadata, from the cache while fresh (``QueueNotFound``)."""
        return self.cache.get(application, name, lambda: self.storage.get_queue(application, name))

    def fresh(self, application: str, name: str) -> QueueMeta:
        """The queue's metadata as stored now, for a change that must not act on
        a cached copy (a compare-and-set of its attributes, an existence check)."""
        return self.storage.get_queue(application, name)

    def update(self, application: str, name: str, **changes: Any) -> QueueMeta:
        """Change the queue's settings or attributes (see
        :meth:`queuey.storage.Storage.update_queue`); the updated metadata."""
        with self.cache.changing(application, name):
            return self.storage.update_queue(application, name, **changes)

    def purge(self, queue: QueueMeta) -> None:
        """Drop every message: the queue starts a new incarnation."""
        with self.cache.changing(queue.application, queue.name):
            self.storage.purge_queue(queue.application, queue.name)
        if self.on_purged:
            fresh = self.storage.get_queue(queue.application, queue.name)
            for listener in self.on_purged:
                listener(fresh)

    def delete(self, queue: QueueMeta) -> None:
        with self.cache.changing(queue.application, queue.name):
            self.storage.delete_queue(queue.application, queue.name)
        for listener in self.on_deleted:
            listener(queue)

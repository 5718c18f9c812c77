"""Sources: the live store an executor reads and writes, one per connection per process.

A :class:`Source` is what the Spark code needs from a store, whichever way it is
reached: :class:`StorageSource` builds the storage backend a
:class:`~queuey.spark.connections.StorageConnection` names, :class:`HttpSource`
pages through the HTTP API. :func:`open_source` keeps one source per connection
for the life of the Python worker process, so a Cassandra session is made once
per executor process, never per task, and never travels from the driver.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Protocol

from queuey import ids
from queuey.clock import SYSTEM_CLOCK
from queuey.core.messages import MessageRules
from queuey.core.services import poster_flow
from queuey.core.workqueues import WorkQueues
from queuey.limits import MAX_READ
from queuey.model import Message, MessagePage, NewMessage, QueueMeta, ReadQuery
from queuey.settings import DEFAULTS
from queuey.spark.connections import Connection, HttpConnection, StorageConnection
from queuey.storage import Storage, load_backend


class Source(Protocol):
    """What the Spark code needs from a store, whichever way it is reached.

    Reads take a :class:`~queuey.model.ReadQuery` whose ``partitions`` is the
    one queue partition read (the Spark code never merges partitions).
    """

    def queue(self, application: str, name: str) -> QueueMeta: ...

    def read(self, meta: QueueMeta, query: ReadQuery) -> list[Message]: ...

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> list[int]:
        """Store ``messages``; the timestamps (micros) of the messages answered.

        A message whose ``dedup_id`` was seen is answered with the first one
        stored under it, so its timestamp is older than the put.
        """
        ...

    def scan(self, meta: QueueMeta, query: ReadQuery, page_size: int) -> Iterator[MessagePage]:
        """``query``'s one partition in id order, as pages (see ``Storage.scan_messages``)."""
        ...

    def now_micros(self) -> int: ...

    @property
    def read_delay_micros(self) -> int: ...


def rules_of(connection: StorageConnection) -> MessageRules:
    """The message rules of the service whose settings ``connection`` carries."""
    settings = {**DEFAULTS, **connection.settings_dict()}
    return MessageRules(
        max_ttl=int(settings["queuey.max_ttl"]),
        max_message_size=int(settings["queuey.max_message_size"]),
    )


class StorageSource:
    """A :class:`Source` over a :class:`~queuey.storage.Storage` backend.

    Puts go through the service core's one post
    (:meth:`queuey.core.workqueues.WorkQueues.post`), as the API's do, with
    flow control built from the service's settings
    (:func:`queuey.core.services.poster_flow`: on SQLite in the tables the
    host's servers share). An executor is not a server: it has no metrics,
    long polls or overview to feed, so the post's other side effects are none
    here; an API node's long polls find the messages on their next poll.
    """

    def __init__(self, connection: StorageConnection) -> None:
        settings = connection.settings_dict()
        self.connection = connection
        self.storage: Storage = load_backend(connection.backend, settings, SYSTEM_CLOCK)
        self.work = WorkQueues(
            self.storage,
            SYSTEM_CLOCK,
            rules=rules_of(connection),
            flow=poster_flow({**DEFAULTS, **settings}, self.storage, SYSTEM_CLOCK),
        )
        # Only messages older than now - delay are final (invariant 2); the
        # delay is never shorter than the backend needs, whatever was configured.
        configured = float(settings.get("queuey.read_delay", 0) or 0)
        skew = float(settings.get("queuey.max_clock_skew", 0) or 0)
        needed = self.storage.write_timeout_seconds + skew
        self._read_delay_micros = int(max(configured, needed) * ids.MICROS)

    @property
    def read_delay_micros(self) -> int:
        return self._read_delay_micros

    def now_micros(self) -> int:
        return SYSTEM_CLOCK.now_micros()

    def queue(self, application: str, name: str) -> QueueMeta:
        return self.storage.get_queue(application, name)

    def read(self, meta: QueueMeta, query: ReadQuery) -> list[Message]:
        return self.storage.read_messages(meta, query)

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> list[int]:
        return [m.timestamp for m in self.work.post(meta, messages)]

    def scan(self, meta: QueueMeta, query: ReadQuery, page_size: int) -> Iterator[MessagePage]:
        return served.count(self.storage.scan_messages(meta, query, page_size))

    def close(self) -> None:
        self.storage.close()


class HttpSource:
    """A :class:`Source` over the HTTP API.

    The service applies its own read delay and expiry clock, so ``now_micros``
    and ``until_micros`` bounds are enforced here only by filtering what it
    returns.
    """

    read_delay_micros = 0

    def __init__(self, connection: HttpConnection) -> None:
        # The client library is loaded only by processes that use the HTTP API.
        from queuey.client.http import QueueyClient

        self.connection = connection
        self.client = QueueyClient(
            list(connection.urls),
            connection.application,
            connection.key,
            timeout=connection.timeout,
        )

    def now_micros(self) -> int:
        return SYSTEM_CLOCK.now_micros()

    def queue(self, application: str, name: str) -> QueueMeta:
        info = self.client.queue_info(name)
        created = ids.seconds_to_micros(info.created) if info.created else 0
        return QueueMeta(
            application=application,
            name=info.name,
            partitions=info.partitions,
            ttl=int(info.ttl or QueueMeta.ttl),
            type=info.type,  # type: ignore[arg-type]
            created=created,
            incarnation="",
        )

    def read(self, meta: QueueMeta, query: ReadQuery) -> list[Message]:
        out: list[Message] = []
        after_micros, until_micros = query.after_micros, query.until_micros
        since = query.after_id.hex if query.after_id is not None else None
        since_ts = (
            ids.micros_to_seconds(after_micros)
            if after_micros is not None and since is None
            else None
        )
        while len(out) < query.limit:
            want = min(MAX_READ, query.limit - len(out))
            page = self.client.read(
                meta.name,
                since=since,
                since_timestamp=since_ts,
                limit=want,
                order=query.order,
                partitions=list(query.partitions),
            )
            for received in page:
                message_id = ids.parse_id(received.message_id)
                micros = ids.micros_of(message_id)
                if after_micros is not None and micros <= after_micros:
                    continue
                if until_micros is not None and micros >= until_micros:
                    if query.order == "ascending":
                        return out
                    continue
                body = json.dumps(received.body, separators=(",", ":"), ensure_ascii=False)
                out.append(Message(message_id, micros, received.partition, body, 0))
            if len(page) < want or query.order != "ascending":
                # Descending pages cannot be continued with ``since``; callers
                # only ask for short descending reads.
                return out
            since, since_ts = page[-1].message_id, None
        return out

    def scan(self, meta: QueueMeta, query: ReadQuery, page_size: int) -> Iterator[MessagePage]:
        (partition,) = query.partitions
        page: list[Message] = []
        for message in read_forward(self, meta, query, page_size):
            page.append(message)
            if len(page) >= page_size:
                yield served.add(MessagePage.of(partition, page))
                page = []
        if page:
            yield served.add(MessagePage.of(partition, page))

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> list[int]:
        from queuey.client.models import OutgoingMessage

        batch = [
            OutgoingMessage(
                body=json.loads(m.body),
                partition=m.partition,
                ttl=m.ttl,
                dedup_id=m.dedup_id,
                attributes=m.attributes,
            )
            for m in messages
        ]
        return [
            ids.micros_of(ids.parse_id(p.message_id))
            for p in self.client.post_batch(meta.name, batch)
        ]

    def close(self) -> None:
        self.client.close()


def read_forward(
    source: Source,
    meta: QueueMeta,
    query: ReadQuery,
    page_size: int,
    limit: int | None = None,
) -> Iterator[Message]:
    """The messages ``query`` matches in id order, ``page_size`` a read.

    Each page continues after the last id of the one before, until a short
    page or, when ``limit`` is given, that many messages. ``query.limit`` and
    ``query.order`` are ignored.
    """
    query = replace(query, order="ascending")
    count = 0
    while limit is None or count < limit:
        want = page_size if limit is None else min(page_size, limit - count)
        page = source.read(meta, replace(query, limit=want))
        yield from page
        count += len(page)
        if len(page) < want:
            return
        query = replace(query, after_id=page[-1].id)


class Served:
    """What the store sent to this process's scans: rows and bytes.

    Per process (each Spark Python worker keeps its own); tests and tools read
    it to prove a pushed-down filter made the store send less.
    """

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def add(self, page: MessagePage) -> MessagePage:
        with self._lock:
            self.rows += len(page)
            self.bytes += page.served_bytes
        return page

    def count(self, pages: Iterator[MessagePage]) -> Iterator[MessagePage]:
        for page in pages:
            yield self.add(page)

    def reset(self) -> None:
        with self._lock:
            self.rows = self.bytes = 0


#: Everything scanned by this process.
served = Served()


# One source per connection per process: Spark reuses Python workers across
# tasks, so an executor connects once. The pid check drops connections
# inherited through fork, which must never be used by the child.
_sources: dict[Connection, Source] = {}
_sources_pid = os.getpid()
_sources_lock = threading.Lock()
#: (pid, connection) for every source this process opened.
opened_sources: list[tuple[int, Connection]] = []


def open_source(connection: Connection) -> Source:
    """The process-wide source for ``connection``, created on first use."""
    global _sources_pid
    with _sources_lock:
        if _sources_pid != os.getpid():
            _sources.clear()
            opened_sources.clear()
            _sources_pid = os.getpid()
        source = _sources.get(connection)
        if source is None:
            if isinstance(connection, StorageConnection):
                source = StorageSource(connection)
            else:
                source = HttpSource(connection)
            _sources[connection] = source
            opened_sources.append((os.getpid(), connection))
        return source


def close_sources() -> None:
    """Close every source of this process (tests, tools)."""
    with _sources_lock:
        for source in _sources.values():
            source.close()  # type: ignore[attr-defined]
        _sources.clear()

"""Consumer groups as operators see them: members, partition owners and lag.

Groups live in ZooKeeper, written by the client library
(:mod:`queuey.client.consumergroup` documents the layout). The service only reads
them: :class:`Groups` lists every group under the configured root, and for
each (queue, partition) the group owns or has a checkpoint for, computes the
lag against the store: how many live messages follow the checkpoint (counted
up to :data:`LAG_CAP`, a lower bound beyond) and how old the first of them is.

ZooKeeper does not record which application a group consumes for. A member
started by the worker says so in its member node (``"application"``); for a
group none of whose members says, the queues it names are matched against the
application's queues.

Reading is done by :meth:`Groups.refresh`, which the operators' overview calls
in the background; readers get the cached result (refreshed on demand when
older than ``max_age``), so a scrape or a page view never walks ZooKeeper.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from queuey.clock import Clock
from queuey.core.queues import every_queue
from queuey.errors import QueueNotFound, ServiceError
from queuey.ids import MICROS
from queuey.model import QueueMeta, ReadQuery
from queuey.storage import Storage

log = logging.getLogger(__name__)

#: Messages counted after a checkpoint (one read); a lag of this many is a
#: lower bound, and ``lag_seconds`` tells how far behind the group is.
LAG_CAP = 1000
#: Most groups read per refresh, and most (queue, partition) pairs in all of
#: them: these bound a refresh's work and the metrics' label sets.
MAX_GROUPS = 200
MAX_PARTITIONS = 10_000


class GroupsUnavailable(Exception):
    """ZooKeeper did not answer."""


@dataclass(frozen=True)
class Member:
    member: str
    host: str
    pid: int
    started: float  # epoch seconds
    application: str | None = None


@dataclass(frozen=True)
class GroupPartition:
    """One queue partition of a group.

    ``owner``: the member processing it now (``None`` while unowned).
    ``checkpoint_id``/``checkpoint_time``: the last message processed.
    ``lag_messages``: live messages after the checkpoint (``lag_capped``: at
    least that many); ``lag_seconds``: age of the oldest of them (0 when none).
    Both ``None`` when the queue is unknown to the store.
    """

    queue: str
    partition: int
    owner: str | None
    checkpoint_id: str | None
    checkpoint_time: float | None
    lag_messages: int | None
    lag_capped: bool
    lag_seconds: float | None


@dataclass(frozen=True)
class GroupFigures:
    name: str
    members: tuple[Member, ...]
    partitions: tuple[GroupPartition, ...]
    application: str | None  # the application it was matched to

    @property
    def lag_messages(self) -> int:
        return sum(p.lag_messages or 0 for p in self.partitions)


@dataclass(frozen=True)
class _Raw:
    """A group as read from ZooKeeper, before lag."""

    name: str
    members: tuple[Member, ...]
    owners: dict[tuple[str, int], str]
    checkpoints: dict[tuple[str, int], tuple[str, float]]


def _json(data: bytes) -> dict:
    try:
        parsed = json.loads(data or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _member(data: bytes, fallback: str) -> Member:
    parsed = _json(data)
    try:
        pid = int(parsed.get("pid", 0))
        started = float(parsed.get("started", 0.0))
    except (TypeError, ValueError, OverflowError):  # a node another process wrote
        pid, started = 0, 0.0
    application = parsed.get("application")
    return Member(
        member=str(parsed.get("member", fallback)),
        host=str(parsed.get("host", "")),
        pid=pid,
        started=started,
        application=application if isinstance(application, str) else None,
    )


class Groups:
    """Every consumer group under ``root`` of the ZooKeeper ensemble ``hosts``."""

    def __init__(
        self,
        hosts: str,
        root: str,
        storage: Storage,
        clock: Clock,
        applications: Callable[[], Iterable[str]],
        *,
        max_age: float = 30.0,
        timeout: float = 3.0,
    ) -> None:
        self.hosts = hosts
        self.root = root.rstrip("/") or "/"
        self.storage = storage
        self.clock = clock
        self.applications = applications
        self.max_age = max_age
        self.timeout = timeout
        self._zk: KazooClient | None = None
        self._zk_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._found: dict[str, list[GroupFigures]] = {}
        self._refreshed: float | None = None  # monotonic
        self._room = MAX_PARTITIONS  # (queue, partition) pairs left in this refresh

    # -- reading -----------------------------------------------------------------
    def for_application(self, application: str) -> list[GroupFigures]:
        """The application's groups by name (refreshed first when stale).

        Raises :class:`GroupsUnavailable` when ZooKeeper does not answer and
        nothing was read before."""
        try:
            self.refresh_if_stale()
        except GroupsUnavailable:
            if self._refreshed is None:
                raise
        return list(self._found.get(application, []))

    def cached(self) -> list[GroupFigures]:
        """Every group matched to an application, as last read (for metrics)."""
        return [g for groups in self._found.values() for g in groups]

    def snapshot(self) -> dict[str, list[GroupFigures]]:
        """The groups as last read, to publish to other processes."""
        return self._found

    def adopt(self, found: dict[str, list[GroupFigures]], age: float) -> None:
        """Take groups another process read ``age`` seconds ago."""
        if self._refreshed is None or time.monotonic() - self._refreshed > age:
            self._found = found
            self._refreshed = time.monotonic() - age

    def refresh_if_stale(self) -> None:
        """:meth:`refresh` when the last one is older than ``max_age``."""
        if self._refreshed is None or time.monotonic() - self._refreshed > self.max_age:
            self.refresh()

    def refresh(self) -> None:
        """Read every group from ZooKeeper and compute its lag."""
        with self._refresh_lock:
            raw = self._read_all()
            queues = self._queues_by_name()
            found: dict[str, list[GroupFigures]] = {}
            self._room = MAX_PARTITIONS
            for group in raw:
                application = self._application_of(group, queues)
                if application is None:
                    continue
                found.setdefault(application, []).append(
                    self._figures(group, application, queues[application])
                )
            self._found = found
            self._refreshed = time.monotonic()

    def close(self) -> None:
        with self._zk_lock:
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    # -- ZooKeeper ---------------------------------------------------------------
    def _client(self) -> KazooClient:
        with self._zk_lock:
            if self._zk is None:
                client = KazooClient(
                    hosts=self.hosts,
                    timeout=self.timeout,
                    connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
                    read_only=True,
                )
                try:
                    client.start(timeout=self.timeout)
                except KazooTimeoutError as exc:
                    client.stop()
                    client.close()
                    raise GroupsUnavailable("no ZooKeeper answered") from exc
                self._zk = client
            if self._zk.state != KazooState.CONNECTED:
                raise GroupsUnavailable(f"ZooKeeper connection {self._zk.state.lower()}")
            return self._zk

    def _read_all(self) -> list[_Raw]:
        zk = self._client()
        try:
            try:
                names = sorted(zk.get_children(self.root))[:MAX_GROUPS]
            except NoNodeError:
                return []
            return [self._read_group(zk, name) for name in names]
        except KazooException as exc:
            raise GroupsUnavailable(str(exc) or type(exc).__name__) from exc

    def _read_group(self, zk: KazooClient, name: str) -> _Raw:
        base = f"{self.root}/{name}"
        members = []
        for child in sorted(self._children(zk, f"{base}/members")):
            with contextlib.suppress(NoNodeError):
                data, _ = zk.get(f"{base}/members/{child}")
                members.append(_member(data, child))
        owners: dict[tuple[str, int], str] = {}
        checkpoints: dict[tuple[str, int], tuple[str, float]] = {}
        for kind in ("owners", "checkpoints"):
            for queue in sorted(self._children(zk, f"{base}/{kind}")):
                for child in self._children(zk, f"{base}/{kind}/{queue}"):
                    if not child.isdigit() or len(owners) + len(checkpoints) >= 2 * MAX_PARTITIONS:
                        continue
                    with contextlib.suppress(NoNodeError):
                        data, _ = zk.get(f"{base}/{kind}/{queue}/{child}")
                        parsed = _json(data)
                        key = (queue, int(child))
                        if kind == "owners":
                            owners[key] = str(parsed.get("member", ""))
                        elif "message_id" in parsed:
                            try:
                                checkpoints[key] = (
                                    str(parsed["message_id"]),
                                    float(parsed.get("timestamp", 0.0)),
                                )
                            except (TypeError, ValueError):
                                continue
        return _Raw(name, tuple(members), owners, checkpoints)

    @staticmethod
    def _children(zk: KazooClient, path: str) -> list[str]:
        try:
            return zk.get_children(path)
        except NoNodeError:
            return []

    # -- matching and lag --------------------------------------------------------
    def _queues_by_name(self) -> dict[str, dict[str, QueueMeta]]:
        return {
            application: {
                m.name: m
                for m in itertools.islice(
                    every_queue(self.storage.list_queues, application), 100_000
                )
            }
            for application in sorted(self.applications())
        }

    @staticmethod
    def _application_of(group: _Raw, queues: dict[str, dict[str, QueueMeta]]) -> str | None:
        declared = {m.application for m in group.members if m.application}
        for application in sorted(declared):
            if application in queues:
                return application
        if declared:
            return None
        named = {queue for queue, _ in (*group.owners, *group.checkpoints)}
        for application, metas in sorted(queues.items()):
            if named & metas.keys():
                return application
        return None

    def _figures(self, group: _Raw, application: str, metas: dict[str, QueueMeta]) -> GroupFigures:
        keys = set(group.owners) | set(group.checkpoints)
        for queue in {queue for queue, _ in keys}:
            meta = metas.get(queue)
            if meta is not None:  # every partition of a consumed queue has a lag
                keys.update((queue, p) for p in meta.partition_numbers)
        partitions = []
        kept = sorted(keys)[: max(0, self._room)]
        self._room -= len(kept)
        for queue, partition in kept:
            checkpoint = group.checkpoints.get((queue, partition))
            lag = self._lag(metas.get(queue), partition, checkpoint)
            partitions.append(
                GroupPartition(
                    queue=queue,
                    partition=partition,
                    owner=group.owners.get((queue, partition)),
                    checkpoint_id=checkpoint[0] if checkpoint else None,
                    checkpoint_time=checkpoint[1] if checkpoint else None,
                    lag_messages=lag[0],
                    lag_capped=lag[1],
                    lag_seconds=lag[2],
                )
            )
        return GroupFigures(group.name, group.members, tuple(partitions), application)

    def _lag(
        self, meta: QueueMeta | None, partition: int, checkpoint: tuple[str, float] | None
    ) -> tuple[int | None, bool, float | None]:
        if meta is None or partition > meta.partitions:
            return None, False, None
        after = None
        if checkpoint is not None:
            try:
                after = uuid.UUID(hex=checkpoint[0])
            except ValueError:
                return None, False, None
        now = self.clock.now_micros()
        try:
            pending = self.storage.read_messages(
                meta,
                ReadQuery(
                    partitions=[partition],
                    now_micros=now,
                    limit=LAG_CAP,
                    order="ascending",
                    after_id=after,
                ),
            )
        except (QueueNotFound, ServiceError):
            return None, False, None
        if not pending:
            return 0, False, 0.0
        age = max(0.0, (now - pending[0].timestamp) / MICROS)
        return len(pending), len(pending) >= LAG_CAP, age

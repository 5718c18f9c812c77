"""Consumer groups on ZooKeeper: membership, partition ownership, checkpoints.

Layout under ``<root>/<group>/`` (the root defaults to ``/queuey/groups``)::

    members/<member-id>               ephemeral  {"member", "host", "pid", "started"}
    owners/<queue>/<partition>        ephemeral  {"member", "session"}
    checkpoints/<queue>/<partition>   persistent {"message_id", "timestamp", "member", "committed"}

Every member computes the same assignment from the sorted member list and
the sorted list of (queue, partition) (:func:`queuey.client.assignment.assign`).
Assignment is only a wish; *ownership* is the ephemeral owner node. A member
processes a partition only after it created that node, and releases a
partition it should no longer have by stopping the work on it, committing the
work that finished and deleting the node. A member that wants a partition
whose owner node still exists sets a watch and waits for it to go. So at any
moment a partition has at most one owner, whatever the members believe.

A member whose connection to ZooKeeper is suspended pauses at once: it hands
out no more work and commits nothing. It also pauses when ZooKeeper has not
answered it for two thirds of ``session_timeout`` (a heartbeat thread asks
every sixth), even before kazoo notices: ZooKeeper expires a session only a
whole ``session_timeout`` after it last heard from the member, so the member
has stopped before its owner nodes vanish and another member may take them.
After a session is lost the member builds a new ZooKeeper client and joins
again, with nothing owned.

Rebalancing is driven by watches (membership changes, released owner nodes)
and by a periodic resync, both handled by one coordinator thread, so kazoo's
own threads never block. ``rebalance_timeout`` bounds how long that takes
after members or partitions change; after a member *dies* (its session must
expire first) ownership settles within ``session_timeout + rebalance_timeout``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import logging
import os
import queue
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import KazooRetry

from queuey import ids
from queuey.client.assignment import Partition, assign
from queuey.client.http import NotFound, QueueInfo, QueueyClient, QueueyError

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/queuey/groups"
FAILED_SUFFIX = "-failed"


class GroupError(RuntimeError):
    """The group could not be joined or left."""


# --------------------------------------------------------------- checkpoints


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The last message of a partition whose processing finished."""

    message_id: str
    timestamp: float

    @classmethod
    def for_id(cls, message_id: str) -> Checkpoint:
        """A checkpoint known only by id (e.g. from the HTTP API); the id holds the time."""
        micros = ids.micros_of(ids.parse_id(message_id))
        return cls(ids.parse_id(message_id).hex, ids.micros_to_seconds(micros))

    def to_bytes(self, member: str) -> bytes:
        return json.dumps(
            {
                "message_id": self.message_id,
                "timestamp": self.timestamp,
                "member": member,
                "committed": time.time(),
            }
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint | None:
        if not data:
            return None
        try:
            parsed = json.loads(data)
            return cls(str(parsed["message_id"]), float(parsed["timestamp"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring an unreadable checkpoint: %r", data[:200])
            return None


# ----------------------------------------------------------------- discovery


class QueueDiscovery:
    """The (queue, partition) pairs a group consumes, asked of the HTTP API.

    ``queues`` are names or shell patterns (``crash-*``, ``*``). Plain names are
    looked up with ``queue_info`` (a queue that does not exist yet has no
    partitions and appears once created); patterns list the application's
    queues. Names matching ``exclude`` (by default failure queues) are skipped.
    Partitions added to a queue later show up at the next call.
    """

    def __init__(
        self,
        client: QueueyClient,
        queues: Sequence[str],
        exclude: Sequence[str] = ("*" + FAILED_SUFFIX,),
    ) -> None:
        if not queues:
            raise ValueError("a consumer group needs at least one queue name or pattern")
        self.client = client
        self.names = [q for q in queues if not _is_pattern(q)]
        self.patterns = [q for q in queues if _is_pattern(q)]
        self.exclude = list(exclude)

    def __call__(self) -> list[Partition]:
        found: dict[str, int] = {}
        for name in self.names:
            try:
                found[name] = self.client.queue_info(name).partitions
            except NotFound:
                log.debug("queue %s does not exist (yet)", name)
        if self.patterns:
            for info in self.client.iter_queues():
                assert isinstance(info, QueueInfo)
                if any(fnmatch.fnmatchcase(info.name, p) for p in self.patterns):
                    found[info.name] = info.partitions
        return sorted(
            (name, p)
            for name, count in found.items()
            if not any(fnmatch.fnmatchcase(name, x) for x in self.exclude)
            for p in range(1, count + 1)
        )


def _is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


# -------------------------------------------------------------------- leases


class PartitionLease:
    """A partition this member owns, processed by the worker one batch at a time.

    Hold the lease (``with lease:``) while processing a batch: the group waits
    for it before it releases the partition. Check :meth:`valid` before each
    message; it turns false as soon as the partition is being taken away or
    the connection to ZooKeeper is suspended or lost. ``position`` is how far
    processing got (in memory); ``committed`` what ZooKeeper holds.
    """

    def __init__(
        self,
        group: ConsumerGroup,
        key: Partition,
        session: int,
        committed: Checkpoint | None,
        version: int | None,
    ) -> None:
        self.group = group
        self.key = key
        self.queue, self.partition = key
        self.session = session
        self.committed = committed
        self.position = committed
        self.active = True
        self._version = version  # of the checkpoint node; None while it does not exist
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<PartitionLease {self.queue}:{self.partition} active={self.active}>"

    def __enter__(self) -> PartitionLease:
        self._lock.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

    def valid(self) -> bool:
        """True while this member may process the partition."""
        return self.active and self.group._may_process(self.session)

    def advance(self, message_id: str, timestamp: float) -> None:
        """Record that processing finished up to this message (not yet committed)."""
        self.position = Checkpoint(message_id, timestamp)

    @property
    def dirty(self) -> bool:
        return self.position is not None and self.position != self.committed

    def commit(self) -> bool:
        """Write ``position`` to ZooKeeper; False if this member may not (any more).

        The write is a compare-and-set on the checkpoint node's version, so a
        member that lost the partition cannot overwrite its new owner's
        checkpoint.
        """
        with self._lock:
            if not self.dirty:
                return True
            if not self.valid():
                return False
            return self._commit_held()

    def _commit_held(self) -> bool:
        """Commit ``position``; the caller holds the lease and checked the session."""
        position = self.position
        assert position is not None
        try:
            try:
                self._write(position)
            except BadVersionError:
                if not self._owner_is_us():
                    self.active = False
                    log.warning("%s:%s is owned elsewhere; not committing", *self.key)
                    return False
                _, stat = self.group.zk.get(self.group._checkpoint_path(self.key))
                self._version = stat.version
                self._write(position)
        except KazooException as exc:
            log.warning("commit of %s:%s failed: %s", *self.key, exc.__class__.__name__)
            return False
        self.committed = position
        self.group._mirror(self.key, position)
        return True

    def _write(self, position: Checkpoint) -> None:
        zk = self.group.zk
        path = self.group._checkpoint_path(self.key)
        data = position.to_bytes(self.group.member_id)
        if self._version is None:
            try:
                zk.create(path, data, makepath=True)
                self._version = 0
                return
            except NodeExistsError:
                raise BadVersionError() from None
        self._version = zk.set(path, data, version=self._version).version

    def _owner_is_us(self) -> bool:
        try:
            _, stat = self.group.zk.get(self.group._owner_path(self.key))
        except NoNodeError:
            return False
        return stat.ephemeralOwner == self.session


# --------------------------------------------------------------------- group


@dataclasses.dataclass
class GroupStats:
    """What the group measured: how long rebalances took, and how many ran."""

    rebalances: int = 0
    last_rebalance_seconds: float | None = None
    max_rebalance_seconds: float = 0.0
    sessions: int = 0


class ConsumerGroup:
    """One member of a consumer group.

    ``hosts``: the ZooKeeper connection string (may end in a chroot,
    ``"zk1:2181,zk2:2181/queuey"``). ``discover``: returns the (queue,
    partition) pairs the group consumes; called every ``discovery_interval``
    seconds (see :class:`QueueDiscovery`). ``mirror``: an optional
    ``(QueueyClient, consumer name)`` to copy checkpoints to the HTTP
    checkpoint API and to read them from there when ZooKeeper has none.
    """

    def __init__(
        self,
        hosts: str,
        group: str,
        discover: Callable[[], Sequence[Partition]],
        *,
        root: str = DEFAULT_ROOT,
        session_timeout: float = 10.0,
        rebalance_timeout: float = 10.0,
        discovery_interval: float = 5.0,
        member_id: str | None = None,
        mirror: tuple[QueueyClient, str] | None = None,
        connect_timeout: float = 30.0,
    ) -> None:
        if not group or "/" in group:
            raise ValueError(f"bad group name {group!r}")
        self.hosts = hosts
        self.group = group
        self.discover = discover
        self.root = root.rstrip("/")
        self.session_timeout = session_timeout
        self.rebalance_timeout = rebalance_timeout
        self.discovery_interval = discovery_interval
        self.member_id = member_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.mirror = mirror
        self.connect_timeout = connect_timeout
        self.base = f"{self.root}/{group}"
        self.stats = GroupStats()

        self.zk: KazooClient | None = None  # type: ignore[assignment]
        self._generation = 0
        self._session: int | None = None  # session id the current leases belong to
        self._running = threading.Event()  # set while connected and not suspended
        self._stopping = threading.Event()
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._leases: dict[Partition, PartitionLease] = {}
        self._leases_lock = threading.Lock()
        self._changed = threading.Condition()
        self._partitions: list[Partition] = []
        self._members: list[str] = []
        self._desired: set[Partition] = set()
        self._joined = False
        self._unsettled_since: float | None = None
        self._waiting_warned = False
        self._coordinator: threading.Thread | None = None
        self._discoverer: threading.Thread | None = None
        self._resync_interval = max(0.2, min(2.0, rebalance_timeout / 5))
        # The session is alive for at least session_timeout after the server last
        # heard from us; we stop trusting it well before that (see _heartbeat).
        self._confirmed = 0.0
        self._fresh_for = session_timeout * 2 / 3
        self._heartbeater: threading.Thread | None = None

    # ------------------------------------------------------------ public

    def start(self, timeout: float | None = None) -> None:
        """Connect, discover partitions and join; returns once joined."""
        self._refresh_partitions()
        self._connect(timeout if timeout is not None else self.connect_timeout)
        self._coordinator = threading.Thread(
            target=self._coordinate, name=f"queuey-group-{self.group}", daemon=True
        )
        self._coordinator.start()
        self._discoverer = threading.Thread(
            target=self._discover_loop, name=f"queuey-discovery-{self.group}", daemon=True
        )
        self._discoverer.start()
        self._heartbeater = threading.Thread(
            target=self._heartbeat, name=f"queuey-heartbeat-{self.group}", daemon=True
        )
        self._heartbeater.start()
        self._events.put(("reconcile", None))

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group: finish held batches, commit, release every partition."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._events.put(("stop", None))
        if self._coordinator is not None:
            self._coordinator.join(timeout)
        for thread in (self._discoverer, self._heartbeater):
            if thread is not None:
                thread.join(timeout)
        self._notify()

    def leases(self) -> list[PartitionLease]:
        """The partitions this member may process now, sorted."""
        if not self._running.is_set():
            return []
        with self._leases_lock:
            return [lease for _, lease in sorted(self._leases.items()) if lease.valid()]

    def owned(self) -> list[Partition]:
        """The partitions whose owner node this member holds (released or not yet)."""
        with self._leases_lock:
            return sorted(self._leases)

    @property
    def members(self) -> list[str]:
        return list(self._members)

    @property
    def partitions(self) -> list[Partition]:
        return list(self._partitions)

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def settled(self) -> bool:
        """True when this member owns exactly what the assignment gives it."""
        with self._leases_lock:
            owned = {k for k, lease in self._leases.items() if lease.active}
        return self._joined and self._running.is_set() and owned == self._desired

    def wait_for_change(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking early when ownership changes."""
        with self._changed:
            self._changed.wait(timeout)

    def read_checkpoints(self, queue_name: str) -> dict[int, Checkpoint]:
        """Every partition's committed checkpoint for a queue, from ZooKeeper."""
        path = f"{self.base}/checkpoints/{queue_name}"
        found = {}
        try:
            children = self.zk.get_children(path)
        except NoNodeError:
            return {}
        for child in children:
            with contextlib.suppress(NoNodeError):
                data, _ = self.zk.get(f"{path}/{child}")
                cp = Checkpoint.from_bytes(data)
                if cp is not None:
                    found[int(child)] = cp
        return found

    # ------------------------------------------------------------ paths

    def _owner_path(self, key: Partition) -> str:
        return f"{self.base}/owners/{key[0]}/{key[1]}"

    def _checkpoint_path(self, key: Partition) -> str:
        return f"{self.base}/checkpoints/{key[0]}/{key[1]}"

    @property
    def _member_path(self) -> str:
        return f"{self.base}/members/{self.member_id}"

    # ------------------------------------------------------- connection

    def _may_process(self, session: int) -> bool:
        return (
            self._running.is_set()
            and self._session == session
            and not self._stopping.is_set()
            and time.monotonic() - self._confirmed < self._fresh_for
        )

    def _connect(self, timeout: float) -> None:
        """Build a new ZooKeeper client and session (used at start and after LOST)."""
        self._generation += 1
        generation = self._generation
        zk = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        )
        zk.add_listener(lambda state: self._on_state(generation, state))
        try:
            zk.start(timeout=timeout)
        except Exception:
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()
            raise
        old, self.zk = self.zk, zk
        if old is not None:
            self._close(old)
        self._session = zk.client_id[0]
        self._confirmed = time.monotonic()
        self.stats.sessions += 1
        self._joined = False
        for sub in ("members", "owners", "checkpoints"):
            zk.ensure_path(f"{self.base}/{sub}")
        ChildrenWatch(zk, f"{self.base}/members", self._on_members)
        self._running.set()
        log.info(
            "group %s: member %s connected (session %#x)", self.group, self.member_id, self._session
        )

    @staticmethod
    def _close(zk: KazooClient) -> None:
        with contextlib.suppress(Exception):
            zk.stop()
        with contextlib.suppress(Exception):
            zk.close()

    def _on_state(self, generation: int, state: str) -> None:
        """kazoo's listener: must not block, so it only flips flags and queues."""
        if generation != self._generation or self._stopping.is_set():
            return
        if state == KazooState.SUSPENDED:
            self._running.clear()
            log.warning("group %s: ZooKeeper connection suspended; pausing", self.group)
        elif state == KazooState.LOST:
            self._running.clear()
            log.warning("group %s: ZooKeeper session lost", self.group)
        elif state == KazooState.CONNECTED:
            self._confirmed = time.monotonic()  # the server just accepted the session
        self._events.put(("state", (generation, state)))
        self._notify()

    def _on_members(self, children: list[str]) -> bool | None:
        self._events.put(("reconcile", None))
        return False if self._stopping.is_set() else None

    def _on_owner_event(self, event: object) -> None:
        self._events.put(("reconcile", None))

    def _heartbeat(self) -> None:
        """Confirm the session is alive every sixth of the session timeout.

        kazoo notices a dead connection only by an unanswered *ping*, and every
        request counts as a ping, so a member busy with ZooKeeper could go on
        long after its session expired. Processing is therefore allowed only
        within two thirds of the session timeout after the send time of the
        last request ZooKeeper answered: the server, which heard that request
        after we sent it, cannot have expired the session yet. One request at
        a time, so this never hides a dead connection from kazoo for long.
        """
        interval = self.session_timeout / 6
        while not self._stopping.wait(interval):
            zk, generation = self.zk, self._generation
            if zk is None or not zk.connected:
                continue
            sent = time.monotonic()
            try:
                zk.exists_async(self.base).get(timeout=self.session_timeout)
            except Exception:  # noqa: BLE001 - any failure just leaves the session unconfirmed
                continue
            if generation == self._generation:
                self._confirmed = max(self._confirmed, sent)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------- coordinator

    def _coordinate(self) -> None:
        next_resync = time.monotonic() + self._resync_interval
        retry_delay = 0.1
        while True:
            timeout = max(0.0, next_resync - time.monotonic())
            try:
                kind, payload = self._events.get(timeout=timeout)
                events = [(kind, payload)]
            except queue.Empty:
                events = [("reconcile", None)]
            while True:  # coalesce whatever piled up
                try:
                    events.append(self._events.get_nowait())
                except queue.Empty:
                    break
            if any(kind == "stop" for kind, _ in events):
                self._leave()
                return
            try:
                for kind, payload in events:
                    if kind == "state":
                        self._handle_state(*payload)
                self._reconcile()
                retry_delay = 0.1
                next_resync = time.monotonic() + self._resync_interval
            except KazooException as exc:
                log.warning(
                    "group %s: coordination step failed (%s); retrying",
                    self.group,
                    exc.__class__.__name__,
                )
                next_resync = time.monotonic() + retry_delay
                retry_delay = min(retry_delay * 2, self._resync_interval)
            except Exception:
                log.exception("group %s: unexpected error in the coordinator", self.group)
                next_resync = time.monotonic() + self._resync_interval

    def _handle_state(self, generation: int, state: str) -> None:
        if generation != self._generation:
            return
        zk = self.zk
        if state == KazooState.LOST:
            self._drop_all_leases()
            self._rebuild()
        elif state == KazooState.CONNECTED:
            if zk.client_id and zk.client_id[0] != self._session:
                # kazoo made a new session by itself: ours is gone with its ephemerals
                self._drop_all_leases()
                self._rebuild()
            elif not self._running.is_set():
                log.info("group %s: reconnected within the session; resuming", self.group)
                self._running.set()
                self._notify()

    def _rebuild(self) -> None:
        delay = 0.2
        while not self._stopping.is_set():
            try:
                self._connect(self.connect_timeout)
                log.info("group %s: rejoining with a new session", self.group)
                return
            except Exception as exc:  # noqa: BLE001 - keep trying until told to stop
                log.warning(
                    "group %s: reconnecting failed (%s); retrying in %.1fs", self.group, exc, delay
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)

    def _drop_all_leases(self) -> None:
        with self._leases_lock:
            for lease in self._leases.values():
                lease.active = False
            self._leases.clear()
        self._joined = False
        self._notify()

    def _join(self) -> None:
        zk = self.zk
        data = json.dumps(
            {
                "member": self.member_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": time.time(),
            }
        ).encode()
        try:
            zk.create(self._member_path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = zk.get(self._member_path)
            if stat.ephemeralOwner != self._session:
                # Our own node from an earlier session of this process.
                zk.delete(self._member_path)
                zk.create(self._member_path, data, ephemeral=True, makepath=True)
        self._joined = True
        log.info("group %s: joined as %s", self.group, self.member_id)

    def _reconcile(self) -> None:
        if self._stopping.is_set() or not self._running.is_set():
            return
        zk = self.zk
        if not self._joined:
            self._join()
        members = sorted(zk.get_children(f"{self.base}/members"))
        if self.member_id not in members:
            log.warning("group %s: our member node vanished; joining again", self.group)
            self._joined = False
            self._join()
            members = sorted(zk.get_children(f"{self.base}/members"))
        partitions = list(self._partitions)
        desired = set(assign(members, partitions).get(self.member_id, []))
        changed = members != self._members or desired != self._desired
        self._members = members
        self._desired = desired
        if changed and self._unsettled_since is None:
            self._unsettled_since = time.monotonic()
            self._waiting_warned = False
        with self._leases_lock:
            owned = dict(self._leases)
        for key, lease in owned.items():
            if key not in desired:
                self._release(lease)
            elif not lease.active and self._may_process(lease.session):
                self._reactivate(lease)
        for key in sorted(desired - set(owned)):
            if self._stopping.is_set() or not self._running.is_set():
                return
            self._acquire(key)
        self._check_settled()

    def _reactivate(self, lease: PartitionLease) -> None:
        """A partition wanted again after a release failed half-way: still ours?"""
        if lease._owner_is_us():
            lease.active = True
            self._notify()
        else:
            with self._leases_lock:
                if self._leases.get(lease.key) is lease:
                    del self._leases[lease.key]

    def _check_settled(self) -> None:
        if self._unsettled_since is None:
            return
        waited = time.monotonic() - self._unsettled_since
        if self.settled:
            self._unsettled_since = None
            self.stats.rebalances += 1
            self.stats.last_rebalance_seconds = waited
            self.stats.max_rebalance_seconds = max(self.stats.max_rebalance_seconds, waited)
            log.info(
                "group %s: %s owns %d partition(s) of %d, %d member(s); settled in %.2fs",
                self.group,
                self.member_id,
                len(self._desired),
                len(self._partitions),
                len(self._members),
                waited,
            )
        elif waited > self.rebalance_timeout and not self._waiting_warned:
            self._waiting_warned = True
            log.warning(
                "group %s: still waiting for partitions after %.1fs (bound %.1fs)",
                self.group,
                waited,
                self.rebalance_timeout,
            )

    def _acquire(self, key: Partition) -> None:
        zk = self.zk
        path = self._owner_path(key)
        data = json.dumps({"member": self.member_id, "session": self._session}).encode()
        try:
            zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                _, stat = zk.get(path)
            except NoNodeError:
                self._events.put(("reconcile", None))
                return
            if stat.ephemeralOwner != self._session:
                # Someone still owns it: wait for the node to go.
                if zk.exists(path, watch=self._on_owner_event) is None:
                    self._events.put(("reconcile", None))
                return
        committed, version = self._read_checkpoint(key)
        lease = PartitionLease(self, key, self._session, committed, version)
        with self._leases_lock:
            self._leases[key] = lease
        log.info(
            "group %s: acquired %s:%s from %s",
            self.group,
            *key,
            committed.message_id if committed else "the beginning",
        )
        self._notify()

    def _read_checkpoint(self, key: Partition) -> tuple[Checkpoint | None, int | None]:
        try:
            data, stat = self.zk.get(self._checkpoint_path(key))
        except NoNodeError:
            return self._mirrored_checkpoint(key), None
        return Checkpoint.from_bytes(data), stat.version

    def _release(self, lease: PartitionLease) -> None:
        """Stop work on a partition, commit what finished, delete its owner node."""
        lease.active = False
        with lease:  # waits for the batch in hand
            self._give_up(lease)
        with self._leases_lock:
            if self._leases.get(lease.key) is lease:
                del self._leases[lease.key]
        log.info("group %s: released %s:%s", self.group, *lease.key)
        self._notify()

    def _give_up(self, lease: PartitionLease) -> None:
        if lease.dirty and self._running.is_set() and self._session == lease.session:
            lease._commit_held()
        try:
            _, stat = self.zk.get(self._owner_path(lease.key))
        except NoNodeError:
            return
        if stat.ephemeralOwner == lease.session:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(self._owner_path(lease.key), version=stat.version)

    def _leave(self) -> None:
        """Delete the member node first (others start rebalancing), then release all."""
        zk = self.zk
        if zk is None:
            return
        if self._running.is_set():
            try:
                with contextlib.suppress(NoNodeError):
                    zk.delete(self._member_path)
                with self._leases_lock:
                    leases = list(self._leases.values())
                for lease in leases:
                    lease.active = False
                    with lease:
                        self._give_up(lease)
            except KazooException as exc:
                log.warning(
                    "group %s: leaving cleanly failed (%s); the session end will "
                    "release our partitions",
                    self.group,
                    exc.__class__.__name__,
                )
        with self._leases_lock:
            self._leases.clear()
        self._running.clear()
        self._close(zk)
        log.info("group %s: %s left", self.group, self.member_id)

    # -------------------------------------------------------- discovery

    def _discover_loop(self) -> None:
        while not self._stopping.wait(self.discovery_interval * random.uniform(0.8, 1.0)):
            if self._refresh_partitions():
                self._events.put(("reconcile", None))

    def _refresh_partitions(self) -> bool:
        try:
            found = sorted(set(self.discover()))
        except Exception as exc:  # noqa: BLE001 - keep the last list; try again later
            log.warning(
                "group %s: discovering queues failed (%s); keeping %d partition(s)",
                self.group,
                exc,
                len(self._partitions),
            )
            return False
        if found == self._partitions:
            return False
        log.info(
            "group %s: %d partition(s) to consume (was %d)",
            self.group,
            len(found),
            len(self._partitions),
        )
        self._partitions = found
        return True

    # ----------------------------------------------------------- mirror

    def _mirror(self, key: Partition, position: Checkpoint) -> None:
        if self.mirror is None:
            return
        client, consumer = self.mirror
        try:
            client.set_checkpoints(key[0], consumer, {key[1]: position.message_id})
        except QueueyError as exc:
            log.warning("mirroring the checkpoint of %s:%s failed: %s", *key, exc)

    def _mirrored_checkpoint(self, key: Partition) -> Checkpoint | None:
        if self.mirror is None:
            return None
        client, consumer = self.mirror
        try:
            found = client.get_checkpoints(key[0], consumer).get(key[1])
        except QueueyError as exc:
            log.warning("reading the mirrored checkpoint of %s:%s failed: %s", *key, exc)
            return None
        return Checkpoint.for_id(found) if found else None


@contextlib.contextmanager
def joined(group: ConsumerGroup) -> Iterator[ConsumerGroup]:
    """``with joined(ConsumerGroup(...)) as g:`` starts the member and always stops it."""
    group.start()
    try:
        yield group
    finally:
        group.stop()

"""Consumer groups on ZooKeeper: membership, partition ownership, rebalancing.

Layout under ``<root>/<group>/`` (the root defaults to ``/queuey/groups``)::

    members/<member-id>               ephemeral  {"member", "host", "pid", "started",
                                                 "application" (when known)}
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

How a member pauses when its ZooKeeper session is in doubt, and rejoins after
losing it, is :mod:`queuey.client.member`; how it takes and gives up owner
nodes is :mod:`queuey.client.ownership`; the checkpoint nodes are
:mod:`queuey.client.checkpoint`; a partition owned is a
:class:`~queuey.client.lease.PartitionLease`.

Rebalancing is driven by watches (membership changes, released owner nodes)
and by a periodic resync, both handled by one coordinator thread, so kazoo's
own threads never block. ``rebalance_timeout`` bounds how long that takes
after members or partitions change; after a member *dies* (its session must
expire first) ownership settles within ``session_timeout + rebalance_timeout``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from queuey.client.assignment import Partition, assign
from queuey.client.checkpoint import Checkpoint, CheckpointStore
from queuey.client.http import QueueyClient
from queuey.client.lease import PartitionLease
from queuey.client.ownership import PartitionOwner
from queuey.client.partition_watch import PartitionWatch

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/queuey/groups"


@dataclasses.dataclass
class GroupStats:
    """What the group measured: how long rebalances took, and how many ran."""

    rebalances: int = 0
    last_rebalance_seconds: float | None = None
    max_rebalance_seconds: float = 0.0
    sessions: int = 0


class ConsumerGroup(PartitionOwner):
    """One member of a consumer group.

    ``hosts``: the ZooKeeper connection string (may end in a chroot,
    ``"zk1:2181,zk2:2181/queuey"``). ``discover``: returns the (queue,
    partition) pairs the group consumes; called every ``discovery_interval``
    seconds (see :class:`~queuey.client.discovery.QueueDiscovery`). ``mirror``: an optional
    ``(QueueyClient, consumer name)`` to copy checkpoints to the HTTP
    checkpoint API and to read them from there when ZooKeeper has none.
    ``application``: the Queuey application whose queues the group consumes,
    written in the member node so operators see the group under it.
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
        application: str | None = None,
    ) -> None:
        if not group or "/" in group:
            raise ValueError(f"bad group name {group!r}")
        self.root = root.rstrip("/")
        super().__init__(
            hosts,
            group,
            f"{self.root}/{group}",
            member_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            application=application,
        )
        self.discover = discover
        self.rebalance_timeout = rebalance_timeout
        self.discovery_interval = discovery_interval
        self.checkpoints = CheckpointStore(self.base, self.member_id, mirror)
        self._watch = PartitionWatch(
            group, discover, discovery_interval, self._stopping, self._request_reconcile
        )
        self.stats = GroupStats()

        self._members: list[str] = []
        self._desired: set[Partition] = set()
        self._unsettled_since: float | None = None
        self._waiting_warned = False
        self._coordinator: threading.Thread | None = None
        self._resync_interval = max(0.2, min(2.0, rebalance_timeout / 5))

    # ------------------------------------------------------------ public

    def start(self, timeout: float | None = None) -> None:
        """Connect, discover partitions and join; returns once joined."""
        self._watch.refresh()
        self._connect(timeout if timeout is not None else self.connect_timeout)
        self._coordinator = threading.Thread(
            target=self._coordinate, name=f"queuey-group-{self.group}", daemon=True
        )
        self._coordinator.start()
        self._watch.start()
        self._start_heartbeat()
        self._request_reconcile()

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group: finish held batches, commit, release every partition."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._events.put(("stop", None))
        if self._coordinator is not None:
            self._coordinator.join(timeout)
        self._watch.join(timeout)
        if self._heartbeater is not None:
            self._heartbeater.join(timeout)
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
        return list(self._watch.partitions)

    @property
    def settled(self) -> bool:
        """True when this member owns exactly what the assignment gives it."""
        with self._leases_lock:
            owned = {k for k, lease in self._leases.items() if lease.active}
        return self._joined and self._running.is_set() and owned == self._desired

    def read_checkpoints(self, queue_name: str) -> dict[int, Checkpoint]:
        """Every partition's committed checkpoint for a queue, from ZooKeeper."""
        return self.checkpoints.read_queue(self.zk, queue_name)

    # ------------------------------------------------------- session

    def _on_connect(self, zk: KazooClient) -> None:
        self.stats.sessions += 1
        for sub in ("members", "owners", "checkpoints"):
            zk.ensure_path(f"{self.base}/{sub}")
        ChildrenWatch(zk, f"{self.base}/members", self._on_members)

    def _on_members(self, children: list[str]) -> bool | None:
        self._request_reconcile()
        return False if self._stopping.is_set() else None

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
        partitions = list(self._watch.partitions)
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
                len(self._watch.partitions),
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

    def _leave(self) -> None:
        """Delete the member node first (others start rebalancing), then release all."""
        zk = self.zk
        if zk is None:
            return
        if self._running.is_set():
            try:
                with contextlib.suppress(NoNodeError):
                    zk.delete(self._member_path)
                self._give_up_all()
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


@contextlib.contextmanager
def joined(group: ConsumerGroup) -> Iterator[ConsumerGroup]:
    """``with joined(ConsumerGroup(...)) as g:`` starts the member and always stops it."""
    group.start()
    try:
        yield group
    finally:
        group.stop()

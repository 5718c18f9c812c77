"""What a group member owns: partitions, each held by an ephemeral owner node.

A member processes a partition only after it created the partition's owner
node ``<group>/owners/<queue>/<partition>`` (``{"member", "session"}``) in its
current session, and it gives a partition up by stopping the work on it,
committing the work that finished and deleting the node. A member that wants a
partition whose owner node still exists sets a watch and waits for it to go.
So a partition has at most one owner at any moment, whatever the members
believe; which partitions a member *wants* is the consumer group's business
(:class:`queuey.client.consumergroup.ConsumerGroup`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from queuey.client.assignment import Partition
from queuey.client.checkpoint import CheckpointStore, CheckpointUnavailable
from queuey.client.lease import PartitionLease
from queuey.client.member import GroupMember

log = logging.getLogger(__name__)


class PartitionOwner(GroupMember):
    """A :class:`~queuey.client.member.GroupMember` that owns partitions.

    Each partition owned is a :class:`~queuey.client.lease.PartitionLease`,
    kept while this session holds its owner node. Subclasses provide
    ``checkpoints`` (where an acquired partition's committed position is
    read) and reconcile when :meth:`_request_reconcile` queues
    ``("reconcile", None)`` on ``_events`` (an owner node waited for went).
    """

    checkpoints: CheckpointStore

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._leases: dict[Partition, PartitionLease] = {}
        self._leases_lock = threading.Lock()

    def _owner_path(self, key: Partition) -> str:
        return f"{self.base}/owners/{key[0]}/{key[1]}"

    def _request_reconcile(self) -> None:
        self._events.put(("reconcile", None))

    def _on_owner_event(self, event: object) -> None:
        self._request_reconcile()

    def _forget_session(self) -> None:
        with self._leases_lock:
            for lease in self._leases.values():
                lease.active = False
            self._leases.clear()
        self._joined = False
        self._notify()

    def _reactivate(self, lease: PartitionLease) -> None:
        """A partition wanted again after a release failed half-way: still ours?"""
        if lease._owner_is_us():
            lease.active = True
            self._notify()
        else:
            with self._leases_lock:
                if self._leases.get(lease.key) is lease:
                    del self._leases[lease.key]

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
                self._request_reconcile()
                return
            if stat.ephemeralOwner != self._session:
                # Someone still owns it: wait for the node to go.
                if zk.exists(path, watch=self._on_owner_event) is None:
                    self._request_reconcile()
                return
        try:
            committed, version = self.checkpoints.read(self.zk, key)
        except CheckpointUnavailable as exc:
            # Never start over from the beginning: let the partition go and try later.
            log.warning("group %s: not consuming %s:%s yet: %s", self.group, *key, exc)
            self._delete_owner(key, self._session)
            return
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

    def _release(self, lease: PartitionLease) -> None:
        """Stop work on a partition, commit what finished, delete its owner node."""
        self._give_up(lease)
        with self._leases_lock:
            if self._leases.get(lease.key) is lease:
                del self._leases[lease.key]
        log.info("group %s: released %s:%s", self.group, *lease.key)
        self._notify()

    def _give_up(self, lease: PartitionLease) -> None:
        """Deactivate a lease, wait for the batch in hand, commit what finished, drop the owner."""
        lease.active = False
        with lease:
            if lease.dirty and self._running.is_set() and self._session == lease.session:
                lease._commit_held()
            self._delete_owner(lease.key, lease.session)

    def _give_up_all(self) -> None:
        """Give up every partition held (on leaving the group)."""
        with self._leases_lock:
            leases = list(self._leases.values())
        for lease in leases:
            self._give_up(lease)

    def _delete_owner(self, key: Partition, session: int | None) -> None:
        """Delete a partition's owner node if ``session`` holds it."""
        path = self._owner_path(key)
        try:
            _, stat = self.zk.get(path)
        except NoNodeError:
            return
        if stat.ephemeralOwner == session:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path, version=stat.version)

"""A partition a group member owns: the right to process it and commit its checkpoint.

The group (:class:`queuey.client.consumergroup.ConsumerGroup`) creates a
:class:`PartitionLease` once it holds the partition's ephemeral owner node,
and takes it away by making it inactive and waiting for the batch in hand.
The lease asks its group whether the member may still act (session alive and
confirmed, not paused or stopping) through the small :class:`LeaseGroup`
interface, so this module does not depend on the group's.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from queuey.client.assignment import Partition
from queuey.client.checkpoint import Checkpoint, CheckpointStore

log = logging.getLogger(__name__)


class LeaseGroup(Protocol):
    """What a lease needs of the member that holds it."""

    zk: KazooClient | None
    checkpoints: CheckpointStore

    def _may_process(self, session: int) -> bool:
        """True while the member's session ``session`` lets it act."""

    def _owner_path(self, key: Partition) -> str:
        """The partition's ephemeral owner node."""


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
        group: LeaseGroup,
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
        store = self.group.checkpoints
        try:
            try:
                self._version = store.write(self.group.zk, self.key, position, self._version)
            except BadVersionError:
                if not self._owner_is_us():
                    self.active = False
                    log.warning("%s:%s is owned elsewhere; not committing", *self.key)
                    return False
                _, stat = self.group.zk.get(store.path(self.key))
                self._version = stat.version
                self._version = store.write(self.group.zk, self.key, position, self._version)
        except KazooException as exc:
            log.warning("commit of %s:%s failed: %s", *self.key, exc.__class__.__name__)
            return False
        self.committed = position
        store.copy_to_mirror(self.key, position)
        return True

    def _owner_is_us(self) -> bool:
        try:
            _, stat = self.group.zk.get(self.group._owner_path(self.key))
        except NoNodeError:
            return False
        return stat.ephemeralOwner == self.session

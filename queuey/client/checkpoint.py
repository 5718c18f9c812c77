"""Checkpoints: how far a group processed each partition, and where that is kept.

A :class:`Checkpoint` names the last message whose processing finished. A
group keeps one per partition in a persistent ZooKeeper node
``<group>/checkpoints/<queue>/<partition>`` holding JSON
``{"message_id", "timestamp", "member", "committed"}``; writes are a
compare-and-set on the node's version (see :class:`queuey.client.lease.PartitionLease`).
A group may also mirror its checkpoints to the HTTP checkpoint API and read
them from there when ZooKeeper has none (:class:`CheckpointStore`).

A checkpoint that cannot be read is never taken for "no checkpoint", which
would send the partition back to its beginning: reading it raises
:class:`CheckpointUnavailable` and the partition is not consumed until it
can be read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from queuey import ids
from queuey.client.assignment import Partition
from queuey.client.errors import ClientError
from queuey.client.http import QueueyClient

log = logging.getLogger(__name__)


class CheckpointUnavailable(Exception):
    """A partition's checkpoint exists or may exist, but could not be read."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The last message of a partition whose processing finished."""

    message_id: str
    timestamp: float

    @classmethod
    def for_id(cls, message_id: str) -> Checkpoint:
        """A checkpoint known only by id (e.g. from the HTTP API); the id holds the time."""
        parsed = ids.parse_id(message_id)
        return cls(parsed.hex, ids.micros_to_seconds(ids.micros_of(parsed)))

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


@dataclasses.dataclass(eq=False)
class CheckpointStore:
    """A group's checkpoint nodes under ``base``, and their optional HTTP mirror.

    ``mirror``: ``(QueueyClient, consumer name)`` to copy every commit to the
    HTTP checkpoint API and to read a partition's checkpoint from there when
    ZooKeeper has none. Methods take the ZooKeeper client to use, since a group
    replaces its client after a lost session.
    """

    base: str
    member_id: str
    mirror: tuple[QueueyClient, str] | None = None

    def path(self, key: Partition) -> str:
        return f"{self.base}/checkpoints/{key[0]}/{key[1]}"

    def read(self, zk: KazooClient, key: Partition) -> tuple[Checkpoint | None, int | None]:
        """A partition's checkpoint and its node's version (None while there is no node).

        The checkpoint is None only when there certainly is none. Raises
        :class:`CheckpointUnavailable` when the node holds something
        unreadable or the mirror could not be asked.
        """
        try:
            data, stat = zk.get(self.path(key))
        except NoNodeError:
            return self._read_mirror(key), None
        checkpoint = Checkpoint.from_bytes(data)
        if checkpoint is None:
            raise CheckpointUnavailable(f"the checkpoint node of {key[0]}:{key[1]} is unreadable")
        return checkpoint, stat.version

    def read_queue(self, zk: KazooClient, queue_name: str) -> dict[int, Checkpoint]:
        """Every partition's checkpoint for a queue, from ZooKeeper."""
        path = f"{self.base}/checkpoints/{queue_name}"
        found = {}
        try:
            children = zk.get_children(path)
        except NoNodeError:
            return {}
        for child in children:
            with contextlib.suppress(NoNodeError):
                data, _ = zk.get(f"{path}/{child}")
                cp = Checkpoint.from_bytes(data)
                if cp is not None:
                    found[int(child)] = cp
        return found

    def write(
        self, zk: KazooClient, key: Partition, position: Checkpoint, version: int | None
    ) -> int:
        """Write if the node is still at ``version`` (absent if None); its new version.

        Raises :class:`kazoo.exceptions.BadVersionError` if someone else wrote first.
        """
        path = self.path(key)
        data = position.to_bytes(self.member_id)
        if version is None:
            try:
                zk.create(path, data, makepath=True)
                return 0
            except NodeExistsError:
                raise BadVersionError() from None
        return zk.set(path, data, version=version).version

    def copy_to_mirror(self, key: Partition, position: Checkpoint) -> None:
        """Copy a committed checkpoint to the HTTP API (a failure is only logged)."""
        if self.mirror is None:
            return
        client, consumer = self.mirror
        try:
            client.set_checkpoints(key[0], consumer, {key[1]: position.message_id})
        except ClientError as exc:
            log.warning("mirroring the checkpoint of %s:%s failed: %s", *key, exc)

    def _read_mirror(self, key: Partition) -> Checkpoint | None:
        """The mirrored checkpoint; :class:`CheckpointUnavailable` if the API failed.

        The client already retried the ``GET`` (bounded, with backoff), so an
        error here is reported, not retried.
        """
        if self.mirror is None:
            return None
        client, consumer = self.mirror
        try:
            found = client.get_checkpoints(key[0], consumer).get(key[1])
        except ClientError as exc:
            raise CheckpointUnavailable(
                f"reading the mirrored checkpoint of {key[0]}:{key[1]} failed: {exc}"
            ) from exc
        try:
            return Checkpoint.for_id(found) if found else None
        except ValueError as exc:
            raise CheckpointUnavailable(
                f"the mirrored checkpoint of {key[0]}:{key[1]} is unreadable: {found!r}"
            ) from exc

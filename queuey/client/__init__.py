"""The Queuey client library: the HTTP client, consumer groups and the worker.

``QueueyClient`` talks to the HTTP API; ``ConsumerGroup`` divides a group's
queue partitions among its live members through ZooKeeper and keeps each
partition's checkpoint there; ``Worker`` runs a job over the partitions its
member owns (``queuey-worker -c worker.ini``).
"""

from queuey.client.assignment import assign
from queuey.client.group import (
    Checkpoint,
    ConsumerGroup,
    GroupStats,
    PartitionLease,
    QueueDiscovery,
)
from queuey.client.http import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    OutgoingMessage,
    PostedMessage,
    QueueInfo,
    QueueyClient,
    QueueyError,
    ReceivedMessage,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from queuey.client.worker import Worker, WorkerConfig, WorkerStats

__all__ = [
    "BadRequest",
    "Checkpoint",
    "Conflict",
    "ConsumerGroup",
    "Forbidden",
    "GroupStats",
    "NotFound",
    "OutgoingMessage",
    "PartitionLease",
    "PostedMessage",
    "QueueDiscovery",
    "QueueInfo",
    "QueueyClient",
    "QueueyError",
    "ReceivedMessage",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "assign",
]

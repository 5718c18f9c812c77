"""The Queuey client library: the HTTP client, consumer groups and the worker.

``QueueyClient`` talks to the HTTP API (:mod:`~queuey.client.http`, its
retries in :mod:`~queuey.client.retry`, its answers in
:mod:`~queuey.client.models` and :mod:`~queuey.client.errors`);
``AsyncQueueyClient`` makes the same calls from asyncio, awaited, with the
same answers and errors (:mod:`~queuey.client.aio`: each call is described
once, in :mod:`~queuey.client.answers`, and sent by either);
``ConsumerGroup`` divides a group's queue partitions among its live members
through ZooKeeper and keeps each partition's checkpoint there
(:mod:`~queuey.client.consumergroup`, with :mod:`~queuey.client.member`,
:mod:`~queuey.client.assignment`, :mod:`~queuey.client.lease`,
:mod:`~queuey.client.ownership`, :mod:`~queuey.client.partition_watch`,
:mod:`~queuey.client.checkpoint` and :mod:`~queuey.client.discovery`);
``Worker`` runs a job over the partitions its member owns and
``ReserveWorker`` over the messages a work-queue subscription leases it
(:mod:`queuey.client.worker`, ``queuey-worker -c worker.ini``). The work-queue
calls (``reserve``, ``ack``, ``release``, ``extend``, ``stats``, ``redrive``)
are in :mod:`~queuey.client.workqueue`, the schedule and subscription-filter
calls in :mod:`~queuey.client.schedules`, the flow-control calls (``flow``,
``set_queue_flow``, ``set_subscription_flow``, ``pause``, ``resume``) in
:mod:`~queuey.client.flow`. ``Spool`` keeps a producer's messages
in a local file until the service acknowledges them (:mod:`~queuey.client.spool`).
"""

from queuey.client.aio import AsyncQueueyClient
from queuey.client.assignment import assign
from queuey.client.checkpoint import Checkpoint
from queuey.client.consumergroup import ConsumerGroup, GroupStats
from queuey.client.discovery import QueueDiscovery
from queuey.client.errors import (
    BadRequest,
    ClientError,
    Conflict,
    FlowRefused,
    Forbidden,
    NotFound,
    QueueFull,
    QueuePaused,
    RateLimited,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from queuey.client.flow import FlowInfo, QueueFlow, SubscriptionFlow
from queuey.client.http import QueueyClient
from queuey.client.lease import PartitionLease
from queuey.client.models import (
    OutgoingMessage,
    PostedMessage,
    QueueInfo,
    QueueStats,
    ReceiptResult,
    ReceivedMessage,
    RedriveResult,
    ReservedMessage,
    SubscriptionStats,
)
from queuey.client.schedules import ScheduleInfo
from queuey.client.spool import Spool, SpoolFull, SpoolLocked, SpoolStats
from queuey.client.spoolfile import BadSpoolFile
from queuey.client.spoolsend import Rejected
from queuey.client.worker import ReserveStats, ReserveWorker, Worker, WorkerConfig, WorkerStats

__all__ = [
    "AsyncQueueyClient",
    "BadRequest",
    "BadSpoolFile",
    "Checkpoint",
    "ClientError",
    "Conflict",
    "ConsumerGroup",
    "FlowInfo",
    "FlowRefused",
    "Forbidden",
    "GroupStats",
    "NotFound",
    "OutgoingMessage",
    "PartitionLease",
    "PostedMessage",
    "QueueDiscovery",
    "QueueFlow",
    "QueueFull",
    "QueueInfo",
    "QueuePaused",
    "QueueStats",
    "RateLimited",
    "ReceiptResult",
    "RedriveResult",
    "Rejected",
    "QueueyClient",
    "ReceivedMessage",
    "ReserveStats",
    "ReserveWorker",
    "ReservedMessage",
    "ScheduleInfo",
    "Spool",
    "SpoolFull",
    "SpoolLocked",
    "SpoolStats",
    "SubscriptionFlow",
    "SubscriptionStats",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "assign",
]

"""The API's wire records: one model per JSON object the service answers.

The service describes its answers with them (:mod:`queuey.web.answers`,
``/openapi.json``) and the client library parses answers into them
(:mod:`queuey.client.models`), so the two read one definition. This package
depends on the vocabulary (:mod:`queuey.model`, :mod:`queuey.ids`,
:mod:`queuey.limits`) only: the client installs it without the server.
"""

from queuey.wire.errors import Error, Ok
from queuey.wire.explain import ExplainAnswer, ExplainReason
from queuey.wire.message import (
    AckAnswer,
    CheckpointsAnswer,
    ExtendAnswer,
    Failed,
    Message,
    MessageRef,
    Messages,
    Posted,
    RedriveAnswer,
    ReleaseAnswer,
    ReservedAnswer,
    ReservedMessage,
)
from queuey.wire.queue import QueueSettings, SubscriptionFilter
from queuey.wire.record import Consistency, MessageId, QueueType, Record
from queuey.wire.schedule import Schedule, ScheduleInfo, ScheduleList
from queuey.wire.service import Heartbeat, Version
from queuey.wire.stats import PartitionStatsAnswer, StatsAnswer, SubscriptionStatsAnswer

__all__ = [
    "AckAnswer",
    "CheckpointsAnswer",
    "Consistency",
    "Error",
    "ExplainAnswer",
    "ExplainReason",
    "ExtendAnswer",
    "Failed",
    "Heartbeat",
    "Message",
    "MessageId",
    "MessageRef",
    "Messages",
    "Ok",
    "PartitionStatsAnswer",
    "Posted",
    "QueueSettings",
    "QueueType",
    "Record",
    "RedriveAnswer",
    "ReleaseAnswer",
    "ReservedAnswer",
    "ReservedMessage",
    "Schedule",
    "ScheduleInfo",
    "ScheduleList",
    "StatsAnswer",
    "SubscriptionFilter",
    "SubscriptionStatsAnswer",
    "Version",
]

"""The operation table: one row per HTTP operation the API serves.

Each row names its route (:data:`queuey.web.ROUTES`, which gives the path and
so the path parameters), its method, its view, who may call it, the models of
its query string and body, its answer and the error codes it may answer.
:mod:`queuey.web` registers each view from its row (route, method and
permission written once, here), :mod:`queuey.web.openapi` turns the table into
``/openapi.json``, and the views validate with the same models.

A request model is named by its attribute of :class:`queuey.web.schemas.Models`
(its bounds are the app's settings) or given as a class when it has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from queuey.core.access import Permission
from queuey.web.answers import Queue, QueueList, SubscriptionAnswer, SubscriptionsAnswer
from queuey.web.schedules import CreateSchedule
from queuey.web.schemas import SubscriptionSettings
from queuey.wire import (
    AckAnswer,
    CheckpointsAnswer,
    ExplainAnswer,
    ExtendAnswer,
    Heartbeat,
    Messages,
    Ok,
    Posted,
    RedriveAnswer,
    ReleaseAnswer,
    ReservedAnswer,
    Schedule,
    ScheduleList,
    StatsAnswer,
    Version,
)

#: What each error code means, as the description says it.
ERRORS = {
    400: "invalid parameter, path or body; every bad field is named",
    401: "missing or unknown application; missing or wrong key (also for a queue "
    "that does not exist, when the caller may not read private queues)",
    403: "right key from an address outside the application's allowlist",
    404: "no such queue (or schedule, on /schedules; or live message, on explain)",
    405: "method not allowed here; see Allow",
    409: "a queue (or schedule) of that name exists; a schedule changed meanwhile",
    413: "the body, a message or the batch is too large",
    415: "the body is not JSON",
    429: "over the queue's post_rate or the application's max_posts_per_second "
    "(named); see Retry-After",
    503: "storage unavailable, or the queue is paused (paused); see Retry-After",
    507: "the queue is at its max_length, or the application at its max_messages or "
    "max_bytes (named); see Retry-After",
}
#: Codes every /queue operation may answer.
QUEUE_ERRORS = (400, 401, 403, 404, 405, 503)
BODY_ERRORS = (413, 415)
#: Codes a /queue operation with a body may answer.
SENT_ERRORS = QUEUE_ERRORS + BODY_ERRORS
#: What a create (of a queue or a schedule) may answer.
CREATE_ERRORS = (400, 401, 403, 409, 413, 415, 503)
#: What flow control may answer a post (docs/flow.rst).
POST_ERRORS = SENT_ERRORS + (429, 507)

ModelRef = str | type[BaseModel]
#: What each kind of caller needs (:class:`queuey.web.security.QueueySecurityPolicy`).
PERMISSIONS = {"keyed": Permission.MANAGE, "reader": Permission.READ, "anyone": None}


@dataclass(frozen=True)
class Body:
    """A request body: ``model`` (``None``: any JSON object); ``form``: the
    fields may also come form-encoded, or in the query string when there is no
    body, so the body is optional; ``limit``: the setting bounding its size, the
    route's largest body (:mod:`queuey.web.bodies`)."""

    model: ModelRef | None
    form: bool = False
    limit: str = "max_message_size"


@dataclass(frozen=True)
class Failure:
    """An error answer unlike the others: its own description and answer model."""

    status: int
    description: str
    answer: type[BaseModel]


@dataclass(frozen=True)
class Operation:
    """One operation. ``answer``: the model of the success body
    (:mod:`queuey.wire`, :mod:`queuey.web.answers`), or an OpenAPI ``content`` object for a body
    that is not one of ours. ``view``: its module in :mod:`queuey.web` and name.
    ``caller``: ``keyed`` (application and key, :attr:`Permission.MANAGE`),
    ``reader`` (the key only for private queues, :attr:`Permission.READ`) or
    ``anyone`` (no headers, no permission)."""

    route: str
    method: str
    view: str
    summary: str
    answer: type[BaseModel] | dict[str, Any]
    errors: tuple[int | Failure, ...] = QUEUE_ERRORS
    status: int = 200
    caller: Literal["keyed", "reader", "anyone"] = "keyed"
    query: ModelRef | None = None
    body: Body | None = None

    @property
    def permission(self) -> Permission | None:
        return PERMISSIONS[self.caller]


def _text(media: str, kind: str) -> dict[str, Any]:
    return {"content": {media: {"schema": {"type": kind}}}}


_O = Operation

OPERATIONS: tuple[Operation, ...] = (
    _O("queues", "post", "queues.create_queue", "Create a queue", Queue, CREATE_ERRORS, 201,
       body=Body("create_queue", form=True)),
    _O("queues", "get", "queues.list_queues", "List the application's queues", QueueList,
       (400, 401, 403, 503), query="list_queues"),
    _O("queue", "post", "messages.post_message",
       "Post one message (the body is the message, a JSON object)", Posted, POST_ERRORS, 201,
       query="placement", body=Body(None)),
    _O("queue", "get", "messages.read_messages", "Read messages", Messages, caller="reader",
       query="read"),
    _O("queue", "put", "queues.update_queue",
       "Update a queue's settings and flow settings (partitions may only grow)", Queue,
       SENT_ERRORS, body=Body("update_queue", form=True)),
    _O("queue", "delete", "queues.delete_queue",
       "Delete a queue, or with delete=false only its messages", Ok, query="delete_queue"),
    _O("queue_batch", "post", "messages.post_batch", "Post many messages, all or nothing",
       Posted, POST_ERRORS, 201, body=Body("batch", limit="max_batch_size")),
    _O("queue_info", "get", "queues.queue_info", "A queue's metadata", Queue, caller="reader"),
    _O("queue_reserve", "post", "workqueue.reserve",
       "Lease messages to one consumer of a subscription (long poll with wait); "
       "the parameters may also come in the query string when there is no body",
       ReservedAnswer, SENT_ERRORS, body=Body("reserve", form=True)),
    _O("queue_ack", "post", "workqueue.ack",
       "Finish leased messages: never delivered again in the subscription", AckAnswer,
       SENT_ERRORS, body=Body("ack")),
    _O("queue_release", "post", "workqueue.release",
       "End leases now: available again after delay (or dead-lettered)", ReleaseAnswer,
       SENT_ERRORS, body=Body("release")),
    _O("queue_extend", "post", "workqueue.extend",
       "Make leases end visibility_timeout seconds from now", ExtendAnswer, SENT_ERRORS,
       body=Body("extend")),
    _O("queue_stats", "get", "workqueue.stats",
       "Message counts per partition and per subscription", StatsAnswer),
    _O("queue_subscriptions", "get", "subscriptions.list_subscriptions",
       "The queue's subscriptions that have a filter or a flow setting", SubscriptionsAnswer),
    _O("queue_subscription", "get", "subscriptions.show",
       "A subscription's filter and flow settings", SubscriptionAnswer),
    _O("queue_subscription", "put", "subscriptions.configure",
       "Change a subscription's filter and flow settings (docs/api.rst)", SubscriptionAnswer,
       SENT_ERRORS, body=Body(SubscriptionSettings, limit="max_form_size")),
    _O("queue_pause", "post", "queues.pause_or_resume", "Pause posting: posts are refused (503)",
       Queue),
    _O("queue_resume", "post", "queues.pause_or_resume", "Resume posting", Queue),
    _O("queue_subscription_pause", "post", "subscriptions.pause_or_resume",
       "Pause deliveries: reserves get none (leases stay)", SubscriptionAnswer),
    _O("queue_subscription_resume", "post", "subscriptions.pause_or_resume",
       "Resume a subscription's deliveries", SubscriptionAnswer),
    _O("queue_redrive", "post", "workqueue.redrive",
       "Move dead letters back to the queues they came from, oldest first; "
       "the parameters may also come in the query string when there is no body",
       RedriveAnswer, SENT_ERRORS, body=Body("redrive", form=True)),
    _O("queue_messages", "get", "messages.get_messages", "Get messages by id", Messages,
       caller="reader"),
    _O("queue_messages", "delete", "messages.delete_messages", "Delete messages by id", Ok),
    _O("queue_message_explain", "get", "workqueue.explain",
       "Whether a message is handed out to a subscription now and, if not, every reason",
       ExplainAnswer, QUEUE_ERRORS, query="explain"),
    _O("queue_checkpoints", "get", "checkpoints.get_checkpoints",
       "How far a consumer processed each partition", CheckpointsAnswer),
    _O("queue_checkpoints", "put", "checkpoints.set_checkpoints", "Record checkpoints",
       CheckpointsAnswer, SENT_ERRORS, body=Body("checkpoints")),
    _O("schedules", "post", "schedules.create_schedule",
       "Create a schedule: a message posted to a queue once per tick", Schedule,
       CREATE_ERRORS, 201, body=Body(CreateSchedule)),
    _O("schedules", "get", "schedules.list_schedules", "List the application's schedules",
       ScheduleList, (401, 403, 503)),
    _O("schedule", "get", "schedules.get_schedule", "A schedule and its tick state", Schedule),
    _O("schedule", "delete", "schedules.delete_schedule",
       "Delete a schedule (what it posted stays)", Ok),
    _O("schedule_pause", "post", "schedules.pause_or_resume",
       "Pause a schedule: no tick until it is resumed", Schedule, QUEUE_ERRORS + (409,)),
    _O("schedule_resume", "post", "schedules.pause_or_resume",
       "Resume a schedule from now on (ticks missed while paused are not posted)", Schedule,
       QUEUE_ERRORS + (409,)),
    _O("heartbeat", "get", "health.heartbeat", "Health of storage and coordination", Heartbeat,
       (Failure(503, "a dependency is down; see Retry-After", Heartbeat),), caller="anyone"),
    _O("lbheartbeat", "get", "health.lbheartbeat", "Liveness", Ok, (), caller="anyone"),
    _O("version", "get", "health.version_info", "Build information", Version, (),
       caller="anyone"),
    _O("metrics", "get", "metrics.metrics_view", "Prometheus exposition (allowed addresses only)",
       _text("text/plain", "string"), (403,), caller="anyone"),
    _O("openapi", "get", "openapi.openapi_view", "This description",
       _text("application/json", "object"), (), caller="anyone"),
)  # fmt: skip

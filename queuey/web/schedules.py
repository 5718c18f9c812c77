"""Schedule routes: create, list, show, pause, resume and delete an
application's schedules (``docs/schedules.rst``).

The views parse and answer; :mod:`queuey.core.schedules` checks every rule
(the cron expression, the time zone, the queue, the message template by the
rules a post follows) and keeps the schedules. :class:`CreateSchedule` is
both what the view validates the body's shape with and what ``/openapi.json``
describes; the rules a static schema cannot state are
:data:`SCHEDULE_RULES_UNSTATED`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

from queuey.core.cron import (
    EPOCH_ERROR,
    INSTANT_ERROR,
    MAX_CRON,
    MAX_EPOCH,
    MAX_INSTANT_TEXT,
    ZONE_PATTERN,
)
from queuey.core.messages import MAX_PRIORITY
from queuey.model.schedules import (
    MAX_INTERVAL,
    MAX_TEMPLATE_ATTRIBUTES,
    MIN_INTERVAL,
    NAME_PATTERN,
)
from queuey.web.params import json_body, path_param, validate
from queuey.web.responses import ok
from queuey.web.schemas import QUEUE_REF_PATTERN, Attributes, Boolean, Integer, Model, PartitionKey

#: What a schedule's create body may be rejected for although its shape is
#: right (the queue's state, the cron grammar, zone names, rules across
#: fields, the message rules against the queue): a schema-driven fuzzer sees
#: these 400s for schema-valid bodies.
SCHEDULE_RULES_UNSTATED = (
    r"the application has no queue named .+",
    r"(minute|hour|day of month|month|day of week) field: .+",
    r"must have five fields: minute hour day-of-month month day-of-week",
    r"must be an IANA time zone name, such as UTC or Europe/Paris",
    r"give either cron or interval \(not both\)",
    r"must not be before start",
    r"must be seconds since the epoch, from 0 to \d+",
    re.escape(INSTANT_ERROR),
    r"no tick is ever due",
    r"must be between 1 and \d+",
    r"must be at most the message's ttl \(\d+ s\)",
    r"the queue's delay \(\d+ s\) is longer than this message's ttl \(\d+ s\)",
    r"give either partition or partition_key, not both",
    r"a message must be a JSON object",
    r"the message is larger than \d+ bytes",
    r"names must be 1 to \d+ characters \(not starting with 'schedule\.'\), .+",
)


class ScheduleMessage(Model):
    body: dict[str, Any] = Field(description="the message posted at each tick")
    partition: Integer(1, 999, description="1..the queue's partitions; default random") = None
    partition_key: PartitionKey = Field(None, description="hashed to a partition")
    ttl: Integer(1, 2**31 - 1, description="seconds, at most queuey.max_ttl") = None
    delay: Integer(0, 2**31 - 1, description="seconds before delivery, at most the ttl") = None
    priority: Integer(0, MAX_PRIORITY, description="0-9, higher is reserved first") = None
    attributes: Attributes(MAX_TEMPLATE_ATTRIBUTES) = Field(
        None, description="each tick adds schedule.name and schedule.tick"
    )


def _instant(value: Any) -> Any:
    """Epoch seconds as a number, or text :func:`queuey.core.cron.instant` reads
    in the schedule's time zone (the core does, knowing the zone)."""
    if isinstance(value, str):
        if not 1 <= len(value) <= MAX_INSTANT_TEXT:
            raise PydanticCustomError("instant", INSTANT_ERROR)
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise PydanticCustomError("instant", EPOCH_ERROR)
    return value


def Instant(description: str) -> Any:  # noqa: N802 - a type factory
    """``start``/``end``: epoch seconds, or ISO 8601 text (without an offset:
    wall-clock time in the schedule's ``timezone``)."""
    schema = {
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH},
            {"type": "string", "minLength": 1, "maxLength": MAX_INSTANT_TEXT},
        ],
        "description": f"epoch seconds or ISO 8601 time: {description}",
    }
    return Annotated[Any, BeforeValidator(_instant), WithJsonSchema(schema)]


class CreateSchedule(Model):
    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN)] = Field(
        description="unique in the application"
    )
    queue: Annotated[str, StringConstraints(pattern=QUEUE_REF_PATTERN)] = Field(
        description="a queue of the application"
    )
    cron: Annotated[str, StringConstraints(max_length=MAX_CRON)] = Field(
        None, description="minute hour day-of-month month day-of-week; or give interval"
    )
    interval: Integer(MIN_INTERVAL, MAX_INTERVAL, description="seconds between ticks") = None
    timezone: Annotated[str, StringConstraints(pattern=ZONE_PATTERN)] = Field(
        "UTC", description="IANA name; the cron fields are wall-clock time there"
    )
    start: Instant("no tick before; default now") = None
    end: Instant("no tick after; default never") = None
    message: ScheduleMessage
    missed: Literal["latest", "all"] = Field(
        "latest", description="ticks missed while no node ran: post the latest, or all"
    )
    paused: Boolean = False


def _application(request) -> str:
    return request.identity.application.name


def create_schedule(request):
    params = validate(CreateSchedule, json_body(request))
    made = request.services.schedules.create(
        _application(request), params.model_dump(exclude_none=True)
    )
    return ok(201, **made.to_json())


def list_schedules(request):
    found = request.services.schedules.list(_application(request))
    return ok(schedules=[s.to_json() for s in found])


def get_schedule(request):
    found = request.services.schedules.get(_application(request), path_param(request, "schedule"))
    return ok(**found.to_json())


def delete_schedule(request):
    request.services.schedules.delete(_application(request), path_param(request, "schedule"))
    return ok()


def pause_or_resume(request):
    schedules = request.services.schedules
    change = schedules.pause if request.matched_route.name.endswith("_pause") else schedules.resume
    return ok(**change(_application(request), path_param(request, "schedule")).to_json())

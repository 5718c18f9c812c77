"""The OpenAPI 3.1 description served at ``/openapi.json``, assembled from the
pydantic models the views validate with (:mod:`queuey.web.schemas`).

Query parameters are the fields of a model, request bodies are a model's JSON
schema, responses reference the response models; only the route table (which
operation takes which model, answers which codes) is written here.
``tests/web/test_openapi.py`` checks that every route served is described and
everything described is served; ``tests/web/test_schemathesis.py`` fuzzes the
live service against this description.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from pyramid.view import view_config

from queuey.web.answers import RESPONSE_MODELS
from queuey.web.health import release
from queuey.web.responses import json_response
from queuey.web.schedules import CreateSchedule
from queuey.web.schemas import PATH_PARAMS, Models, SubscriptionSettings
from queuey.web.state import web_state_of

#: Queues the description's examples name; the schemathesis test creates them
#: so generated calls reach real queues.
EXAMPLE_QUEUES = {"spec-queue": "public"}
REF = "#/components/schemas/{model}"

ERRORS = {
    400: "invalid parameter, path or body; every bad field is named",
    401: "missing or unknown application; missing or wrong key (also for a queue "
    "that does not exist, when the caller may not read private queues)",
    403: "right key from an address outside the application's allowlist",
    404: "no such queue (or schedule, on /schedules)",
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
#: What flow control may answer a post (docs/flow.rst).
POST_ERRORS = QUEUE_ERRORS + BODY_ERRORS + (429, 507)
_SUB = "/queue/{name}/subscriptions/{subscription}"
#: Pause and resume: (path, summary, answer).
SWITCHES = (
    ("/queue/{name}/pause", "Pause posting: posts are refused (503)", "Queue"),
    ("/queue/{name}/resume", "Resume posting", "Queue"),
    (f"{_SUB}/pause", "Pause deliveries: reserves get none (leases stay)", "SubscriptionAnswer"),
    (f"{_SUB}/resume", "Resume a subscription's deliveries", "SubscriptionAnswer"),
)


def _clean(schema: Any) -> Any:
    """Drop pydantic's titles and ``default: null`` (absent means "not given")."""
    if isinstance(schema, dict):
        return {
            key: _clean(value)
            for key, value in schema.items()
            if key != "title" and not (key == "default" and value is None)
        }
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    return schema


def _schema(model: type[BaseModel], components: dict[str, Any] | None = None) -> dict[str, Any]:
    """``model``'s JSON schema; the models it nests go to ``components``."""
    schema = _clean(model.model_json_schema(ref_template=REF))
    nested = schema.pop("$defs", {})
    if components is not None:
        components.update(nested)
    return schema


def _query(model: type[BaseModel]) -> list[dict[str, Any]]:
    """One query parameter per field of ``model``."""
    schema = _schema(model)
    required = set(schema.get("required", ()))
    params = []
    for name, prop in schema["properties"].items():
        prop = dict(prop)
        description = prop.pop("description", None)
        param = {"name": name, "in": "query", "required": name in required, "schema": prop}
        if description:
            param["description"] = description
        params.append(param)
    return params


def _path(*names: str) -> list[dict[str, Any]]:
    params = []
    for name in names:
        param = {"name": name, "in": "path", "required": True, "schema": PATH_PARAMS[name]}
        if name == "name":
            param["example"] = next(iter(EXAMPLE_QUEUES))
        params.append(param)
    return params


def _header(name: str, required: bool, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "schema": {"type": "string"},
        "description": description,
    }


APP = _header("X-Application-Name", True, "a configured application")
KEY = _header("ApplicationKey", True, "the application's key")
READ_KEY = _header("ApplicationKey", False, "needed for private queues")


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _form_or_json(model: type[BaseModel]) -> dict[str, Any]:
    """Queue parameters come as a JSON object or as form fields (docs/api.rst)."""
    schema = _schema(model)
    return {
        "content": {
            "application/json": {"schema": schema},
            "application/x-www-form-urlencoded": {"schema": schema},
        }
    }


def _responses(ok_status: int, ok: str | dict, codes: tuple[int, ...]) -> dict[str, Any]:
    answer = {"description": "success"}
    if isinstance(ok, str):
        answer["content"] = _json({"$ref": REF.format(model=ok)})
    else:
        answer.update(ok)
    responses = {str(ok_status): answer}
    for code in sorted(set(codes) | {405}):
        response: dict[str, Any] = {
            "description": ERRORS[code],
            "content": _json({"$ref": REF.format(model="Error")}),
        }
        if code == 405:
            response["headers"] = {"Allow": {"schema": {"type": "string"}, "required": True}}
        if code in (429, 503, 507):
            response["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        responses[str(code)] = response
    return responses


def _operation(summary, parameters, responses, body=None) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "parameters": parameters}
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = responses
    return operation


def paths(models: Models, components: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The route table: which operation takes which model and answers which codes.

    Models nested in request bodies are added to ``components``.
    """
    queue_body = _form_or_json(models.create_queue)
    update_body = _form_or_json(models.update_queue)
    message_body = {"required": True, "content": _json({"type": "object"})}
    batch_body = {"required": True, "content": _json(_schema(models.batch, components))}
    checkpoints_body = {"required": True, "content": _json(_schema(models.checkpoints))}

    def receipts_body(model: type[BaseModel]) -> dict[str, Any]:
        return {"required": True, "content": _json(_schema(model, components))}

    keyed = [APP, KEY]
    public = [APP, READ_KEY]
    return {
        "/queue": {
            "post": _operation(
                "Create a queue",
                keyed,
                _responses(201, "Queue", (400, 401, 403, 409, 413, 415, 503)),
                queue_body,
            ),
            "get": _operation(
                "List the application's queues",
                keyed + _query(models.list_queues),
                _responses(200, "QueueList", (400, 401, 403, 503)),
            ),
        },
        "/queue/{name}": {
            "post": _operation(
                "Post one message (the body is the message, a JSON object)",
                keyed + _path("name") + _query(models.placement),
                _responses(201, "Posted", POST_ERRORS),
                message_body,
            ),
            "get": _operation(
                "Read messages",
                public + _path("name") + _query(models.read),
                _responses(200, "Messages", QUEUE_ERRORS),
            ),
            "put": _operation(
                "Update a queue's settings and flow settings (partitions may only grow)",
                keyed + _path("name"),
                _responses(200, "Queue", QUEUE_ERRORS + BODY_ERRORS),
                update_body,
            ),
            "delete": _operation(
                "Delete a queue, or with delete=false only its messages",
                keyed + _path("name") + _query(models.delete_queue),
                _responses(200, "Ok", QUEUE_ERRORS),
            ),
        },
        "/queue/{name}/batch": {
            "post": _operation(
                "Post many messages, all or nothing",
                keyed + _path("name"),
                _responses(201, "Posted", POST_ERRORS),
                batch_body,
            )
        },
        "/queue/{name}/info": {
            "get": _operation(
                "A queue's metadata",
                public + _path("name"),
                _responses(200, "Queue", QUEUE_ERRORS),
            )
        },
        "/queue/{name}/reserve": {
            "post": _operation(
                "Lease messages to one consumer of a subscription (long poll with wait); "
                "the parameters may also come in the query string when there is no body",
                keyed + _path("name"),
                _responses(200, "ReservedAnswer", QUEUE_ERRORS + BODY_ERRORS),
                _form_or_json(models.reserve),
            )
        },
        "/queue/{name}/ack": {
            "post": _operation(
                "Finish leased messages: never delivered again in the subscription",
                keyed + _path("name"),
                _responses(200, "AckAnswer", QUEUE_ERRORS + BODY_ERRORS),
                receipts_body(models.ack),
            )
        },
        "/queue/{name}/release": {
            "post": _operation(
                "End leases now: available again after delay (or dead-lettered)",
                keyed + _path("name"),
                _responses(200, "ReleaseAnswer", QUEUE_ERRORS + BODY_ERRORS),
                receipts_body(models.release),
            )
        },
        "/queue/{name}/extend": {
            "post": _operation(
                "Make leases end visibility_timeout seconds from now",
                keyed + _path("name"),
                _responses(200, "ExtendAnswer", QUEUE_ERRORS + BODY_ERRORS),
                receipts_body(models.extend),
            )
        },
        "/queue/{name}/stats": {
            "get": _operation(
                "Message counts per partition and per subscription",
                keyed + _path("name"),
                _responses(200, "StatsAnswer", QUEUE_ERRORS),
            )
        },
        "/queue/{name}/subscriptions": {
            "get": _operation(
                "The queue's subscriptions that have a filter or a flow setting",
                keyed + _path("name"),
                _responses(200, "SubscriptionsAnswer", QUEUE_ERRORS),
            )
        },
        "/queue/{name}/subscriptions/{subscription}": {
            "get": _operation(
                "A subscription's filter and flow settings",
                keyed + _path("name", "subscription"),
                _responses(200, "SubscriptionAnswer", QUEUE_ERRORS),
            ),
            "put": _operation(
                "Change a subscription's filter and flow settings (docs/api.rst)",
                keyed + _path("name", "subscription"),
                _responses(200, "SubscriptionAnswer", QUEUE_ERRORS + BODY_ERRORS),
                {"required": True, "content": _json(_schema(SubscriptionSettings))},
            ),
        },
        **{
            path: {
                "post": _operation(
                    summary,
                    keyed + _path(*re.findall(r"{(\w+)}", path)),
                    _responses(200, answer, QUEUE_ERRORS),
                )
            }
            for path, summary, answer in SWITCHES
        },
        "/queue/{name}/redrive": {
            "post": _operation(
                "Move dead letters back to the queues they came from, oldest first; "
                "the parameters may also come in the query string when there is no body",
                keyed + _path("name"),
                _responses(200, "RedriveAnswer", QUEUE_ERRORS + BODY_ERRORS),
                _form_or_json(models.redrive),
            )
        },
        "/queue/{name}/messages/{ids}": {
            "get": _operation(
                "Get messages by id",
                public + _path("name", "ids"),
                _responses(200, "Messages", QUEUE_ERRORS),
            ),
            "delete": _operation(
                "Delete messages by id",
                keyed + _path("name", "ids"),
                _responses(200, "Ok", QUEUE_ERRORS),
            ),
        },
        "/queue/{name}/checkpoints/{consumer}": {
            "get": _operation(
                "How far a consumer processed each partition",
                keyed + _path("name", "consumer"),
                _responses(200, "CheckpointsAnswer", QUEUE_ERRORS),
            ),
            "put": _operation(
                "Record checkpoints",
                keyed + _path("name", "consumer"),
                _responses(200, "CheckpointsAnswer", QUEUE_ERRORS + BODY_ERRORS),
                checkpoints_body,
            ),
        },
        "/schedules": {
            "post": _operation(
                "Create a schedule: a message posted to a queue once per tick",
                keyed,
                _responses(201, "Schedule", (400, 401, 403, 409, 413, 415, 503)),
                {"required": True, "content": _json(_schema(CreateSchedule, components))},
            ),
            "get": _operation(
                "List the application's schedules",
                keyed,
                _responses(200, "ScheduleList", (401, 403, 503)),
            ),
        },
        "/schedules/{schedule}": {
            "get": _operation(
                "A schedule and its tick state",
                keyed + _path("schedule"),
                _responses(200, "Schedule", QUEUE_ERRORS),
            ),
            "delete": _operation(
                "Delete a schedule (what it posted stays)",
                keyed + _path("schedule"),
                _responses(200, "Ok", QUEUE_ERRORS),
            ),
        },
        "/schedules/{schedule}/pause": {
            "post": _operation(
                "Pause a schedule: no tick until it is resumed",
                keyed + _path("schedule"),
                _responses(200, "Schedule", QUEUE_ERRORS + (409,)),
            )
        },
        "/schedules/{schedule}/resume": {
            "post": _operation(
                "Resume a schedule from now on (ticks missed while paused are not posted)",
                keyed + _path("schedule"),
                _responses(200, "Schedule", QUEUE_ERRORS + (409,)),
            )
        },
        "/__heartbeat__": {
            "get": _operation(
                "Health of storage and coordination",
                [],
                {
                    **_responses(200, "Heartbeat", ()),
                    "503": {
                        "description": "a dependency is down; see Retry-After",
                        "headers": {"Retry-After": {"schema": {"type": "string"}}},
                        "content": _json({"$ref": REF.format(model="Heartbeat")}),
                    },
                },
            )
        },
        "/__lbheartbeat__": {"get": _operation("Liveness", [], _responses(200, "Ok", ()))},
        "/__version__": {
            "get": _operation("Build information", [], _responses(200, "Version", ()))
        },
        "/metrics": {
            "get": _operation(
                "Prometheus exposition (allowed addresses only)",
                [],
                _responses(
                    200,
                    {"content": {"text/plain": {"schema": {"type": "string"}}}},
                    (403,),
                ),
            )
        },
        "/openapi.json": {
            "get": _operation(
                "This description", [], _responses(200, {"content": _json({"type": "object"})}, ())
            )
        },
    }


def spec(models: Models) -> dict[str, Any]:
    _, definitions = models_json_schema(
        [(model, "validation") for model in RESPONSE_MODELS], ref_template=REF
    )
    components = _clean(definitions.get("$defs", {}))
    described = paths(models, components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Queuey",
            "version": release() or "0",
            "description": "A durable, partitioned message queue over HTTP.",
        },
        "paths": described,
        "components": {"schemas": components},
    }


@view_config(route_name="openapi", request_method="GET")
def openapi_view(request):
    web = web_state_of(request.registry)
    if web.openapi is None:
        web.openapi = spec(web.models)
    return json_response(web.openapi)

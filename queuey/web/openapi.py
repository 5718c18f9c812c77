"""The OpenAPI 3 description of the API, served at ``/openapi.json``.

Written by hand from DESIGN.md; ``tests/web/test_openapi.py`` checks that every
route the app serves is described here and that everything described exists.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pyramid.view import view_config

from queuey.limits import DEFAULT_READ, MAX_READ
from queuey.web.responses import json_response

APP_NAME = {
    "name": "X-Application-Name",
    "in": "header",
    "required": True,
    "schema": {"type": "string"},
}
APP_KEY = {"name": "ApplicationKey", "in": "header", "required": True, "schema": {"type": "string"}}
APP_KEY_PRIVATE = {**APP_KEY, "required": False, "description": "needed for private queues only"}
QUEUE = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,50}$"},
}


def _query(name: str, schema: dict, description: str) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _error(description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _ok(description: str, schema: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


ERRORS = {
    "400": _error("invalid parameter; every bad field is named"),
    "401": _error("missing or unknown application, or missing or wrong key"),
    "403": _error("right key from an address outside the application's allowlist"),
    "503": _error("storage unavailable; see Retry-After"),
}
NOT_FOUND = {"404": _error("no such queue")}
QUEUE_PARAMS = {
    "type": "object",
    "properties": {
        "queue_name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,50}$"},
        "partitions": {"type": "integer", "minimum": 1, "maximum": 200, "default": 1},
        "ttl": {"type": "integer", "minimum": 1, "default": 259200},
        "type": {"type": "string", "enum": ["public", "private"], "default": "public"},
        "consistency": {
            "type": "string",
            "enum": ["weak", "strong", "very_strong"],
            "default": "strong",
        },
    },
}
READ_PARAMS = [
    _query("since", {"type": "string"}, "a message id; only messages strictly after it"),
    _query(
        "since_timestamp",
        {"type": "string"},
        "seconds since the epoch (decimal); only messages strictly newer",
    ),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_READ, "default": DEFAULT_READ},
        "how many messages at most",
    ),
    _query(
        "order",
        {"type": "string", "enum": ["descending", "ascending"], "default": "descending"},
        "newest first (default) or oldest first",
    ),
    _query("partitions", {"type": "string"}, "comma list of partitions (default all)"),
]
PLACEMENT_PARAMS = [
    _query("partition", {"type": "integer", "minimum": 1}, "the partition (default random)"),
    _query("partition_key", {"type": "string"}, "hashed to a fixed partition"),
    _query("ttl", {"type": "integer", "minimum": 1}, "seconds the message lives"),
]

PATHS: dict[str, dict[str, Any]] = {
    "/queue": {
        "post": {
            "summary": "Create a queue",
            "parameters": [APP_NAME, APP_KEY],
            "requestBody": {
                "content": {
                    "application/json": {"schema": QUEUE_PARAMS},
                    "application/x-www-form-urlencoded": {"schema": QUEUE_PARAMS},
                }
            },
            "responses": {
                "201": _ok("the queue's metadata", "Queue"),
                "409": _error("a queue of that name exists"),
                **ERRORS,
            },
        },
        "get": {
            "summary": "List the application's queues",
            "parameters": [
                APP_NAME,
                APP_KEY,
                _query("limit", {"type": "integer", "maximum": MAX_READ}, "page size"),
                _query("offset", {"type": "string"}, "queue name to start after"),
                _query("details", {"type": "boolean"}, "metadata, not just names"),
            ],
            "responses": {"200": _ok("queue names or metadata", "QueueList"), **ERRORS},
        },
    },
    "/queue/{name}": {
        "post": {
            "summary": "Post one message (the body is the message, a JSON object)",
            "parameters": [APP_NAME, APP_KEY, QUEUE, *PLACEMENT_PARAMS],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "201": _ok("where the message went", "Posted"),
                **NOT_FOUND,
                "413": _error("message too large"),
                "415": _error("body not JSON"),
                **ERRORS,
            },
        },
        "get": {
            "summary": "Read messages",
            "parameters": [APP_NAME, APP_KEY_PRIVATE, QUEUE, *READ_PARAMS],
            "responses": {"200": _ok("the messages", "Messages"), **NOT_FOUND, **ERRORS},
        },
        "put": {
            "summary": "Update a queue (partitions may only grow)",
            "parameters": [APP_NAME, APP_KEY, QUEUE],
            "requestBody": {"content": {"application/json": {"schema": QUEUE_PARAMS}}},
            "responses": {"200": _ok("the new metadata", "Queue"), **NOT_FOUND, **ERRORS},
        },
        "delete": {
            "summary": "Delete a queue, or with delete=false only its messages",
            "parameters": [
                APP_NAME,
                APP_KEY,
                QUEUE,
                _query(
                    "delete",
                    {"type": "boolean", "default": True},
                    "false keeps the queue registered",
                ),
            ],
            "responses": {"200": _ok("done", "Ok"), **NOT_FOUND, **ERRORS},
        },
    },
    "/queue/{name}/batch": {
        "post": {
            "summary": "Post many messages, all or nothing",
            "parameters": [APP_NAME, APP_KEY, QUEUE],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}},
            },
            "responses": {
                "201": _ok("one entry per message, in order", "Posted"),
                **NOT_FOUND,
                "413": _error("a message or the batch is too large"),
                "415": _error("body not JSON"),
                **ERRORS,
            },
        },
    },
    "/queue/{name}/info": {
        "get": {
            "summary": "A queue's metadata",
            "parameters": [APP_NAME, APP_KEY_PRIVATE, QUEUE],
            "responses": {"200": _ok("metadata", "Queue"), **NOT_FOUND, **ERRORS},
        },
    },
    "/queue/{name}/messages/{ids}": {
        "get": {
            "summary": "Get messages by id",
            "parameters": [
                APP_NAME,
                APP_KEY_PRIVATE,
                QUEUE,
                {
                    "name": "ids",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "comma list of [partition:]message_id",
                },
            ],
            "responses": {"200": _ok("the messages found", "Messages"), **NOT_FOUND, **ERRORS},
        },
        "delete": {
            "summary": "Delete messages by id",
            "parameters": [
                APP_NAME,
                APP_KEY,
                QUEUE,
                {"name": "ids", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
            "responses": {"200": _ok("done", "Ok"), **NOT_FOUND, **ERRORS},
        },
    },
    "/queue/{name}/checkpoints/{consumer}": {
        "get": {
            "summary": "How far a consumer processed each partition",
            "parameters": [
                APP_NAME,
                APP_KEY,
                QUEUE,
                {"name": "consumer", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
            "responses": {"200": _ok("checkpoints", "Checkpoints"), **NOT_FOUND, **ERRORS},
        },
        "put": {
            "summary": "Record checkpoints",
            "parameters": [
                APP_NAME,
                APP_KEY,
                QUEUE,
                {"name": "consumer", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Checkpoints"}}
                },
            },
            "responses": {"200": _ok("checkpoints", "Checkpoints"), **NOT_FOUND, **ERRORS},
        },
    },
    "/__heartbeat__": {
        "get": {
            "summary": "Health of storage and coordination",
            "responses": {"200": _ok("healthy", "Ok"), "503": _error("a dependency is down")},
        }
    },
    "/__lbheartbeat__": {"get": {"summary": "Liveness", "responses": {"200": _ok("alive", "Ok")}}},
    "/__version__": {
        "get": {"summary": "Build information", "responses": {"200": _ok("version", "Ok")}}
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus exposition (allowed addresses only)",
            "responses": {
                "200": {"description": "text exposition format"},
                "403": _error("address not allowed"),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "summary": "This description",
            "responses": {"200": {"description": "OpenAPI 3 document"}},
        }
    },
}

MESSAGE_REF = {
    "type": "object",
    "properties": {
        "message_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
        "timestamp": {"type": "number"},
        "partition": {"type": "integer"},
    },
}

SCHEMAS = {
    "Ok": {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok"]}}},
    "Error": {
        "type": "object",
        "required": ["status", "error_msg"],
        "properties": {
            "status": {"type": "string", "enum": ["error"]},
            "error_msg": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "Queue": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "queue_name": {"type": "string"},
            "partitions": {"type": "integer"},
            "created": {"type": "integer"},
            "type": {"type": "string"},
            "ttl": {"type": "integer"},
            "consistency": {"type": "string"},
        },
    },
    "QueueList": {
        "type": "object",
        "properties": {"status": {"type": "string"}, "queues": {"type": "array"}},
    },
    "Posted": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "messages": {"type": "array", "items": MESSAGE_REF},
        },
    },
    "Messages": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "messages": {
                "type": "array",
                "items": {
                    **MESSAGE_REF,
                    "properties": {**MESSAGE_REF["properties"], "body": {"type": "object"}},
                },
            },
        },
    },
    "Batch": {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["body"],
                    "properties": {
                        "body": {"type": "object"},
                        "partition": {"type": "integer"},
                        "partition_key": {"type": "string"},
                        "ttl": {"type": "integer"},
                    },
                },
            }
        },
    },
    "Checkpoints": {
        "type": "object",
        "properties": {
            "checkpoints": {"type": "object", "additionalProperties": {"type": "string"}}
        },
    },
}


def spec() -> dict[str, Any]:
    try:
        release = version("queuey")
    except PackageNotFoundError:
        release = "0"
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Queuey",
            "version": release,
            "description": "A durable, partitioned message queue over HTTP.",
        },
        "paths": PATHS,
        "components": {"schemas": SCHEMAS},
    }


@view_config(route_name="openapi", request_method="GET")
def openapi_view(request):
    return json_response(spec())

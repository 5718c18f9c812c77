"""The OpenAPI 3.1 description served at ``/openapi.json``, assembled from the
pydantic models the views validate with (:mod:`queuey.web.schemas`).

Query parameters are the fields of a model, request bodies are a model's JSON
schema, responses reference the response models; which operation takes which
model and answers which codes is the table in :mod:`queuey.web.operations`,
which this module turns into OpenAPI.
``tests/web/test_openapi.py`` checks that every route served is described and
everything described is served; ``tests/web/test_schemathesis.py`` fuzzes the
live service against this description.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from queuey.web import ROUTES
from queuey.web.health import release
from queuey.web.operations import ERRORS, OPERATIONS, Body, Failure, ModelRef, Operation
from queuey.web.responses import json_response
from queuey.web.schemas import PATH_PARAMS, Models
from queuey.web.state import web_state_of
from queuey.wire import Error

#: Queues the description's examples name; the schemathesis test creates them
#: so generated calls reach real queues.
EXAMPLE_QUEUES = {"spec-queue": "public"}
REF = "#/components/schemas/{model}"
RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}}}


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
HEADERS = {"keyed": [APP, KEY], "reader": [APP, READ_KEY], "anyone": []}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _answer(description: str, model: type[BaseModel]) -> dict[str, Any]:
    ref = REF.format(model=model.__name__)
    return {"description": description, "content": _json({"$ref": ref})}


def _responses(operation: Operation) -> dict[str, Any]:
    if isinstance(operation.answer, type):
        responses = {str(operation.status): _answer("success", operation.answer)}
    else:
        responses = {str(operation.status): {"description": "success", **operation.answer}}
    failures = [
        f if isinstance(f, Failure) else Failure(f, ERRORS[f], Error)
        for f in (*operation.errors, 405)
    ]
    for failure in sorted(failures, key=lambda f: f.status):
        response = _answer(failure.description, failure.answer)
        if failure.status == 405:
            response["headers"] = {"Allow": {"schema": {"type": "string"}, "required": True}}
        if failure.status in (429, 503, 507):
            response["headers"] = RETRY_AFTER
        responses[str(failure.status)] = response
    return responses


def _body(body: Body | None, models: Models, components: dict[str, Any]) -> dict[str, Any]:
    """An operation's ``requestBody``, if it takes one. Form bodies are
    optional (their fields may come in the query string)."""
    if body is None:
        return {}
    if body.model is None:
        return {"requestBody": {"required": True, "content": _json({"type": "object"})}}
    schema = _schema(_model(body.model, models), components)
    if body.form:
        form = {"application/x-www-form-urlencoded": {"schema": schema}}
        return {"requestBody": {"content": {**_json(schema), **form}}}
    return {"requestBody": {"required": True, "content": _json(schema)}}


def _model(ref: ModelRef, models: Models) -> type[BaseModel]:
    return getattr(models, ref) if isinstance(ref, str) else ref


def paths(models: Models, components: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The operation table (:data:`~queuey.web.operations.OPERATIONS`) as
    OpenAPI paths; models nested in request bodies are added to ``components``."""
    patterns = {name: pattern for name, pattern, _ in ROUTES}
    described: dict[str, dict[str, Any]] = {}
    for operation in OPERATIONS:
        path = patterns[operation.route]
        parameters = HEADERS[operation.caller] + _path(*re.findall(r"{(\w+)}", path))
        if operation.query is not None:
            parameters = parameters + _query(_model(operation.query, models))
        described.setdefault(path, {})[operation.method] = {
            "summary": operation.summary,
            "parameters": parameters,
            **_body(operation.body, models, components),
            "responses": _responses(operation),
        }
    return described


def answer_models() -> list[type[BaseModel]]:
    """The models the operations answer with, the error shape first."""
    found: dict[type[BaseModel], None] = {Error: None}
    for operation in OPERATIONS:
        if isinstance(operation.answer, type):
            found[operation.answer] = None
        found.update((f.answer, None) for f in operation.errors if isinstance(f, Failure))
    return list(found)


def spec(models: Models) -> dict[str, Any]:
    _, definitions = models_json_schema(
        [(model, "validation") for model in answer_models()], ref_template=REF
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


def openapi_view(request):
    web = web_state_of(request.registry)
    if web.openapi is None:
        web.openapi = spec(web.models)
    return json_response(web.openapi)

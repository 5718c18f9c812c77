"""One error view per failure kind, one error shape for all of them."""

from __future__ import annotations

import logging

from pyramid.exceptions import PredicateMismatch, URLDecodeError
from pyramid.httpexceptions import HTTPException, HTTPForbidden, HTTPNotFound
from pyramid.view import exception_view_config, forbidden_view_config, notfound_view_config

from queuey.core.flow import FlowRefused
from queuey.core.quotas import Throttled, TooManyQueues
from queuey.errors import (
    InvalidUpdate,
    QueueExists,
    QueueNotFound,
    StorageUnavailable,
)
from queuey.jsonio import InvalidJSON, NotJSON
from queuey.web.params import InvalidParameters, PayloadTooLarge
from queuey.web.responses import error
from queuey.web.security import Refused
from queuey.web.state import web_state_of

log = logging.getLogger(__name__)


@exception_view_config(InvalidParameters)
def invalid_parameters(exc, request):
    return error(400, exc.errors)


@exception_view_config(InvalidJSON)
def invalid_json(exc, request):
    return error(400, {"body": str(exc)})


@exception_view_config(URLDecodeError)
def path_not_utf8(exc, request):
    return error(400, {"path": "the path is not valid UTF-8"})


@exception_view_config(InvalidUpdate)
def invalid_update(exc, request):
    return error(400, {"partitions": str(exc)})


@exception_view_config(PayloadTooLarge)
def too_large(exc, request):
    return error(413, {exc.field: str(exc)})


@exception_view_config(NotJSON)
def not_json(exc, request):
    return error(415, {"body": str(exc)})


@exception_view_config(QueueNotFound)
def queue_not_found(exc, request):
    return error(404, {"queue_name": f"no queue named {exc}"})


@exception_view_config(QueueExists)
def queue_exists(exc, request):
    return error(409, {"queue_name": f"a queue named {exc} exists already"})


@exception_view_config(Throttled)
def throttled(exc, request):
    return error(429, {"rate_limit": str(exc)}, headers={"Retry-After": str(exc.retry_after)})


@exception_view_config(FlowRefused)
def flow_refused(exc, request):
    """Paused, full, over a rate or a quota: the setting named, when to retry."""
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return error(exc.status, {exc.field: str(exc)}, headers=headers)


@exception_view_config(TooManyQueues)
def too_many_queues(exc, request):
    return error(403, {"max_queues": str(exc)})


@exception_view_config(StorageUnavailable)
def unavailable(exc, request):
    log.warning("storage unavailable: %s", exc)
    return error(
        503,
        {"storage": "the message store is unavailable, retry later"},
        headers={"Retry-After": str(exc.retry_after)},
    )


@forbidden_view_config()
def forbidden(exc: HTTPForbidden, request):
    result = getattr(exc, "result", None)
    if isinstance(result, Refused):
        return error(result.status, {result.field: str(result)})
    return error(403, {"permission": "not allowed"})


@notfound_view_config()
def not_found(exc: HTTPNotFound, request):
    if isinstance(exc, PredicateMismatch) and request.matched_route is not None:
        allowed = allowed_methods(request.registry).get(request.matched_route.name, ())
        return error(
            405,
            {"method": f"{request.method[:20]} is not allowed here"},
            headers={"Allow": ", ".join(sorted(allowed))},
        )
    return error(404, {"path": "no resource at this path"})


def allowed_methods(registry) -> dict[str, frozenset[str]]:
    """Route name -> the methods its views answer (GET implies HEAD, as in
    Pyramid), read once from the registered views for ``Allow``."""
    web = web_state_of(registry)
    table = web.allowed_methods
    if table is None:
        found: dict[str, set[str]] = {}
        for item in registry.introspector.get_category("views"):
            view = item["introspectable"]
            methods = view["request_methods"]
            if view["route_name"] is None or not methods:
                continue
            methods = {methods} if isinstance(methods, str) else set(methods)
            if "GET" in methods:
                methods.add("HEAD")
            found.setdefault(view["route_name"], set()).update(methods)
        table = {route: frozenset(methods) for route, methods in found.items()}
        web.allowed_methods = table
    return table


@exception_view_config(HTTPException)
def http_exception(exc: HTTPException, request):
    return error(exc.code, {"http": exc.title})


@exception_view_config(Exception)
def last_resort(exc, request):
    log.error(
        "unhandled %s on %s %s: %s",
        type(exc).__name__,
        request.method,
        request.environ.get("PATH_INFO", ""),
        exc,
        exc_info=exc,
    )
    return error(500, {"server": "internal error; it has been logged"})

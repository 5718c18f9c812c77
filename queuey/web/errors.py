"""One error view per failure kind, one error shape for all of them.

Every refusal of the core is one entry of :data:`queuey.errors.CATALOGUE`,
answered by one view (:func:`refused`); the views here add what only the web
door meets: undecodable paths, 401/403, 404/405, other HTTP errors and the
last resort.
"""

from __future__ import annotations

import logging

from pyramid.exceptions import PredicateMismatch, URLDecodeError
from pyramid.httpexceptions import HTTPException, HTTPForbidden, HTTPNotFound
from pyramid.view import exception_view_config, forbidden_view_config, notfound_view_config

from queuey.errors import Catalogued
from queuey.web.responses import error
from queuey.web.security import Refused
from queuey.web.state import web_state_of

log = logging.getLogger(__name__)


@exception_view_config(URLDecodeError)
def path_not_utf8(exc, request):
    return error(400, {"path": "the path is not valid UTF-8"})


@exception_view_config(Catalogued)
def refused(exc: Catalogued, request):
    """Any refusal of the catalogue: its status, ``{field: text}`` and, where
    the entry says, ``Retry-After``."""
    entry = exc.entry
    if entry.name == "storage_unavailable":
        log.warning("storage unavailable: %s", exc)
    wait = exc.wait()
    headers = None if wait is None else {"Retry-After": str(wait)}
    return error(entry.status, exc.errors_by_field(), headers=headers)


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


def log_unhandled(logger: logging.Logger, exc: Exception, request, where: str = "") -> None:
    """Log what no other view answers, with its traceback (never in the answer)."""
    logger.error(
        "unhandled %s on %s%s %s: %s",
        type(exc).__name__,
        where,
        request.method,
        request.environ.get("PATH_INFO", ""),
        exc,
        exc_info=exc,
    )


@exception_view_config(Exception)
def last_resort(exc, request):
    log_unhandled(log, exc, request)
    return error(500, {"server": "internal error; it has been logged"})

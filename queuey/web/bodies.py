"""Every request's body, bounded before anything reads it.

Each route has a largest body it accepts
(:attr:`queuey.web.state.WebState.body_limits`, route name -> bytes),
declared by the door that owns the route: the API's routes by the setting
their operation names (``queuey.max_message_size``, ``queuey.max_batch_size``),
which their views read with, the SQS endpoint's and the admin pages' message
form by their own includes (:func:`add_body_limit`); every other route, and a
path no route matches, takes ``queuey.max_form_size``.

:class:`BodyLimits` runs first for every request, before the fast path, the
router, the tweens, route contexts, the security policy and the CSRF check
(:class:`queuey.web.fastpath.FastPath` calls it before anything else). A
declared ``Content-Length`` over the route's limit is refused at once,
without reading a byte of the body; a body without one (chunked) is read
then, at most one byte over the limit, and handed on with its length. The
refusal is a 413 worded by the route's own door: the JSON error shape on the
API, an admin page under ``/admin``, SQS's ``RequestEntityTooLarge`` on the
SQS endpoint (each door's exception view for
:class:`~queuey.web.params.PayloadTooLarge`).

Whatever reads a body later reads one of known, bounded size: the views
through :mod:`queuey.web.params`, WebOb (a form, the CSRF token) through
:meth:`queuey.app.QueueyRequest.copy_body`, both in one read.
"""

from __future__ import annotations

import io
import sys
import time
from typing import Any

from pyramid.events import NewResponse
from pyramid.interfaces import IRouteRequest, IRoutesMapper
from pyramid.threadlocal import manager

from queuey.core.services import services_of
from queuey.web.operations import OPERATIONS
from queuey.web.params import PayloadTooLarge, too_large
from queuey.web.state import web_state_of

#: Bytes read from the server's input at a time.
CHUNK = 65536


def add_body_limit(config, route_name: str, limit: int) -> None:
    """Let ``route_name`` take bodies of up to ``limit`` bytes (the default
    is ``queuey.max_form_size``)."""
    web_state_of(config.registry).body_limits[route_name] = limit


def read_at_most(stream: Any, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream`` (fewer at its end), joined once."""
    parts, got = [], 0
    while got < size:
        chunk = stream.read(min(size - got, CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class BodyLimits:
    """The first check of every request (see the module's docstring)."""

    def __init__(self, registry: Any, request_factory: type) -> None:
        self.registry = registry
        self.request_factory = request_factory
        web = web_state_of(registry)
        self.record = web.recorder
        limits = web.body_limits
        default = services_of(registry).settings.max_form_size
        routes = registry.queryUtility(IRoutesMapper).get_routes()
        unknown = set(limits) - {route.name for route in routes}
        if unknown:
            raise ValueError(f"body limits for routes nobody registered: {sorted(unknown)}")
        #: Every route, in the router's order, with its limit.
        self.routes = [(route, limits.get(route.name, default)) for route in routes]
        self.default = default
        #: A body this small is within every route's limit: no route to look up.
        self.floor = min([default, *limits.values()])

    def __call__(self, environ: dict) -> Any:
        """``None`` when the request may go on (its body bounded), else the
        413 response to send instead."""
        length = environ.get("CONTENT_LENGTH")
        chunked = "HTTP_TRANSFER_ENCODING" in environ
        if not chunked:
            if not length or (length.isdigit() and int(length) <= self.floor):
                return None
        route, match, limit = self.route_of(environ)
        if not chunked and length.isdigit():
            return None if int(length) <= limit else self.refuse(environ, route, match, limit)
        # No usable length (chunked): read the body now, at most one byte past the limit.
        raw = read_at_most(environ["wsgi.input"], limit + 1)
        if len(raw) > limit:
            return self.refuse(environ, route, match, limit)
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        return None

    def route_of(self, environ: dict) -> tuple[Any, dict | None, int]:
        """The route the router would match (routes here have no route
        predicates), its match and its limit."""
        try:
            path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
        except UnicodeError:  # the router answers 400
            return None, None, self.default
        for route, limit in self.routes:
            match = route.match(path)
            if match is not None:
                return route, match, limit
        return None, None, self.default

    def refuse(self, environ: dict, route: Any, match: dict | None, limit: int) -> Any:
        """The route's door's answer to :class:`PayloadTooLarge`, counted and
        logged like any answer, with the subscribers' headers."""
        registry = self.registry
        request = self.request_factory(environ)
        request.registry = registry
        request.matched_route = route
        request.matchdict = match or {}
        if route is not None:
            request.request_iface = registry.queryUtility(IRouteRequest, name=route.name)
        manager.push({"request": request, "registry": registry})
        try:
            start = time.perf_counter()
            try:
                raise too_large(limit)
            except PayloadTooLarge:
                response = request.invoke_exception_view(sys.exc_info())
            registry.notify(NewResponse(request, response))
            self.record(request, response, time.perf_counter() - start)
            return response
        finally:
            manager.pop()


def includeme(config) -> None:
    """The API's routes that take a body: the limit of each, as its
    operation says (:data:`queuey.web.operations.OPERATIONS`)."""
    settings = services_of(config.registry).settings
    for operation in OPERATIONS:
        if operation.body is not None:
            add_body_limit(config, operation.route, getattr(settings, operation.body.limit))

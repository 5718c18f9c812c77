"""The API's busiest calls, dispatched without Pyramid's router.

Posting, batch posting, reading, reserving and acking are most of a queue's
traffic. Through Pyramid's router each pays for route matching over every
route, four event notifications (the admin pages subscribe to responses), two
tweens and a chain of view wrappers: measured on the production server, about
as much CPU as the view itself (``docs/performance.rst``).

:class:`FastPath` sits in front of the router. A request whose method and path
are one of :data:`ROUTES` exactly (``/queue/<name>[/batch|/reserve|/ack]``,
the name in plain ASCII) runs the same view function, with the same request
class, route context, security policy, exception views and request
metrics/log line as through the router, in that order; anything else (other
paths and methods, percent-encoded names, HEAD) goes to the router untouched.
Every request, on either path, first has its body's size checked against its
route's limit (:mod:`queuey.web.bodies`).
``tests/web/test_fastpath.py`` checks both ways answer alike.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from pyramid.httpexceptions import HTTPForbidden, HTTPNotFound
from pyramid.interfaces import IRouteRequest, IRoutesMapper, ISecurityPolicy
from pyramid.threadlocal import manager

from queuey.web.bodies import BodyLimits
from queuey.web.resources import QueueContext

#: ``/queue/<name>`` plus an optional action; names outside this alphabet
#: (percent-encoded ones among them) take the router's path.
_PATH = re.compile(r"/queue/([A-Za-z0-9_.-]+)(/batch|/reserve|/ack)?\Z")

#: (method, action) -> the route whose view serves it. The view and its
#: permission are read from what the views registered (``view_config``), so
#: they cannot drift from the router's.
ROUTES: dict[tuple[str, str | None], str] = {
    ("POST", None): "queue",
    ("GET", None): "queue",
    ("POST", "/batch"): "queue_batch",
    ("POST", "/reserve"): "queue_reserve",
    ("POST", "/ack"): "queue_ack",
}


def registered_views(registry) -> dict[tuple[str, str], tuple[Callable, Any]]:
    """(route name, method) -> (view callable, permission) of every view
    registered for one route and one method."""
    found = {}
    for item in registry.introspector.get_category("views"):
        view = item["introspectable"]
        methods = view["request_methods"]
        if view["route_name"] is None or not isinstance(methods, str):
            continue
        permissions = [r["value"] for r in item["related"] if r.category_name == "permissions"]
        found[(view["route_name"], methods)] = (view["callable"], next(iter(permissions), None))
    return found


class FastPath:
    """WSGI: :data:`ROUTES` served directly, everything else by ``router``."""

    def __init__(self, router: Any, request_factory: type) -> None:
        self.router = router
        self.registry = registry = router.registry
        self.request_factory = request_factory
        self.policy = registry.queryUtility(ISecurityPolicy)
        self.record = registry.queuey_web.recorder
        self.bounded = BodyLimits(registry, request_factory)
        mapper = registry.queryUtility(IRoutesMapper)
        views = registered_views(registry)
        self.routes = {
            (method, action): (
                *views[(name, method)],
                mapper.get_route(name),
                registry.queryUtility(IRouteRequest, name=name),
            )
            for (method, action), name in ROUTES.items()
        }

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)  # registry, introspector... as on the router

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        # Before anything else, on either path: the body's size (queuey.web.bodies).
        if "CONTENT_LENGTH" in environ or "HTTP_TRANSFER_ENCODING" in environ:
            refusal = self.bounded(environ)
            if refusal is not None:
                return refusal(environ, start_response)
        path = environ.get("PATH_INFO", "")
        match = _PATH.match(path) if path.startswith("/queue/") else None
        entry = match and self.routes.get((environ.get("REQUEST_METHOD"), match.group(2)))
        if not entry:
            return self.router(environ, start_response)
        view, permission, route, request_iface = entry
        registry = self.registry
        request = self.request_factory(environ)
        request.registry = registry
        request.matchdict = {"name": match.group(1)}
        request.matched_route = route
        request.request_iface = request_iface
        manager.push({"request": request, "registry": registry})
        try:
            start = time.perf_counter()
            try:
                request.context = context = QueueContext(request)
                # As Pyramid's secured view: a view without a permission is public.
                allowed = permission is None or self.policy.permits(request, context, permission)
                if not allowed:
                    raise HTTPForbidden(
                        f"Unauthorized: {view.__name__} failed permission check", result=allowed
                    )
                response = view(request)
            except Exception:  # noqa: BLE001 - answered by the exception views, as the router does
                exc_info = sys.exc_info()
                try:
                    response = request.invoke_exception_view(exc_info)
                except HTTPNotFound:
                    raise exc_info[1] from None
            self.record(request, response, time.perf_counter() - start)
            return response(environ, start_response)
        finally:
            manager.pop()

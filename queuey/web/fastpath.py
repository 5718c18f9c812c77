"""The API's busiest calls, with the router's work they do not need left out.

Posting, batch posting, reading, reserving and acking are most of a queue's
traffic. Through Pyramid's router each also pays for events nobody listens to,
a view lookup and a multi-view that tries each of the route's views in turn
(building a ``PredicateMismatch`` response for every one that does not take
the method: a read tries the post view first). Measured in one process, a
read of an empty queue took 79 µs of CPU through the router and 55 µs here, a
post 136 µs and 128 µs.

:class:`FastPath` *is* Pyramid's router (a :class:`pyramid.router.Router` on
the same registry) with one method changed: ``handle_request``. So everything
around it is Pyramid's own code, run as for any request: the execution
policy, the request factory, ``add_request_method`` extensions, the thread
locals, every tween (the registry's chain, built around this
``handle_request`` as the router builds it around its own: each tween factory
is called once more for it), response and finished callbacks, ``NewResponse``.
Nothing of the calls' lifecycle is restated here.

Inside ``handle_request`` a request for one of :data:`SERVED` (route name,
method) is answered from what Pyramid registered, looked up once at start-up:

* the route: the mapper's own route objects, in the router's order. A path is
  matched with each route's compiled ``match``, from the first registered
  route on, so a path an earlier route matches is the router's (and goes
  there), exactly as the mapper would decide;
* the context: the route's factory, then the registry's traverser, as the
  router does;
* the view: the *derived* view Pyramid registered (permission check, CSRF
  check, view mapper, decorators, renderer, wrapper and every view deriver
  included), called as the multi-view would call it.

``BeforeTraversal`` and ``ContextFound`` are notified at the router's points
when anyone subscribes to them. Every other request runs the router's own
``handle_request``, unchanged.

Start-up check: what the fast path could answer differently is refused when
it is built, with :class:`queuey.errors.ConfigurationError` naming each item:

* a ``NewRequest`` subscriber: the router notifies it before it matches
  routes, and it may change where a request goes; the fast path has chosen
  the route by then (the admin pages subscribe to ``NewResponse`` only, which
  Pyramid's own code notifies here as on the router);
* a served route with predicates, or a mapper that is not Pyramid's;
* a served view with predicates beyond its method (or an ``accept``), or
  another view of the route the same method could reach: then which view
  answers depends on more than the path and method;
* ``pyramid.debug_routematch`` (the router logs each match), a request
  factory that is not the router's.

Every request, on either path, first has its body's size checked against its
route's limit (:mod:`queuey.web.bodies`). ``tests/web/test_fastpath.py``
checks that both ways answer alike, byte for byte, headers included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyramid.events import BeforeTraversal, ContextFound, NewRequest
from pyramid.interfaces import (
    IRequest,
    IRouteRequest,
    IRoutesMapper,
    ITraverser,
)
from pyramid.predicates import RequestMethodPredicate
from pyramid.router import Router
from pyramid.traversal import ResourceTreeTraverser
from pyramid.urldispatch import RoutesMapper
from zope.interface import implementedBy

from queuey.errors import ConfigurationError
from queuey.web.bodies import BodyLimits

#: The calls worth a path of their own (a performance choice, nothing more:
#: their URL grammar, context, view and permission all come from Pyramid's
#: registry).
SERVED: tuple[tuple[str, str], ...] = (
    ("queue", "POST"),
    ("queue", "GET"),
    ("queue_batch", "POST"),
    ("queue_reserve", "POST"),
    ("queue_ack", "POST"),
)


def _name(thing: Any) -> str:
    module = getattr(thing, "__module__", None)
    qualname = getattr(thing, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(thing)


def _takes(view: Any, method: str) -> bool:
    """Whether a view (its introspectable) can answer ``method``, as its
    ``request_method`` predicate decides (GET takes HEAD too)."""
    methods = view["request_methods"]
    if methods is None:
        return True
    methods = (methods,) if isinstance(methods, str) else methods
    return method in methods or (method == "HEAD" and "GET" in methods)


def _subscribers(registry: Any, event: type) -> list:
    """Everything ``registry.notify`` would call for an ``event``."""
    return registry.adapters.subscriptions([implementedBy(event)], None)


def served_views(registry: Any, served: Iterable[tuple[str, str]]) -> tuple[dict, list[str]]:
    """(route name, method) -> the derived view Pyramid calls for it, and
    what would make the fast path's choice differ from the multi-view's."""
    by_route: dict[str, list] = {}
    for item in registry.introspector.get_category("views"):
        view = item["introspectable"]
        if view["route_name"] is not None and not view["exception_only"] and not view["name"]:
            by_route.setdefault(view["route_name"], []).append(view)
    found, problems = {}, []
    for route_name, method in served:
        views = [v for v in by_route.get(route_name, ()) if _takes(v, method)]
        if len(views) != 1:
            named = ", ".join(_name(v["callable"]) for v in views) or "none"
            problems.append(
                f"{method} on route {route_name!r} must reach exactly one view, it reaches: {named}"
            )
            continue
        view = views[0]
        extra = [
            p.text() for p in view["predicates"] or () if not isinstance(p, RequestMethodPredicate)
        ]
        if view["accept"] is not None:
            extra.append(f"accept = {view['accept']}")
        if extra:
            problems.append(
                f"view {_name(view['callable'])} ({method} on route {route_name!r}) "
                f"has predicates the fast path does not decide: {', '.join(extra)}"
            )
        found[(route_name, method)] = view["derived_callable"]
    return found, problems


def startup_problems(router: Router, request_factory: type, mapper: Any) -> list[str]:
    """Whatever, configured outside the served views, the fast path could not
    reproduce exactly (see the module's docstring)."""
    registry = router.registry
    problems = [
        f"NewRequest subscriber {_name(getattr(s, 'handler', s))} (it runs before routing)"
        for s in _subscribers(registry, NewRequest)
    ]
    if not isinstance(mapper, RoutesMapper):
        problems.append(f"routes mapper {_name(type(mapper))} is not Pyramid's")
    if router.debug_routematch:
        problems.append("pyramid.debug_routematch is on (the router logs every match)")
    if request_factory is not router.request_factory:
        problems.append(
            f"request factory {_name(request_factory)} is not the router's "
            f"({_name(router.request_factory)})"
        )
    return problems


class FastPath(Router):
    """WSGI: Pyramid's router, answering :data:`SERVED` without its lookups.

    ``router`` is the app Pyramid made (``config.make_wsgi_app()``), kept as
    :attr:`router` to compare against; the fast path shares its registry.
    """

    def __init__(
        self,
        router: Router,
        request_factory: type,
        served: Iterable[tuple[str, str]] = SERVED,
    ) -> None:
        registry = router.registry
        #: The plain router (for comparisons: the fast path does not call it).
        self.router = router
        super().__init__(registry)  # the tweens wrap this class's handle_request
        served = tuple(served)
        mapper = registry.queryUtility(IRoutesMapper)
        problems = startup_problems(router, request_factory, mapper)
        views, view_problems = served_views(registry, served)
        problems += view_problems
        routes = mapper.get_routes() if mapper is not None else []
        names = [route.name for route in routes]
        for route_name, _ in served:
            if route_name not in names:
                problems.append(f"route {route_name!r} is not registered")
        served_routes = {route_name for route_name, _ in served}
        for route in routes:
            if route.name in served_routes and route.predicates:
                texts = ", ".join(p.text() for p in route.predicates)
                problems.append(
                    f"route {route.name!r} has predicates the fast path does not decide: {texts}"
                )
        if problems:
            raise ConfigurationError(
                "fast path", "it would answer unlike the router: " + "; ".join(problems)
            )
        last = max(names.index(route_name) for route_name in served_routes)
        #: Every route up to the last served one, in the router's order.
        self.routes = tuple(routes[: last + 1])
        #: method -> route name -> (derived view, route's request interface).
        self.served: dict[str, dict[str, tuple[Callable, Any]]] = {}
        for (route_name, method), view in views.items():
            iface = registry.queryUtility(IRouteRequest, name=route_name, default=IRequest)
            self.served.setdefault(method, {})[route_name] = (view, iface)
        self.before_traversal = bool(_subscribers(registry, BeforeTraversal))
        self.context_found = bool(_subscribers(registry, ContextFound))
        #: No traverser registered: Pyramid's default one, without a lookup per request.
        self.default_traverser = not any(
            r.provided is ITraverser for r in registry.registeredAdapters()
        )
        self.bounded = BodyLimits(registry, request_factory)

    def route_of(self, request) -> tuple[Any, dict, Callable, Any] | None:
        """(route, match, derived view, request interface) when the request is
        served here; ``None`` when it is the router's (another route or
        method, a path an earlier route matches, a path that is not UTF-8)."""
        environ = request.environ
        by_route = self.served.get(environ.get("REQUEST_METHOD", "GET"))  # request.method
        if by_route is None:
            return None
        # The path as the mapper reads it (``request.path_info``: latin-1 to
        # the request's URL encoding), without WebOb's descriptors for ASCII,
        # which decodes to itself.
        path = environ.get("PATH_INFO") or "/"
        if not path.isascii():
            try:
                path = path.encode("latin-1").decode(request.url_encoding)
            except UnicodeError:  # the router answers (URLDecodeError)
                return None
        for route in self.routes:
            match = route.match(path)
            if match is not None:
                entry = by_route.get(route.name)
                return None if entry is None else (route, match, *entry)
        return None

    def handle_request(self, request):
        """The router's ``handle_request`` (:class:`pyramid.router.Router`)
        for a served call, its route, context and view already known."""
        served = self.route_of(request)
        if served is None:
            return super().handle_request(request)
        route, match, view, request_iface = served
        registry = self.registry
        attrs = request.__dict__
        attrs["matchdict"] = match
        attrs["matched_route"] = route
        request.request_iface = request_iface
        if self.before_traversal:
            registry.notify(BeforeTraversal(request))
        root = attrs["root"] = (route.factory or self.root_factory)(request)
        traverser = None if self.default_traverser else registry.queryAdapter(root, ITraverser)
        found = (traverser or ResourceTreeTraverser(root))(request)
        attrs.update(found)
        if self.context_found:
            registry.notify(ContextFound(request))
        return view(found["context"], request)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        # Before anything else, on either path: the body's size (queuey.web.bodies).
        if "CONTENT_LENGTH" in environ or "HTTP_TRANSFER_ENCODING" in environ:
            refusal = self.bounded(environ)
            if refusal is not None:
                return refusal(environ, start_response)
        return super().__call__(environ, start_response)

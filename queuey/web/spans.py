"""The service's own spans (OpenTelemetry), when an SDK is configured in its
process (:func:`queuey.tracing.enabled`): one server span per post, batch
and reserve, named by its route, a child of the caller's ``traceparent``
header; a reserve's span links to the span each delivered message was
produced in (:func:`queuey.tracing.link_current`, in the view). Without an
SDK the tween costs one check per request.
"""

from __future__ import annotations

from opentelemetry import propagate
from opentelemetry.trace import SpanKind

from queuey import tracing

#: The routes whose requests get a span (a POST), and each span's name.
TRACED = {
    "queue": "queuey post",
    "queue_batch": "queuey post batch",
    "queue_reserve": "queuey reserve",
}


def spans_tween_factory(handler, registry):
    def tween(request):
        if not tracing.enabled():
            return handler(request)
        # Routes are matched after the tweens (by the router or the fast path):
        # the span is named by the path, whose shape names the route.
        found = _traced_route(request.path_info) if request.method == "POST" else None
        if found is None:
            return handler(request)
        name, queue = found
        parent = propagate.extract(request.headers)
        with tracing.tracer().start_as_current_span(
            name, context=parent, kind=SpanKind.SERVER
        ) as span:
            response = handler(request)
            span.set_attribute("http.response.status_code", response.status_code)
            span.set_attribute("messaging.destination.name", queue)
            return response

    return tween


def _traced_route(path: str) -> tuple[str, str] | None:
    """The span name and queue of a path ``/queue/{name}[/batch|/reserve]``."""
    parts = path.split("/")
    if len(parts) == 3 and parts[1] == "queue":
        return TRACED["queue"], parts[2]
    if len(parts) == 4 and parts[1] == "queue" and parts[3] in ("batch", "reserve"):
        return TRACED[f"queue_{parts[3]}"], parts[2]
    return None


def includeme(config) -> None:
    config.add_tween("queuey.web.spans.spans_tween_factory")

"""The HTTP layer: routes, contexts, views, errors, metrics."""

from queuey.web.operations import OPERATIONS

_QUEUE = "queuey.web.resources.QueueContext"
ROUTES = [
    # name, pattern, factory (None: Pyramid's default context, never a public queue)
    ("queues", "/queue", None),
    ("queue", "/queue/{name}", _QUEUE),
    *(
        (f"queue_{page}", f"/queue/{{name}}/{page}", _QUEUE)
        for page in "batch info reserve ack release extend stats pause resume subscriptions".split()
    ),
    ("queue_subscription", "/queue/{name}/subscriptions/{subscription}", _QUEUE),
    ("queue_subscription_pause", "/queue/{name}/subscriptions/{subscription}/pause", _QUEUE),
    ("queue_subscription_resume", "/queue/{name}/subscriptions/{subscription}/resume", _QUEUE),
    ("queue_redrive", "/queue/{name}/redrive", _QUEUE),
    ("queue_messages", "/queue/{name}/messages/{ids}", _QUEUE),
    ("queue_message_explain", "/queue/{name}/messages/{message}/explain", _QUEUE),
    ("queue_checkpoints", "/queue/{name}/checkpoints/{consumer}", _QUEUE),
    ("schedules", "/schedules", None),
    ("schedule", "/schedules/{schedule}", None),
    ("schedule_pause", "/schedules/{schedule}/pause", None),
    ("schedule_resume", "/schedules/{schedule}/resume", None),
    ("heartbeat", "/__heartbeat__", None),
    ("lbheartbeat", "/__lbheartbeat__", None),
    ("version", "/__version__", None),
    ("metrics", "/metrics", None),
    ("openapi", "/openapi.json", None),
]


def includeme(config) -> None:
    """The REST API's routes, the view of each operation
    (:data:`queuey.web.operations.OPERATIONS`) and request metrics; the error
    views come with the app's ``config.scan("queuey.web")``. Reads only what
    the app factory built (:mod:`queuey.core.services`, :mod:`queuey.web.state`)."""
    for name, pattern, factory in ROUTES:
        config.add_route(name, pattern, factory=factory)
    for operation in OPERATIONS:
        config.add_view(
            f"queuey.web.{operation.view}",
            route_name=operation.route,
            request_method=operation.method.upper(),
            permission=operation.permission,
        )
    config.include("queuey.web.metrics")
    config.include("queuey.web.spans")

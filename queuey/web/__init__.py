"""The HTTP layer: routes, contexts, views, errors, metrics."""

from queuey.web.operations import OPERATIONS

ROUTES = [
    # name, pattern, factory
    ("queues", "/queue", "queuey.web.resources.ApplicationContext"),
    ("queue", "/queue/{name}", "queuey.web.resources.QueueContext"),
    ("queue_batch", "/queue/{name}/batch", "queuey.web.resources.QueueContext"),
    ("queue_info", "/queue/{name}/info", "queuey.web.resources.QueueContext"),
    ("queue_reserve", "/queue/{name}/reserve", "queuey.web.resources.QueueContext"),
    ("queue_ack", "/queue/{name}/ack", "queuey.web.resources.QueueContext"),
    ("queue_release", "/queue/{name}/release", "queuey.web.resources.QueueContext"),
    ("queue_extend", "/queue/{name}/extend", "queuey.web.resources.QueueContext"),
    ("queue_stats", "/queue/{name}/stats", "queuey.web.resources.QueueContext"),
    ("queue_pause", "/queue/{name}/pause", "queuey.web.resources.QueueContext"),
    ("queue_resume", "/queue/{name}/resume", "queuey.web.resources.QueueContext"),
    ("queue_subscriptions", "/queue/{name}/subscriptions", "queuey.web.resources.QueueContext"),
    (
        "queue_subscription",
        "/queue/{name}/subscriptions/{subscription}",
        "queuey.web.resources.QueueContext",
    ),
    (
        "queue_subscription_pause",
        "/queue/{name}/subscriptions/{subscription}/pause",
        "queuey.web.resources.QueueContext",
    ),
    (
        "queue_subscription_resume",
        "/queue/{name}/subscriptions/{subscription}/resume",
        "queuey.web.resources.QueueContext",
    ),
    ("queue_redrive", "/queue/{name}/redrive", "queuey.web.resources.QueueContext"),
    ("queue_messages", "/queue/{name}/messages/{ids}", "queuey.web.resources.QueueContext"),
    (
        "queue_checkpoints",
        "/queue/{name}/checkpoints/{consumer}",
        "queuey.web.resources.QueueContext",
    ),
    ("schedules", "/schedules", "queuey.web.resources.ApplicationContext"),
    ("schedule", "/schedules/{schedule}", "queuey.web.resources.ApplicationContext"),
    ("schedule_pause", "/schedules/{schedule}/pause", "queuey.web.resources.ApplicationContext"),
    ("schedule_resume", "/schedules/{schedule}/resume", "queuey.web.resources.ApplicationContext"),
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

"""The HTTP layer: routes, contexts, views, errors, metrics."""

from queuey.web.schemas import build_models

ROUTES = [
    # name, pattern, factory
    ("queues", "/queue", "queuey.web.resources.ApplicationContext"),
    ("queue", "/queue/{name}", "queuey.web.resources.QueueContext"),
    ("queue_batch", "/queue/{name}/batch", "queuey.web.resources.QueueContext"),
    ("queue_info", "/queue/{name}/info", "queuey.web.resources.QueueContext"),
    ("queue_messages", "/queue/{name}/messages/{ids}", "queuey.web.resources.QueueContext"),
    (
        "queue_checkpoints",
        "/queue/{name}/checkpoints/{consumer}",
        "queuey.web.resources.QueueContext",
    ),
    ("heartbeat", "/__heartbeat__", None),
    ("lbheartbeat", "/__lbheartbeat__", None),
    ("version", "/__version__", None),
    ("metrics", "/metrics", None),
    ("openapi", "/openapi.json", None),
]


def includeme(config) -> None:
    settings = config.registry.queuey_settings
    config.registry.api_models = build_models(
        settings.max_partitions, settings.max_ttl, settings.default_ttl
    )
    config.add_request_method(lambda request: request.registry.api_models, "models", reify=True)
    for name, pattern, factory in ROUTES:
        config.add_route(name, pattern, factory=factory)
    config.include("queuey.web.metrics")

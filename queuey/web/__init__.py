"""The HTTP layer: routes, contexts, views, errors, metrics."""

from queuey.core.longpoll import LongPolls
from queuey.core.quotas import load_quotas
from queuey.core.workqueues import WorkQueues
from queuey.web.schemas import build_models

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
    ("queue_redrive", "/queue/{name}/redrive", "queuey.web.resources.QueueContext"),
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
    registry = config.registry
    settings = registry.queuey_settings
    registry.api_models = build_models(
        settings.max_partitions, settings.max_ttl, settings.default_ttl
    )
    for name, pattern, factory in ROUTES:
        config.add_route(name, pattern, factory=factory)
    config.include("queuey.web.metrics")
    # Under the production server's workers, request budgets are shared
    # through its directory (queuey.core.quotas); alone, they live in this process.
    registry.quotas = load_quotas(
        settings, lambda: registry.applications, registry.clock, shared_dir=registry.shared_dir
    )
    registry.long_polls = LongPolls(
        settings.reserve_max_waiting,
        settings.reserve_poll_interval,
        on_refused=registry.metrics.reserve_wait_refused.inc,
        on_waiting=registry.metrics.reserve_waiting.set,
        per_application=registry.quotas.max_waiting_polls,
    )
    registry.quotas.hold = registry.long_polls.hold
    metrics, overview = registry.metrics, registry.overview

    def posted(queue, count):
        metrics.posted.inc(count)
        overview.count(queue, posted=count)

    def acked(queue, count):
        metrics.acked.inc(count)
        overview.count(queue, acked=count)

    registry.workqueues = WorkQueues(
        registry.storage,
        registry.clock,
        max_ttl=settings.max_ttl,
        read_delay_micros=settings.read_delay_micros,
        cache=registry.queue_cache,
        on_available=registry.long_polls.notify,
        on_posted=posted,
        on_acked=acked,
        quotas=registry.quotas,
    )

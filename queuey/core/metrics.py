"""The service's counters: what the core counts as it works.

Posts, acks and long polls are counted by the core
(:class:`~queuey.core.workqueues.WorkQueues`,
:class:`~queuey.core.longpoll.LongPolls`) whichever door they came through;
the HTTP side (:mod:`queuey.web.metrics`) times and logs requests, adds the
per-queue gauges and answers ``GET /metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector


class Metrics:
    """The service's instruments, in a registry of their own per app instance."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        #: Collectors of ours, exposed beside the workers' summed metrics.
        self.custom_collectors: list[Collector] = []
        self.requests = Counter(
            "queuey_requests",
            "HTTP requests answered",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "queuey_request_seconds",
            "Time to answer a request",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.posted = Counter("queuey_messages_posted", "Messages accepted", registry=self.registry)
        self.read = Counter("queuey_messages_read", "Messages returned", registry=self.registry)
        self.reserved = Counter(
            "queuey_messages_reserved", "Messages leased by reserve", registry=self.registry
        )
        self.acked = Counter("queuey_messages_acked", "Leases acked", registry=self.registry)
        self.released = Counter(
            "queuey_messages_released", "Leases ended by release", registry=self.registry
        )
        self.extended = Counter("queuey_leases_extended", "Leases extended", registry=self.registry)
        self.dead_lettered = Counter(
            "queuey_messages_dead_lettered",
            "Messages moved to a dead-letter queue",
            registry=self.registry,
        )
        self.reserve_waiting = Gauge(
            "queuey_reserve_waiting",
            "Reserve calls long-polling now",
            registry=self.registry,
            multiprocess_mode="livesum",  # summed over the server's live workers
        )
        self.reserve_wait_refused = Counter(
            "queuey_reserve_wait_refused",
            "Reserve calls answered at once: queuey.reserve.max_waiting were waiting",
            registry=self.registry,
        )

    def add_collector(self, collector: Collector) -> None:
        """Expose ``collector`` here and beside the workers' summed metrics."""
        self.registry.register(collector)
        self.custom_collectors.append(collector)

    def messages_read(self, count: int) -> None:
        self.read.inc(count)

    def messages_reserved(self, count: int) -> None:
        self.reserved.inc(count)

    def messages_released(self, count: int) -> None:
        self.released.inc(count)

    def leases_extended(self, count: int) -> None:
        self.extended.inc(count)

    def messages_dead_lettered(self, count: int) -> None:
        self.dead_lettered.inc(count)

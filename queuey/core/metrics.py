"""The service's counters: what the core counts as it works.

Posts, acks and long polls are counted by the core
(:class:`~queuey.core.workqueues.WorkQueues`,
:class:`~queuey.core.longpoll.LongPolls`) whichever door they came through;
the HTTP side (:mod:`queuey.web.metrics`) times and logs requests, adds the
per-queue gauges and answers ``GET /metrics``. The requests the backend sent
to its store (:meth:`queuey.storage.Storage.request_counts`) are exposed too.

No prometheus_client counter here has a label an application chooses: the
counts per queue (flow control's refusals, ``drop_head`` trims) are kept in
:class:`~queuey.core.queuecounters.QueueCounters`, bounded per application
and forgotten with their queue, and exposed by :class:`QueueCountsCollector`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from queuey.core.queuecounters import QueueCounters
from queuey.model import QueueMeta

#: The series of the backend's requests (``_total`` added on exposition); the
#: Cassandra backend's process-wide counter has the same name
#: (:mod:`queuey.storage.cassandra.counters`).
STORAGE_REQUESTS = "queuey_cassandra_requests"
#: Most queues whose last throttle this process remembers (the admin page's "throttled").
MAX_THROTTLED_QUEUES = 10_000
#: The per-queue counters (``_total`` added on exposition): name, help, labels.
THROTTLED = (
    "queuey_flow_throttled",
    "Posts refused and reserves answered short by flow control, by setting",
    ("application", "queue", "kind"),
)
DROPPED = (
    "queuey_flow_dropped",
    "Oldest messages deleted from drop_head queues over their max_length",
    ("application", "queue"),
)


class StorageRequests(Collector):
    """The backend's own request counts as a counter, read at each scrape.

    Registered in the app's registry only, which ``/metrics`` shows when the
    process serves alone; under the server's worker processes the backend's
    process-wide counter reaches ``/metrics`` through the multiprocess files
    instead, summed over the workers (:func:`queuey.web.metrics.exposed`).
    """

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.counts = counts

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self.counts()
        if not counts:  # a store that does not count exports nothing
            return
        family = CounterMetricFamily(
            STORAGE_REQUESTS, "CQL requests sent to Cassandra, by kind", labels=["kind"]
        )
        for kind, count in sorted(counts.items()):
            family.add_metric([kind], count)
        yield family


class QueueCountsCollector(Collector):
    """The per-queue counters, read from the table every process of the
    server writes (:class:`~queuey.core.queuecounters.QueueCounters`): any
    process answers alike, and a deleted queue's series are gone from all."""

    def __init__(self, counters: QueueCounters) -> None:
        self.counters = counters

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        families = {
            name: CounterMetricFamily(name, text, labels=list(labels))
            for name, text, labels in (THROTTLED, DROPPED)
        }
        for count in self.counters.counts():
            family = families.get(count.metric)
            if family is None:
                continue
            labels = [count.application, count.queue]
            if count.metric == THROTTLED[0]:
                labels.append(count.kind)
            family.add_metric(labels, count.value)
        yield from families.values()


class Metrics:
    """The service's instruments, in a registry of their own per app instance.

    ``counters_path``: the file of the per-queue counters that the server's
    processes share (None: this process's memory)."""

    def __init__(self, counters_path: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        #: Collectors of ours, exposed beside the workers' summed metrics.
        self.custom_collectors: list[Collector] = []
        #: Collectors that write their own text for ``/metrics`` (a
        #: ``render() -> bytes`` each; :mod:`queuey.web.exposition`), after the rest.
        self.text_collectors: list = []
        #: Counts per queue (:mod:`queuey.core.queuecounters`).
        self.queue_counts = QueueCounters(counters_path)
        #: Seconds for :meth:`throttled_within` (replaceable in tests).
        self.now: Callable[[], float] = time.monotonic
        self._last_throttled: dict[tuple[str, str], float] = {}
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
        self.add_collector(QueueCountsCollector(self.queue_counts))

    def count_storage_requests(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Expose the backend's request counts (``Storage.request_counts``)
        when this process serves alone (see :class:`StorageRequests`)."""
        self.registry.register(StorageRequests(counts))

    def add_collector(self, collector: Collector) -> None:
        """Expose ``collector`` here and beside the workers' summed metrics."""
        self.registry.register(collector)
        self.custom_collectors.append(collector)

    def throttled(self, queue: QueueMeta, kind: str) -> None:
        """Count a post refused or a reserve answered short by flow control
        (and, but for a pause, which is shown as such, remember when)."""
        self.queue_counts.add(THROTTLED[0], queue, kind, 1)
        if kind == "paused":
            return
        now = self.now()
        last = self._last_throttled
        if len(last) >= MAX_THROTTLED_QUEUES and (queue.application, queue.name) not in last:
            self._last_throttled = last = {k: t for k, t in last.items() if now - t < 60}
            if len(last) >= MAX_THROTTLED_QUEUES:
                last.clear()
        last[(queue.application, queue.name)] = now

    def throttled_within(self, application: str, name: str, seconds: float) -> bool:
        """Whether this process throttled the queue (a rate, cap or length,
        not a pause) in the last ``seconds``; other processes' throttles are
        in ``queuey_flow_throttled_total``, summed."""
        at = self._last_throttled.get((application, name))
        return at is not None and self.now() - at <= seconds

    def dropped(self, queue: QueueMeta, count: int) -> None:
        """Count the messages a trim deleted from a ``drop_head`` queue (in
        the refresher process under the production server)."""
        self.queue_counts.add(DROPPED[0], queue, "", count)

    def forget(self, queue: QueueMeta) -> None:
        """The queue is deleted: its series leave ``/metrics`` (every process's),
        and a queue created again under its name starts from zero."""
        self.queue_counts.forget(queue)
        self._last_throttled.pop((queue.application, queue.name), None)

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

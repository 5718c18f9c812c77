"""Request logging and Prometheus metrics over HTTP.

A tween times every request, logs one line for it (never the key) and feeds
the request counters; ``GET /metrics`` exposes them, the core's counters
(:mod:`queuey.core.metrics`), the per-queue gauges
(:mod:`queuey.web.queuegauges`) and flow control's (:class:`FlowCollector`)
to addresses in ``queuey.metrics.allow``.
"""

from __future__ import annotations

import logging
import os
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from pyramid.response import Response

from queuey.core.access import client_address
from queuey.core.fairmetrics import MAX_QUEUES, FairGroups
from queuey.core.metrics import Metrics
from queuey.core.queuecounters import OTHER
from queuey.core.services import services_of
from queuey.model.flow import queue_flow, subscription_flows
from queuey.settings import address_in
from queuey.web.queuegauges import QueueCollector
from queuey.web.responses import error
from queuey.web.state import web_state_of

log = logging.getLogger("queuey.request")
#: Set by the server runner when workers share their metrics through files.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"

#: The methods that get a label of their own; any other becomes "other", so an
#: anonymous caller cannot grow the number of series by inventing methods.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


def exposed(metrics: Metrics) -> CollectorRegistry:
    """What ``/metrics`` shows: the app's registry; or, when the server runs
    worker processes (``PROMETHEUS_MULTIPROC_DIR`` set by
    :mod:`queuey.server`), every worker's counters, histograms and gauges
    summed from their files, plus the app's own collectors (the per-queue
    gauges, which every worker reads from the same store)."""
    if not os.environ.get(MULTIPROCESS_DIR):
        return metrics.registry
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    for collector in metrics.custom_collectors:
        registry.register(collector)
    return registry


def exposition(metrics: Metrics) -> bytes:
    """The body of ``/metrics``: what prometheus_client writes of
    :func:`exposed`, then what the collectors that write their own text give
    (:attr:`Metrics.text_collectors`)."""
    body = generate_latest(exposed(metrics))
    return body + b"".join(collector.render() for collector in metrics.text_collectors)


class FlowCollector(Collector):
    """Flow control's gauges, computed at each scrape without a storage call.

    ``queuey_flow_paused``: a series, 1, for each paused queue's posting
    (``subscription=""``) and each paused subscription, none for what is not
    paused, from the metadata the overview last read of each watched queue.
    Every worker reads the same store, so any one of them answers alike. At
    most :data:`PAUSED_PER_QUEUE` subscriptions of a queue, and
    :data:`PAUSED_PER_APPLICATION` series of an application (and
    :data:`MAX_PAUSED` in all) are shown by name; the rest are counted in one
    series ``subscription="~other"`` of the queue, or ``queue="~other"`` of the
    application, whose value is how many were left out.

    ``queuey_fair_group_posts``: each fair queue's busiest groups by posts in
    the last :data:`queuey.core.fairness.WINDOW` seconds, summed over the
    server's processes (:class:`queuey.core.fairmetrics.FairGroups`), at most
    :data:`FAIR_GROUPS` groups of :data:`FAIR_QUEUES` queues, of which at most
    :data:`FAIR_QUEUES_PER_APPLICATION` of one application.
    """

    #: Groups shown per fair queue, fair queues shown at most, and per application.
    FAIR_GROUPS = 10
    FAIR_QUEUES = 100
    FAIR_QUEUES_PER_APPLICATION = 20
    #: Paused subscriptions shown per queue, paused series per application and in all.
    PAUSED_PER_QUEUE = 10
    PAUSED_PER_APPLICATION = 100
    MAX_PAUSED = 1000

    def __init__(self, overview, fair: FairGroups) -> None:
        self.overview = overview
        self.fair = fair

    def describe(self):
        return []

    def collect(self):
        paused = GaugeMetricFamily(
            "queuey_flow_paused",
            '1 while a queue\'s posting (subscription "") or a subscription is paused; '
            f"{OTHER!r}: how many paused were left out",
            labels=["application", "queue", "subscription"],
        )
        for labels, value in self.paused_series():
            paused.add_metric(list(labels), value)
        yield paused
        posts = GaugeMetricFamily(
            "queuey_fair_group_posts",
            "Recent posts of a fair queue's busiest groups (the last 10 s, all processes)",
            labels=["application", "queue", "group"],
        )
        per_application: dict[str, int] = {}
        shown = 0
        for (application, queue), groups in self.fair.top(self.FAIR_GROUPS, MAX_QUEUES).items():
            if shown >= self.FAIR_QUEUES:
                break
            if per_application.get(application, 0) >= self.FAIR_QUEUES_PER_APPLICATION:
                continue
            per_application[application] = per_application.get(application, 0) + 1
            shown += 1
            for group, count in groups:
                posts.add_metric([application, queue, group], count)
        yield posts

    def paused_series(self) -> list[tuple[tuple[str, str, str], int]]:
        """``queuey_flow_paused``'s series within the caps: by application,
        queue and subscription name."""
        by_application: dict[str, list[tuple[str, str, int]]] = {}
        for meta in sorted(self.overview.watched(), key=lambda m: (m.application, m.name)):
            mine = by_application.setdefault(meta.application, [])
            if queue_flow(meta).paused:
                mine.append((meta.name, "", 1))
            names = sorted(n for n, f in subscription_flows(meta).items() if f.paused)
            mine.extend((meta.name, name, 1) for name in names[: self.PAUSED_PER_QUEUE])
            if len(names) > self.PAUSED_PER_QUEUE:
                mine.append((meta.name, OTHER, len(names) - self.PAUSED_PER_QUEUE))
        series: list[tuple[tuple[str, str, str], int]] = []
        for application, mine in sorted(by_application.items()):
            room = min(self.PAUSED_PER_APPLICATION, max(0, self.MAX_PAUSED - len(series)))
            series.extend(((application, q, s), n) for q, s, n in mine[:room])
            left_out = sum(n for _, _, n in mine[room:])
            if left_out:
                series.append(((application, OTHER, OTHER), left_out))
        return series


class RequestRecorder:
    """Counts, times and logs one answered request: for the tween (on the
    router and the fast path, :mod:`queuey.web.fastpath`, alike) and for the
    body-size refusals (:mod:`queuey.web.bodies`), which come before both."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # The labelled children, looked up once per label set: route names, known
        # methods and the service's status codes are finite; raw paths are not.
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._timers: dict[str, Histogram] = {}

    def __call__(self, request, response, elapsed: float) -> None:
        route = request.matched_route.name if request.matched_route else "none"
        method = method_label(request.method)
        key = (route, method, response.status_code)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.requests.labels(route, method, str(key[2]))
        counter.inc()
        timer = self._timers.get(route)
        if timer is None:
            timer = self._timers[route] = self.metrics.latency.labels(route)
        timer.observe(elapsed)
        if log.isEnabledFor(logging.INFO):
            environ = request.environ
            log.info(
                "%s %s %d %.1fms app=%s%s",
                method,
                environ.get("PATH_INFO", ""),
                response.status_code,
                elapsed * 1000,
                environ.get("queuey.application") or request.headers.get("X-Application-Name", "-"),
                f" action={environ['queuey.sqs_action']}" if "queuey.sqs_action" in environ else "",
            )


def metrics_tween_factory(handler, registry):
    record = web_state_of(registry).recorder

    def tween(request):
        start = time.perf_counter()
        response = handler(request)
        record(request, response, time.perf_counter() - start)
        return response

    return tween


def metrics_view(request):
    settings = request.services.settings
    # The caller's address as the API sees it (behind a trusted proxy, the
    # client it forwards for), not the socket peer, which may be that proxy.
    if not address_in(client_address(request, settings.trusted_proxies), settings.metrics_allow):
        return error(403, {"client_address": "metrics are not exposed to this address"})
    body = exposition(request.services.metrics)
    return Response(body=body, content_type=CONTENT_TYPE_LATEST.split(";")[0], charset="utf-8")


def includeme(config) -> None:
    services = services_of(config.registry)
    queues = QueueCollector(services.overview, services.groups, services.flow.grants)
    services.metrics.text_collectors.append(queues)
    # Under the server's workers the refresher process writes each queue's
    # lines once, after measuring it, and publishes them with the figures.
    services.overview.shared["queue_lines"] = (queues.written, queues.adopt)
    # Fair queues' groups: each process counts its own posts; under the
    # server's workers each writes them where the scraped one sums them.
    shared = services.shared_dir
    fair = FairGroups(
        services.flow.tracker,
        lambda: services.clock.now_micros() / 1_000_000,
        shared / "fair-groups" if shared else None,
    )
    services.flow.tracker.on_counted = fair.counted
    services.metrics.add_collector(FlowCollector(services.overview, fair))
    config.add_tween("queuey.web.metrics.metrics_tween_factory")

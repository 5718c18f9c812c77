"""The service's parts, built once from the settings: one typed object.

The app factory (:func:`queuey.app.main`) builds :class:`Services` before any
door is included and keeps it on Pyramid's registry; every door reads what
it needs through :func:`services_of` (or ``request.services``), so no door
builds a part of the core and the order the doors are included in does not
matter.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from queuey.applications import Application, load_applications
from queuey.clock import Clock
from queuey.core.buckets import Buckets
from queuey.core.consumergroups import Groups
from queuey.core.fairness import GroupTracker
from queuey.core.flow import AppLimits, FlowControl
from queuey.core.flowsettings import FlowSettings
from queuey.core.lengths import Lengths
from queuey.core.longpoll import LongPolls
from queuey.core.messages import MessageRules
from queuey.core.metrics import Metrics
from queuey.core.overview import Overview
from queuey.core.queues import QueueCache, Queues
from queuey.core.quotas import Quotas, load_quotas
from queuey.core.schedules import Schedules
from queuey.core.subscriptionlimit import SubscriptionLimit
from queuey.core.subscriptions import Subscriptions
from queuey.core.workqueues import WorkQueues
from queuey.model import QueueMeta
from queuey.settings import Settings, load_settings
from queuey.storage import Storage

#: The part a process plays under the production server (:mod:`queuey.server`):
#: ``"refresher"`` measures queues and publishes the figures, ``"worker"``
#: follows them; ``""`` serves alone.
Role = Literal["", "refresher", "worker"]


@dataclass
class Services:
    """Everything the doors share, for one app.

    ``applications`` may be replaced while the app runs (the quotas, the
    overview and the consumer groups ask for it on every use).
    """

    settings: Settings
    applications: Mapping[str, Application]
    storage: Storage
    clock: Clock
    #: The message rules in force (:mod:`queuey.core.messages`).
    rules: MessageRules
    #: Queue lifecycle and this node's metadata cache (:mod:`queuey.core.queues`).
    queues: Queues
    metrics: Metrics
    quotas: Quotas
    long_polls: LongPolls
    workqueues: WorkQueues
    #: Subscriptions' settings, their filters (:mod:`queuey.core.subscriptions`).
    subscriptions: Subscriptions
    #: What operators see of every queue (:mod:`queuey.core.overview`).
    overview: Overview
    #: Pause, rate limits, caps, lengths, quotas, fair lanes (:mod:`queuey.core.flow`).
    flow: FlowControl
    #: The one way doors change flow settings (:mod:`queuey.core.flowsettings`).
    flow_settings: FlowSettings
    #: Messages on a schedule and their ticker (:mod:`queuey.core.schedules`).
    schedules: Schedules
    #: Consumer groups read from ZooKeeper (``None`` without ZooKeeper).
    groups: Groups | None
    #: The server's own directory, shared by its processes (``None``: serving alone).
    shared_dir: Path | None

    @property
    def cache(self) -> QueueCache:
        """This node's queue-metadata cache."""
        return self.queues.cache  # type: ignore[return-value]


def build_services(
    settings: Settings,
    applications: Mapping[str, Application],
    storage: Storage,
    clock: Clock,
    *,
    role: Role = "",
    shared_dir: Path | None = None,
) -> Services:
    """Every part of the core, wired: the long polls and the overview hear of
    every post and ack, the quotas hold refusals on the long polls' slots."""
    services: Services

    def application_names():
        return services.applications.keys()

    metrics = Metrics(shared_dir / QUEUE_COUNTERS if shared_dir else None)
    metrics.count_storage_requests(storage.request_counts)
    # Rate buckets and post counts live in tables every process of the host
    # shares when the store names a directory (SQLite), else every process of
    # this server (its directory), else this process (queuey.core.slots).
    tables = limits_directory(storage, shared_dir)
    keys = settings.flow_keys_per_application
    buckets = Buckets(tables, keys)
    lengths = Lengths(tables, keys, lambda: clock.now_micros() / 1_000_000)
    quotas = load_quotas(settings, lambda: services.applications, clock, buckets)
    long_polls = LongPolls(
        settings.reserve_max_waiting,
        settings.reserve_poll_interval,
        on_refused=metrics.reserve_wait_refused.inc,
        on_waiting=metrics.reserve_waiting.set,
        per_application=quotas.max_waiting_polls,
    )
    quotas.hold = long_polls.hold

    def available(application: str, name: str) -> None:
        long_polls.notify(application, name)
        storage.announce_available(application, name)

    storage.watch_available(long_polls.notify)
    # One process of the server measures queues and publishes the figures;
    # its workers follow (queuey.server).
    snapshot = shared_dir / "overview.pickle" if role and shared_dir else None
    overview = Overview(
        storage,
        clock,
        application_names,
        interval=0 if role == "worker" else settings.stats_interval,
        max_age=settings.stats_max_age,
        budget=settings.stats_budget,
        max_queues=settings.stats_max_queues,
        publish=snapshot if role == "refresher" else None,
        follow=snapshot if role == "worker" else None,
        lengths=lengths,
    )
    overview.on_dropped = metrics.dropped

    def stored_quota(application: str) -> tuple[int, int]:
        limits = quotas.limits(application)
        return limits.messages, limits.bytes

    overview.stored_quota = stored_quota
    # The server's processes the store counts live: its workers and, as it
    # measures queues (Cassandra's owned stats join), its refresher process.
    here = max(1, int(os.environ.get(WORKERS_ENV, "1") or 1)) + 1 if shared_dir else 1

    def server_share() -> float:
        live = storage.live_processes()
        return min(1.0, here / live) if live else 1.0

    overview.share = server_share
    groups = None
    if settings.zookeeper_hosts:
        groups = Groups(
            settings.zookeeper_hosts,
            settings.groups_root,
            storage,
            clock,
            application_names,
            max_age=settings.stats_max_age,
        )
        overview.after_pass.append(groups.refresh_if_stale)
        overview.shared["groups"] = (groups.snapshot, groups.adopt)

    def posted(queue: QueueMeta, count: int) -> None:
        metrics.posted.inc(count)
        overview.count(queue, posted=count)

    def acked(queue: QueueMeta, count: int) -> None:
        metrics.acked.inc(count)
        overview.count(queue, acked=count)

    rules = MessageRules.from_settings(settings)
    flow = build_flow(
        settings, storage, clock, quotas, buckets, lengths, metrics, shared_dir, server_share
    )
    subscription_limit = SubscriptionLimit(
        storage, lambda application: quotas.limits(application).subscriptions
    )
    queues = Queues(
        storage,
        QueueCache(settings.metadata_cache_seconds, shared=storage.metadata_changes()),
        quotas,
    )
    # A purge empties a queue's length at once, a delete frees its count, for
    # every process sharing the tables (queuey.core.lengths).
    queues.on_purged.append(lambda meta: lengths.purged(meta, clock.now_micros()))
    queues.on_deleted.append(lambda meta: overview.forget(meta.application, meta.name))
    # A deleted queue's metric series go at once; the refresher finds those
    # deleted through other API nodes (queuey.core.queuecounters).
    queues.on_deleted.append(metrics.forget)
    overview.after_pass.append(
        lambda: metrics.queue_counts.prune(storage.list_queues, clock.now_micros)
    )
    services = Services(
        settings=settings,
        applications=applications,
        storage=storage,
        clock=clock,
        rules=rules,
        queues=queues,
        metrics=metrics,
        quotas=quotas,
        long_polls=long_polls,
        workqueues=WorkQueues(
            storage,
            clock,
            rules=rules,
            read_delay_micros=settings.read_delay_micros,
            queues=queues,
            on_available=available,
            on_posted=posted,
            on_acked=acked,
            flow=flow,
            subscription_limit=subscription_limit,
        ),
        subscriptions=Subscriptions(queues, subscription_limit),
        overview=overview,
        flow=flow,
        flow_settings=FlowSettings(
            queues,
            on_resumed=available,
            subscription_limit=subscription_limit,
            # A queue given a max_length is measured at once: its messages count now.
            on_limited=overview.refresh,
        ),
        schedules=Schedules(
            storage,
            queues,
            rules,
            clock,
            lambda queue, messages: services.workqueues.post(queue, messages),
            application_names,
            limit=settings.schedules_limit,
            # One ticker per API node: in the process that measures queues,
            # never in every worker (queuey.server).
            interval=0 if role == "worker" else settings.schedules_interval,
            check=lambda queue, count, size: flow.refusal(queue, count, size),
            max_batch_messages=settings.max_batch_messages,
            max_batch_size=settings.max_batch_size,
        ),
        groups=groups,
        shared_dir=shared_dir,
    )
    return services


#: The server's flow-control tables in its directory (``QUEUEY_SHARED_DIR``).
LIMITS_DIRECTORY = "limits"
#: The server's per-queue metric counts in its directory (:mod:`queuey.core.queuecounters`).
QUEUE_COUNTERS = "queue-counters.sqlite3"
#: How many worker processes serve in this server (set by :mod:`queuey.server`).
WORKERS_ENV = "QUEUEY_WORKERS"


def limits_directory(storage: Storage, shared_dir: Path | None) -> Path | None:
    """Where flow control's tables are: the store's directory for them (every
    process of the host), the server's own (its processes), or None (this one)."""
    host = storage.flow_state_path()
    if host:
        return Path(host)
    return shared_dir / LIMITS_DIRECTORY if shared_dir else None


def build_flow(
    settings: Settings,
    storage: Storage,
    clock: Clock,
    quotas: Quotas,
    buckets: Buckets,
    lengths: Lengths,
    metrics: Metrics,
    shared_dir: Path | None,
    server_share: Callable[[], float],
) -> FlowControl:
    """Flow control wired to its tables and what it counts.

    When the tables are the host's (SQLite), every process using the store
    shares them and enforces the whole of each rate; otherwise each server
    enforces its part (``server_share``: its processes over the store's
    live processes)."""
    host = bool(storage.flow_state_path())

    def share() -> float:
        return 1.0 if host else server_share()

    made: dict[int, tuple[object, AppLimits]] = {}

    def app_limits(application: str) -> AppLimits:
        limits = quotas.limits(application)  # the same object while unchanged
        found = made.get(id(limits))
        if found is None or found[0] is not limits:
            if len(made) > 10_000:
                made.clear()
            found = made[id(limits)] = (
                limits,
                AppLimits(limits.posts_per_second, limits.messages, limits.bytes),
            )
        return found[1]

    return FlowControl(
        clock,
        buckets=buckets,
        lengths=lengths,
        share=share,
        in_flight=storage.in_flight,
        app_limits=app_limits,
        tracker=GroupTracker(
            lambda: clock.now_micros() / 1_000_000, threshold=settings.flow_fair_threshold
        ),
        on_throttled=lambda queue, kind: metrics.throttled(queue, kind),
    )


def services_of(registry: Any) -> Services:
    """The app's services, from its Pyramid registry."""
    return registry.queuey


def poster_flow(raw: Mapping[str, Any], storage: Storage, clock: Clock) -> FlowControl:
    """Flow control for a process that posts without serving (a Spark
    executor writing to the store itself), from the service's ini settings.

    It checks what a server checks: pauses, bursts, lengths, quotas and
    rates, by the applications file the settings name (else the
    ``queuey.limits.*`` defaults). Where the store names a directory every
    process of the host shares (SQLite) it counts in the servers' own
    tables, so its posts and theirs meet one bound; elsewhere (Cassandra)
    it counts its own posts only (docs/flow.rst, "Spark")."""
    settings = load_settings(raw, environ={}, require_applications=False)
    applications = (
        load_applications(settings.applications_file) if settings.applications_file else {}
    )
    directory = limits_directory(storage, None)
    keys = settings.flow_keys_per_application
    buckets = Buckets(directory, keys)
    quotas = load_quotas(settings, lambda: applications, clock, buckets)
    lengths = Lengths(directory, keys, lambda: clock.now_micros() / 1_000_000)
    return build_flow(
        settings, storage, clock, quotas, buckets, lengths, Metrics(), None, lambda: 1.0
    )

"""A work queue's backlog in ``/metrics``, per subscription: what is available,
delayed, in flight and dead-lettered, the oldest available message's age, and
the consumers the subscription can keep busy within its limits; fed by the
refresher (no storage call per scrape), with label sets capped."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from queuey.model import SubscriptionStats
from queuey.web.queuegauges import QueueCollector
from tests.web.calls import ack, batch, create, release, reserved
from tests.web.test_operator_figures import gauge

pytestmark = pytest.mark.unit

GAUGES = (
    "available",
    "delayed",
    "in_flight",
    "dead_lettered",
    "oldest_available_age_seconds",
    "usable_consumers",
)


def backlog(text: str, application: str, queue: str, subscription: str) -> dict:
    labels = {"application": application, "queue": queue, "subscription": subscription}
    return {g: gauge(text, f"queuey_subscription_{g}", **labels) for g in GAUGES}


def scrape(app) -> str:
    """``/metrics`` after the refresher measured every queue again."""
    overview = app.app.registry.queuey.overview
    overview.refresh_pass()
    for meta in overview.watched():
        overview.refresh(meta)
    return app.get("/metrics").text


def test_each_subscription_shows_its_backlog_from_the_refresher(app, clock):
    create(app, "jobs", visibility_timeout=30, max_attempts=1, ttl=3600)
    batch(app, "jobs", [{"body": {"n": n}} for n in range(5)] + [{"body": {}, "delay": 600}])
    clock.advance(10)  # the oldest message is 10 s old (and past any read delay)
    workers = reserved(app, "jobs", subscription="workers", limit=3)
    assert len(workers) == 3
    release(app, "jobs", [workers[0]["receipt"]], subscription="workers", error="bad")
    ack(app, "jobs", [workers[1]["receipt"]], subscription="workers")
    assert len(reserved(app, "jobs", subscription="audit", limit=1)) == 1
    storage = app.app.registry.queuey.storage

    text = scrape(app)
    stats, storage.stats = storage.stats, None  # a scrape that scanned would fail
    try:
        again = app.get("/metrics").text
    finally:
        storage.stats = stats
    workers_backlog = backlog(text, app.apps.app, "jobs", "workers")
    audit = backlog(text, app.apps.app, "jobs", "audit")
    print(f"\nworkers: {workers_backlog}\naudit: {audit}")
    assert {k: v for k, v in workers_backlog.items() if k != "oldest_available_age_seconds"} == {
        "available": 2,  # 5, less 3 handed out
        "delayed": 1,
        "in_flight": 1,
        "dead_lettered": 1,  # released on its last attempt
        "usable_consumers": 3,  # no limit: one per message to work on
    }
    assert workers_backlog["oldest_available_age_seconds"] == pytest.approx(10, abs=1)
    assert (audit["available"], audit["in_flight"], audit["usable_consumers"]) == (4, 1, 5)
    assert backlog(text, app.apps.app, "jobs", "unused") == dict.fromkeys(GAUGES)
    assert backlog(again, app.apps.app, "jobs", "workers") == workers_backlog

    # A deleted queue's subscriptions leave /metrics.
    app.delete("/queue/jobs", headers=app.auth)
    assert backlog(scrape(app), app.apps.app, "jobs", "workers") == dict.fromkeys(GAUGES)


def test_usable_consumers_stop_at_max_in_flight_a_binding_rate_and_a_pause(app, clock):
    create(app, "jobs", visibility_timeout=300, ttl=3600)
    batch(app, "jobs", [{"body": {"n": n}} for n in range(40)])
    clock.advance(10)
    for sub in ("capped", "rated", "paused"):
        reserved(app, "jobs", subscription=sub, limit=1)  # each subscription comes to be
    app.put_json("/queue/jobs/subscriptions/capped", {"max_in_flight": 4}, headers=app.auth)
    app.put_json("/queue/jobs/subscriptions/rated", {"rate": 1, "burst": 3}, headers=app.auth)
    app.post("/queue/jobs/subscriptions/paused/pause", headers=app.auth)
    usable = {}

    def usable_now(sub: str) -> float:
        text = scrape(app)
        return backlog(text, app.apps.app, "jobs", sub)["usable_consumers"]

    usable["capped"] = usable_now("capped")
    usable["paused"] = usable_now("paused")
    # A rate with tokens to spare does not bind: every message could be worked on.
    usable["rated, tokens left"] = usable_now("rated")
    # Consumers took every token (3, or this process's share of them where the
    # store counts other live processes: Cassandra): the rate binds, and the
    # consumers holding messages are all it can keep busy.
    took = len(reserved(app, "jobs", subscription="rated", limit=10))
    assert 1 <= took <= 3
    usable["rated, binding"] = usable_now("rated")
    clock.advance(60)  # tokens again: it does not bind any more
    # Read from the bucket at each scrape, not kept with the queue's lines
    # until the refresher measures the queue again.
    refilled = app.get("/metrics").text
    usable["rated, refilled"] = backlog(refilled, app.apps.app, "jobs", "rated")["usable_consumers"]
    print(f"\nusable consumers: {usable}")
    assert usable == {
        "capped": 4,
        "paused": 0,
        "rated, tokens left": 40,
        "rated, binding": 1 + took,  # in flight: the first reserve's and these
        "rated, refilled": 40,
    }


def figures(application: str, queue: str, subscriptions: int):
    subs = tuple(
        SubscriptionStats(
            f"s{n:03d}",
            available=1,
            in_flight=0,
            delayed=0,
            dead_lettered=0,
            oldest_available_timestamp=1_000_000 * n,
        )
        for n in range(subscriptions)
    )
    meta = SimpleNamespace(application=application, name=queue, attributes={})
    counts = dict(depth=subscriptions, in_flight=0, delayed=0, dead_lettered=0, oldest_age=None)
    return SimpleNamespace(
        application=application, name=queue, meta=meta, subscriptions=subs, measured=10**9, **counts
    )


def test_subscription_series_are_capped_per_queue_application_and_in_all(monkeypatch):
    monkeypatch.setattr(QueueCollector, "SUBSCRIPTIONS_PER_APPLICATION", 30)
    monkeypatch.setattr(QueueCollector, "MAX_SUBSCRIPTIONS", 50)
    everything = [
        figures("a", "big", 25),  # 20 by name + ~other (5)
        figures("a", "mid", 8),  # 30 - 21 = 9 left for a: shown
        figures("a", "late", 2),  # a is full: left out
        figures("b", "one", 15),  # 15 more: 44 in all
        figures("c", "two", 10),  # past 50 in all: left out
    ]
    series = dict(QueueCollector(None, None).subscription_series(everything))
    named = {key for key in series if "~other" not in key}
    others = {key: value for key, value in series.items() if "~other" in key}
    print(f"\n{len(series)} series; ~other: {others}")
    assert len(named) == 20 + 8 + 15
    assert {k[:2] for k in named} == {("a", "big"), ("a", "mid"), ("b", "one")}
    assert others[("a", "big", "~other")].available == 5
    assert others[("a", "~other", "~other")].available == 2
    assert others[("c", "~other", "~other")].available == 10
    # A sum's oldest available age is the oldest of its parts.
    assert others[("a", "big", "~other")].oldest_age == (10**9 - 20 * 1_000_000) / 1e6
    assert sum(v.available for v in series.values()) == 25 + 8 + 2 + 15 + 10


def test_a_queues_lines_are_written_again_once_it_is_measured_again():
    queue = figures("a", "jobs", 2)
    overview = SimpleNamespace(all_figures=lambda: [queue], unwatched=0, last_pass_seconds=0.5)
    collector = QueueCollector(overview, None)
    first = collector.render().decode()
    assert collector.render().decode() == first  # kept: the same figures
    again = dict(vars(queue), depth=7, measured=queue.measured + 1)
    again["subscriptions"] = (
        replace(queue.subscriptions[0], available=5),
        *queue.subscriptions[1:],
    )
    queue = SimpleNamespace(**again)
    second = collector.render().decode()
    print(f"\nbefore:\n{first}\nafter:\n{second}")
    assert gauge(first, "queuey_queue_depth", application="a", queue="jobs") == 2
    assert gauge(second, "queuey_queue_depth", application="a", queue="jobs") == 7
    assert backlog(second, "a", "jobs", "s000")["available"] == 5
    overview.all_figures = lambda: []  # no longer watched: its series go
    assert "jobs" not in collector.render().decode()


def test_workers_adopt_the_lines_the_refresher_process_wrote():
    """Under the server's workers the refresher process writes each queue's
    lines as it measures it; a worker holding the same figures writes only
    what reads a rate bucket now, and what it measured itself."""
    queues = [figures("a", f"q{n}", 3) for n in range(4)]
    published = SimpleNamespace(all_figures=lambda: queues, unwatched=0, last_pass_seconds=0.5)
    refresher = QueueCollector(published, None)
    worker_figures = list(queues)
    worker_figures[2] = SimpleNamespace(**dict(vars(queues[2]), depth=9, measured=10**9 + 1))
    followed = SimpleNamespace(
        all_figures=lambda: worker_figures, unwatched=0, last_pass_seconds=0.5
    )
    worker = QueueCollector(followed, None)
    worker.adopt(refresher.written(), age=0.0)
    written = []
    write_queue = worker._write_queue
    worker._write_queue = lambda f: written.append(f.name) or write_queue(f)
    text = worker.render().decode()
    print(f"\nwritten again by the worker: {written}")
    assert written == ["q2"]  # measured here since: its own figures
    assert text == QueueCollector(followed, None).render().decode()
    assert gauge(text, "queuey_queue_depth", application="a", queue="q2") == 9

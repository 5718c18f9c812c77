"""A work queue's backlog in ``/metrics``, per subscription: what is available,
delayed, in flight and dead-lettered, the oldest available message's age, and
the consumers the subscription can keep busy within its limits; fed by the
refresher (no storage call per scrape), with label sets capped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from queuey.model import SubscriptionStats
from queuey.web.metrics import QueueCollector
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
    usable["rated, refilled"] = usable_now("rated")
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
    return SimpleNamespace(
        application=application, name=queue, meta=meta, subscriptions=subs, measured=10**9
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

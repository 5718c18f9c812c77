"""Queue figures for operators: measured in the background, cached, exposed to
Prometheus without a storage scan per scrape (queuey.core.overview, /metrics)."""

from __future__ import annotations

import re

import pytest

from queuey.core.overview import Overview
from queuey.model import NewMessage, QueueMeta
from tests.web.calls import create, post

pytestmark = pytest.mark.unit


def gauge(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in a Prometheus text exposition, or None."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.index("}") + 1]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    return None


class CountingStorage:
    """Wraps a storage and counts its ``stats`` scans."""

    def __init__(self, storage) -> None:
        self._storage = storage
        self.scans = 0

    def stats(self, queue, now_micros):
        self.scans += 1
        return self._storage.stats(queue, now_micros)

    def __getattr__(self, name):
        return getattr(self._storage, name)


def put(storage, meta: QueueMeta, count: int) -> None:
    storage.put_messages(
        meta, [NewMessage(body='{"n": %d}' % i, partition=1, ttl=3600) for i in range(count)]
    )


def test_figures_come_from_the_refresher_and_are_measured_again_when_stale(sqlite_storage, clock):
    storage = CountingStorage(sqlite_storage)
    meta = storage.create_queue(QueueMeta("ops", "orders", created=clock.now_micros()))
    put(storage, meta, 3)
    overview = Overview(storage, clock, lambda: ["ops"], interval=0, max_age=30)
    assert overview.queues("ops") == [(meta, None)]  # listed, not measured yet
    assert storage.scans == 0

    assert overview.refresh_pass() == 1
    (figures,) = overview.all_figures()
    assert (figures.name, figures.depth, figures.in_flight) == ("orders", 3, 0)
    assert overview.refresh_pass() == 0  # still fresh: no scan
    assert storage.scans == 1

    put(storage, meta, 2)
    clock.advance(31)
    assert overview.refresh_pass() == 1
    assert overview.figures("ops", "orders").depth == 5
    assert overview.figures("ops", "orders").oldest_age == pytest.approx(31, abs=1)


def test_a_pass_stops_at_its_budget_and_the_stalest_go_first(sqlite_storage, clock):
    for name in ("a", "b", "c"):
        sqlite_storage.create_queue(QueueMeta("ops", name, created=clock.now_micros()))
    overview = Overview(sqlite_storage, clock, lambda: ["ops"], interval=0, budget=1e-9)
    measured = [overview.refresh_pass() for _ in range(3)]
    assert measured == [1, 1, 1]  # one queue per pass, never none
    assert sorted(f.name for f in overview.all_figures()) == ["a", "b", "c"]
    clock.advance(60)
    overview.refresh_pass()
    first_again = min(overview.all_figures(), key=lambda f: -f.measured)
    assert first_again.name == "a"


def test_queues_beyond_the_cap_are_counted_not_watched(sqlite_storage, clock):
    for name in ("a", "b", "c", "d"):
        sqlite_storage.create_queue(QueueMeta("ops", name, created=clock.now_micros()))
    overview = Overview(sqlite_storage, clock, lambda: ["ops"], interval=0, max_queues=3)
    overview.refresh_pass()
    assert [meta.name for meta, _ in overview.queues("ops")] == ["a", "b", "c"]
    assert overview.unwatched == 1


def test_a_deleted_queue_leaves_the_overview(sqlite_storage, clock):
    sqlite_storage.create_queue(QueueMeta("ops", "gone", created=clock.now_micros()))
    overview = Overview(sqlite_storage, clock, lambda: ["ops"], interval=0)
    overview.refresh_pass()
    sqlite_storage.delete_queue("ops", "gone")
    overview.refresh_pass()
    assert overview.queues("ops") == []
    assert overview.all_figures() == []


def test_history_keeps_an_hour_of_minutes_with_posts_and_acks(sqlite_storage, clock):
    meta = sqlite_storage.create_queue(QueueMeta("ops", "q", created=clock.now_micros()))
    overview = Overview(sqlite_storage, clock, lambda: ["ops"], interval=0, max_age=0)
    for _ in range(70):
        overview.count(meta, posted=2, acked=1)
        overview.refresh_pass()
        clock.advance(60)
    history = overview.history("ops", "q")
    assert len(history) == 60
    assert history[-1].at - history[0].at == 59 * 60
    assert all((m.posted, m.acked, m.depth) == (2, 1, 0) for m in history)


def test_metrics_expose_per_queue_gauges_from_the_cache(make_app, sqlite_storage, wrap_app):
    app = wrap_app(make_app(sqlite_storage))
    create(app, "orders", partitions=2)
    post(app, "orders", {"a": 1})
    post(app, "orders", {"a": 2})
    overview = app.app.registry.queuey.overview
    text = app.get("/metrics").text
    assert gauge(text, "queuey_queue_depth", application=app.apps.app, queue="orders") is None

    overview.refresh_pass()
    sqlite_storage.stats = None  # a scrape that scanned storage would now fail
    text = app.get("/metrics").text
    labels = {"application": app.apps.app, "queue": "orders"}
    assert gauge(text, "queuey_queue_depth", **labels) == 2
    assert gauge(text, "queuey_queue_in_flight", **labels) == 0
    assert gauge(text, "queuey_queue_dead_lettered", **labels) == 0
    assert gauge(text, "queuey_queue_oldest_age_seconds", **labels) is not None
    assert "queuey_queues_unwatched 0.0" in text
    assert "queuey_messages_posted_total 2.0" in text
    # Posts are also counted per queue and minute for the admin chart.
    assert sum(m.posted for m in overview.history(app.apps.app, "orders")) == 2


def test_a_follower_takes_the_published_figures_and_keeps_its_own_newer_ones(
    sqlite_storage, clock, tmp_path
):
    """The production server's refresher process publishes each pass; workers
    follow the file and never measure in the background themselves."""
    storage = CountingStorage(sqlite_storage)
    orders = storage.create_queue(QueueMeta("ops", "orders", created=clock.now_micros()))
    bills = storage.create_queue(QueueMeta("ops", "bills", created=clock.now_micros()))
    put(storage, orders, 3)
    snapshot = tmp_path / "overview.pickle"
    refresher = Overview(storage, clock, lambda: ["ops"], interval=0, publish=snapshot)
    worker = Overview(storage, clock, lambda: ["ops"], interval=0, follow=snapshot)
    assert worker.all_figures() == []  # nothing published yet
    assert refresher.refresh_pass() == 2
    refresher.publish()
    scans = storage.scans
    assert {(f.name, f.depth) for f in worker.all_figures()} == {("orders", 3), ("bills", 0)}
    assert storage.scans == scans  # the worker measured nothing
    # An operator's refresh through the worker is newer than the snapshot: kept.
    put(storage, bills, 4)
    clock.advance(1)
    assert worker.refresh(bills).depth == 4
    snapshot.touch()  # the same snapshot again, seen as changed
    worker._followed = None
    assert worker.figures("ops", "bills").depth == 4
    assert worker.figures("ops", "orders").depth == 3
    # The next pass publishes newer figures: the worker takes them.
    clock.advance(31)
    put(storage, orders, 1)
    assert refresher.refresh_pass() == 2
    refresher.publish()
    worker._followed = None  # mtime granularity: the test does not wait for it
    assert worker.figures("ops", "orders").depth == 4
    assert worker.figures("ops", "bills").depth == 4

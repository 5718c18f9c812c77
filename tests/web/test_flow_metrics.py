"""Flow control in ``/metrics``: which queues and subscriptions are paused (from
the overview's metadata, no storage call; a series only for what is paused),
and the busiest groups of fair queues, summed over the server's processes."""

from __future__ import annotations

import pytest

from queuey.core.fairmetrics import STALE, FairGroups
from queuey.core.fairness import WINDOW, GroupTracker
from tests.support import wait_until
from tests.web.calls import batch, create
from tests.web.test_operator_figures import gauge

pytestmark = pytest.mark.unit


def flood(app, queue: str, counts: dict[str, int]) -> None:
    """Post ``counts[group]`` messages of each group, in batches of at most 100."""
    entries = [{"body": {"n": n}, "group": g} for g, c in counts.items() for n in range(c)]
    for start in range(0, len(entries), 100):
        batch(app, queue, entries[start : start + 100])


def test_paused_queues_and_subscriptions_are_gauges_without_a_storage_call(
    make_app, sqlite_storage, wrap_app
):
    app = wrap_app(make_app(sqlite_storage))
    create(app, "orders")
    create(app, "calm")
    app.put_json("/queue/orders/subscriptions/mail", {"rate": 5}, headers=app.auth)
    app.post("/queue/orders/pause", headers=app.auth)
    app.post("/queue/orders/subscriptions/audit/pause", headers=app.auth)
    app.app.registry.queuey.overview.refresh_pass()
    stats, sqlite_storage.stats = sqlite_storage.stats, None  # a scan would fail the scrape

    text = app.get("/metrics").text
    paused = {
        (queue, sub): gauge(
            text, "queuey_flow_paused", application=app.apps.app, queue=queue, subscription=sub
        )
        for queue, sub in (("orders", ""), ("orders", "audit"), ("orders", "mail"), ("calm", ""))
    }
    print(f"\nqueuey_flow_paused: {paused}")
    assert paused == {
        ("orders", ""): 1,
        ("orders", "audit"): 1,
        ("orders", "mail"): None,  # a flow setting, not paused: no series
        ("calm", ""): None,
    }

    app.post("/queue/orders/resume", headers=app.auth)
    sqlite_storage.stats = stats
    app.app.registry.queuey.overview.refresh_pass()
    text = app.get("/metrics").text
    labels = {"application": app.apps.app, "queue": "orders"}
    assert gauge(text, "queuey_flow_paused", subscription="", **labels) is None
    assert gauge(text, "queuey_flow_paused", subscription="audit", **labels) == 1


def test_a_fair_queues_busiest_groups_fade_after_the_window(
    make_app, sqlite_storage, wrap_app, clock
):
    app = wrap_app(make_app(sqlite_storage))
    create(app, "tenants")
    create(app, "plain")
    app.put_json("/queue/tenants", {"fair": True}, headers=app.auth)
    counts = {"flood": 300, **{f"t{n:02d}": 12 - n for n in range(12)}}
    flood(app, "tenants", counts)
    flood(app, "plain", {"flood": 50})  # not fair: its groups are not counted

    text = app.get("/metrics").text
    labels = {"application": app.apps.app, "queue": "tenants"}
    shown = {
        line.split('group="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("queuey_fair_group_posts{") and 'queue="tenants"' in line
    }
    print(f"\nqueuey_fair_group_posts (tenants): {shown}")
    assert len(shown) == 10  # the top 10 of 13 groups
    assert shown["flood"] == 300 and shown["t00"] == 12 and shown["t08"] == 4
    assert "t10" not in shown and "t11" not in shown
    assert 'queue="plain"' not in "".join(
        line for line in text.splitlines() if line.startswith("queuey_fair_group_posts{")
    )

    clock.advance(11)  # past the tracker's window: nothing recent
    text = app.get("/metrics").text
    assert gauge(text, "queuey_fair_group_posts", group="flood", **labels) is None


def test_each_process_writes_its_groups_and_a_scrape_sums_them(tmp_path, clock):
    """Two workers of one server (two trackers, one directory): whichever is
    scraped shows the sum; a worker that stopped posting fades, then its file goes."""
    now = lambda: clock.now_micros() / 1_000_000  # noqa: E731
    clock.advance(WINDOW / 2 - now() % (WINDOW / 2) + 0.1)  # early in a half window
    workers = []
    for _ in range(2):
        tracker = GroupTracker(now)
        fair = FairGroups(tracker, now, tmp_path / "fair-groups")
        tracker.on_counted = fair.counted
        workers.append((tracker, fair))
    (one, fair_one), (two, fair_two) = workers
    queue = ("shop", "tenants")
    one.lanes(queue, ["flood"] * 120 + ["calm"] * 3)
    two.lanes(queue, ["flood"] * 80 + ["quiet"])
    assert (
        fair_one.top(10, 100)
        == fair_two.top(10, 100)
        == {queue: [("flood", 200), ("calm", 3), ("quiet", 1)]}
    )

    two.lanes(queue, ["flood"] * 10)  # within a second of its last write: by the timer
    wait_until(
        lambda: dict(fair_one.top(10, 100)[queue])["flood"] == 210,
        what="worker two's later posts in its file",
    )

    clock.advance(2.5)  # worker two posts no more: its file fades over the window
    summed = dict(fair_one.top(10, 100)[queue])
    assert summed["flood"] == pytest.approx(120 + 90 * 0.85)  # 1.5 s past its last second
    assert summed["quiet"] == pytest.approx(0.85)

    clock.advance(STALE)
    assert fair_one.top(10, 100) == {}
    files = sorted(p.name for p in (tmp_path / "fair-groups").iterdir())
    assert files == [fair_one.path.name]  # worker two's stale file was removed


def test_a_bad_file_in_the_directory_is_skipped(tmp_path, clock):
    now = lambda: clock.now_micros() / 1_000_000  # noqa: E731
    tracker = GroupTracker(now)
    fair = FairGroups(tracker, now, tmp_path)
    tracker.on_counted = fair.counted
    (tmp_path / "fair-0-1.json").write_text('{"written": "x", "queues": 7}')
    (tmp_path / "fair-0-2.json").write_text("not json")
    tracker.lanes(("shop", "q"), ["a", "a"])
    assert fair.top(10, 100) == {("shop", "q"): [("a", 2)]}

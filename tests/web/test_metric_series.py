"""``/metrics`` stays bounded whatever names applications choose: a series
only for what is paused, at most so many per queue and application (the rest
counted in one ``~other`` series), and none for a deleted queue."""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from queuey.core import queuecounters
from queuey.core.queuecounters import OTHER
from queuey.storage.sqlite import SQLiteStorage
from queuey.web.metrics import FlowCollector
from tests.support import write_applications
from tests.web.calls import create

pytestmark = pytest.mark.unit

SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each series of ``name``: its labels and value."""
    found = []
    for line in text.splitlines():
        match = SERIES.match(line)
        if match and match.group(1) == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            found.append((labels, float(match.group(3))))
    return found


def test_subscription_flow_settings_give_a_series_per_paused_one_capped(
    make_app, sqlite_storage, wrap_app
):
    app = wrap_app(make_app(sqlite_storage))
    for queue in ("orders", "mail", "audit"):  # 100 subscriptions each, the most a queue has
        create(app, queue)
        for n in range(100):
            app.put_json(f"/queue/{queue}/subscriptions/s{n:03d}", {"rate": 5}, headers=app.auth)
    for n in range(30):
        app.post(f"/queue/orders/subscriptions/s{n:03d}/pause", headers=app.auth)
    app.app.registry.queuey.overview.refresh_pass()

    paused = series(app.get("/metrics").text, "queuey_flow_paused")
    shown = {(labels["queue"], labels["subscription"]): value for labels, value in paused}
    print(f"\n300 subscriptions with a flow setting, 30 paused: {len(paused)} series")
    assert len(paused) == FlowCollector.PAUSED_PER_QUEUE + 1
    assert shown == {**{("orders", f"s{n:03d}"): 1 for n in range(10)}, ("orders", OTHER): 20}


@pytest.fixture
def small_caps(monkeypatch):
    """Caps small enough that a few random steps go past them."""
    caps = {"per_application": 3, "max_queues": 5, "per_queue": 2, "paused_app": 4, "paused": 6}
    monkeypatch.setattr(queuecounters, "PER_APPLICATION", caps["per_application"])
    monkeypatch.setattr(queuecounters, "MAX_QUEUES", caps["max_queues"])
    monkeypatch.setattr(FlowCollector, "PAUSED_PER_QUEUE", caps["per_queue"])
    monkeypatch.setattr(FlowCollector, "PAUSED_PER_APPLICATION", caps["paused_app"])
    monkeypatch.setattr(FlowCollector, "MAX_PAUSED", caps["paused"])
    return caps


NAMES = st.one_of(
    st.sampled_from(["a", "b", "c", "d", "e"]),  # names that come back after a delete
    st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True),
)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "throttle", "throttle", "pause_subscription", "delete"]),
        st.integers(0, 1),  # which application
        NAMES,
        st.sampled_from(["s1", "s2", "s3", "s4"]),
    ),
    min_size=5,
    max_size=30,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
def test_random_names_never_pass_the_caps(
    steps, make_app, wrap_app, test_apps, tmp_path, clock, small_caps
):
    text = scrape_after(steps, make_app, wrap_app, test_apps, tmp_path, clock, small_caps)
    event(f"past a cap: {chr(34) + OTHER + chr(34) in text}")


def test_names_past_every_cap(make_app, wrap_app, test_apps, tmp_path, clock, small_caps):
    steps = [("throttle", who, f"q{n}", "") for n in range(6) for who in (0, 1)]
    steps += [("pause_subscription", 0, "q0", f"s{n}") for n in range(4)]
    steps += [("scrape", 0, "", ""), ("delete", 0, "q1", ""), ("throttle", 0, "q5", "")]
    text = scrape_after(steps, make_app, wrap_app, test_apps, tmp_path, clock, small_caps)
    throttled = series(text, "queuey_flow_throttled_total")
    print(f"\n{len(steps)} steps past the caps: {len(throttled)} throttled series")
    assert {labels["queue"] for labels, _ in throttled} >= {OTHER, "q5"}
    assert sum(value for _, value in throttled) == 12 + 1 - 1  # q1's count left with it


def scrape_after(steps, make_app, wrap_app, test_apps, tmp_path, clock, caps) -> str:
    """Take ``steps`` on a new app with two applications; check ``/metrics``
    against the caps and what is live; its text."""
    applications = write_applications(
        tmp_path / f"apps-{uuid.uuid4().hex}.ini", test_apps, remote_on_loopback=True
    )
    storage = SQLiteStorage(tmp_path / f"{uuid.uuid4().hex}.sqlite3", clock)
    try:
        app = wrap_app(make_app(storage, **{"queuey.applications": str(applications)}))
        auths = [test_apps.auth, test_apps.remote_auth]
        names = [test_apps.app, test_apps.remote_app]
        live: set[tuple[int, str]] = set()
        throttles: Counter = Counter()  # per live queue, since it was created
        for action, who, name, subscription in steps:
            auth, key = auths[who], (who, name)
            if action == "scrape":  # each process writes its counts before a scrape
                app.get("/metrics")
                continue
            if action != "delete" and key not in live:  # every other step creates first
                app.post_json("/queue", {"queue_name": name}, headers=auth, status=201)
                live.add(key)
            if action == "throttle":
                app.post(f"/queue/{name}/pause", headers=auth, status=200)
                app.post_json(f"/queue/{name}", {}, headers=auth, status=503)
                throttles[key] += 1
            elif action == "pause_subscription":
                path = f"/queue/{name}/subscriptions/{subscription}/pause"
                app.post(path, headers=auth, status=200)
            elif action == "delete" and key in live:
                app.delete(f"/queue/{name}", headers=auth, status=200)
                live.discard(key)
                throttles.pop(key, None)
        app.app.registry.queuey.overview.refresh_pass()
        text = app.get("/metrics").text
        check_bounds(text, caps, {(names[w], n) for w, n in live}, throttles, names)
        return text
    finally:
        storage.close()


def check_bounds(text, caps, live, throttles, names) -> None:
    everything = [
        labels
        for line in text.splitlines()
        if (m := SERIES.match(line))
        for labels in [dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))]
    ]
    named = {
        (s["application"], s["queue"]) for s in everything if "queue" in s and "application" in s
    }
    assert named - live - {(app, OTHER) for app in names} == set(), "a deleted queue's series"

    throttled = series(text, "queuey_flow_throttled_total")
    own = defaultdict(set)
    for labels, value in throttled:
        if labels["queue"] != OTHER:
            own[labels["application"]].add(labels["queue"])
            who = names.index(labels["application"])
            # Its own counts only (those from before it had a place are in ~other).
            assert 0 < value <= throttles[(who, labels["queue"])]
    assert all(len(queues) <= caps["per_application"] for queues in own.values())
    assert sum(len(queues) for queues in own.values()) <= caps["max_queues"]
    if not any(labels["queue"] == OTHER for labels, _ in throttled):
        assert sum(value for _, value in throttled) == sum(throttles.values())

    paused = series(text, "queuey_flow_paused")
    assert len(paused) <= caps["paused"] + len(names)
    per_app = Counter(labels["application"] for labels, _ in paused)
    assert all(n <= caps["paused_app"] + 1 for n in per_app.values())
    per_queue = Counter(
        (labels["application"], labels["queue"]) for labels, _ in paused if labels["subscription"]
    )
    assert all(n <= caps["per_queue"] + 1 for key, n in per_queue.items() if key[1] != OTHER)


def test_one_application_fills_at_most_its_share_of_the_fair_group_series():
    class Busy:
        """Fair queues ranked busiest first: 30 of "flood", then 5 of "calm"."""

        def top(self, count, max_queues):
            ranked = [(("flood", f"q{n}"), [("g", 100 - n)]) for n in range(30)]
            ranked += [(("calm", f"q{n}"), [("g", 1)]) for n in range(5)]
            return dict(ranked[:max_queues])

    class NoQueues:
        def watched(self):
            return []

    families = {f.name: f for f in FlowCollector(NoQueues(), Busy()).collect()}
    shown = Counter(s.labels["application"] for s in families["queuey_fair_group_posts"].samples)
    assert shown == {"flood": FlowCollector.FAIR_QUEUES_PER_APPLICATION, "calm": 5}

"""A queue's ``max_length`` (reject, drop_head) and an application's quotas,
on each backend, with an injected clock: the lengths flow control checks come
from the operators' overview (queuey.core.overview: measured by a refresher
pass, plus the posts counted since, queuey.core.lengths), a drop_head queue
is trimmed by the pass, and the quotas reach the REST API's answers; the
applications file's quota lines. Nothing sleeps: a pass is called, the clock
moved."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry

from queuey.applications import load_applications
from queuey.core.flow import AppLimits, FlowControl, QueueFull, QuotaExceeded
from queuey.core.lengths import PENDING_SECONDS, Counted, Lengths
from queuey.core.metrics import Metrics
from queuey.core.overview import Overview
from queuey.core.queues import Queues
from queuey.core.quotas import default_limits, limits_of
from queuey.core.workqueues import WorkQueues
from queuey.errors import ConfigurationError
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.settings import load_settings
from tests.support import KEY

BODY = '{"pad": "%s"}' % ("x" * 88)  # 100 bytes
SIZE = len(BODY)


class Rig:
    """One application's queues on a storage: the overview (no thread), flow
    control reading its lengths, and the work-queue service every post takes."""

    def __init__(self, storage, clock, limits: AppLimits = AppLimits()) -> None:
        self.storage, self.clock = storage, clock
        self.app = "flow-" + uuid.uuid4().hex[:12]
        self.overview = Overview(storage, clock, lambda: [self.app], interval=0)
        self.metrics = Metrics()
        self.overview.on_dropped = self.metrics.dropped
        self.overview.stored_quota = lambda application: (limits.messages, limits.bytes)
        self.flow = FlowControl(
            clock, lengths=self.overview.lengths, app_limits=lambda application: limits
        )
        self.queues = Queues(storage)
        self.work = WorkQueues(
            storage,
            clock,
            max_ttl=3600,
            queues=self.queues,
            flow=self.flow,
            on_posted=lambda queue, count: self.overview.count(queue, posted=count),
        )

    def queue(self, name: str, partitions: int = 1, **flow) -> QueueMeta:
        meta = self.storage.create_queue(QueueMeta(self.app, name, partitions=partitions, ttl=3600))
        if flow:
            meta = self.queues.update(
                self.app, name, attributes_set={f"flow.{k}": str(v) for k, v in flow.items()}
            )
        return meta

    def post(self, meta: QueueMeta, count: int = 1, partition: int = 1) -> None:
        """Through the service (flow control, counted as this process's posts)."""
        self.work.post(meta, [NewMessage(BODY, partition, 3600) for _ in range(count)])

    def elsewhere(self, meta: QueueMeta, count: int) -> None:
        """Posted by another process: in storage, unseen here until measured."""
        self.storage.put_messages(meta, [NewMessage(BODY, 1, 3600) for _ in range(count)])


def refused(rig: Rig, meta: QueueMeta, error: type) -> Exception:
    with pytest.raises(error) as info:
        rig.post(meta)
    return info.value


def test_max_length_rejects_once_measured_and_counts_posts_since(storage, clock):
    rig = Rig(storage, clock)
    meta = rig.queue("bounded", max_length=5)
    rig.elsewhere(meta, 4)
    assert rig.overview.length(meta) is None  # unknown: the post passes
    rig.post(meta)  # 1 counted here, 4 unseen
    assert rig.overview.length(meta) == 1  # a lower bound until measured

    assert rig.overview.refresh_pass() == 1
    assert rig.overview.length(meta) == 5
    full = refused(rig, meta, QueueFull)
    assert (full.field, full.status, full.retry_after) == ("max_length", 507, 5)
    assert "at most 5" in str(full)

    # Consumers delete two: the queue counts as full until measured again,
    # and a limited queue is measured on every pass, however fresh.
    found = storage.read_messages(meta, ReadQuery([1], clock.now_micros(), 2, "ascending"))
    storage.delete_messages(meta, [MessageRef(m.partition, m.id) for m in found])
    refused(rig, meta, QueueFull)
    clock.advance(1)
    assert rig.overview.refresh_pass() == 1
    assert rig.overview.length(meta) == 3
    rig.post(meta, 2)  # counted since the measurement: 3 + 2
    assert rig.overview.length(meta) == 5
    refused(rig, meta, QueueFull)


def test_drop_head_keeps_the_newest_and_counts_what_it_dropped(storage, clock):
    rig = Rig(storage, clock)
    meta = rig.queue("head", partitions=3, max_length=5, overflow="drop_head")
    posted = []
    for n in range(12):  # one at a time, a millisecond apart, over every partition
        stored = rig.work.post(meta, [NewMessage('{"n": %d}' % n, n % 3 + 1, 3600)])
        posted.append(stored[0].id)
        clock.advance(0.001)
    assert rig.overview.length(meta) == 12  # drop_head takes every post

    rig.overview.refresh_pass()
    kept = storage.read_messages(meta, ReadQuery([1, 2, 3], clock.now_micros(), 100, "ascending"))
    dropped = sample(rig.metrics.registry, "queuey_flow_dropped_total", rig.app, "head")
    print(f"posted=12 max_length=5 kept={len(kept)} dropped={dropped}")
    assert [m.id for m in kept] == posted[-5:]
    assert dropped == 7
    assert rig.overview.length(meta) == 5  # measured again after the trim
    assert rig.overview.figures(rig.app, "head").depth == 5

    rig.overview.refresh_pass()  # at its length: nothing more goes
    assert sample(rig.metrics.registry, "queuey_flow_dropped_total", rig.app, "head") == 7


def sample(registry: CollectorRegistry, name: str, application: str, queue: str) -> float | None:
    return registry.get_sample_value(name, {"application": application, "queue": queue})


def test_stored_quotas_sum_the_application_queues(storage, clock):
    limits = AppLimits(messages=8, bytes=10 * SIZE)
    rig = Rig(storage, clock, limits)
    first, second = rig.queue("one"), rig.queue("two", partitions=2)
    rig.elsewhere(first, 4)
    rig.elsewhere(second, 3)
    rig.overview.refresh_pass()  # measured although no queue has a max_length
    messages, size = rig.overview.usage(rig.app)
    print(f"usage after the pass: {messages} messages, {size} bytes (exact: 7, {7 * SIZE})")
    assert (messages, size) == (7, 7 * SIZE)  # alike bodies: Cassandra's estimate is exact

    rig.post(second)  # 8 messages, 8 * SIZE bytes
    over = refused(rig, first, QuotaExceeded)
    assert (over.field, over.status) == ("max_messages", 507)
    assert f"application {rig.app} stores 8 of its 8 messages" in str(over)

    rig.flow.app_limits = lambda application: AppLimits(bytes=8 * SIZE + SIZE // 2)
    over = refused(rig, first, QuotaExceeded)
    assert over.field == "max_bytes"
    assert f"stores {8 * SIZE} of its {8 * SIZE + SIZE // 2} bytes" in str(over)


def test_limited_queues_are_watched_first_and_measured_every_pass(sqlite_storage, clock):
    """Past ``queuey.stats.max_queues``, and past the pass's budget, the queues
    a post's admission depends on still come first; one other per pass too."""
    app = "flow-" + uuid.uuid4().hex[:12]
    for name in ("a", "b", "c"):
        sqlite_storage.create_queue(QueueMeta(app, name))
    sqlite_storage.create_queue(QueueMeta(app, "z", attributes={"flow.max_length": "3"}))
    overview = Overview(sqlite_storage, clock, lambda: [app], interval=0, max_queues=3, budget=1e-9)
    passes = []
    for _ in range(3):
        before = {f.name: f.measured for f in overview.all_figures()}
        count = overview.refresh_pass()
        changed = [f.name for f in overview.all_figures() if f.measured != before.get(f.name)]
        passes.append((count, sorted(changed)))
        clock.advance(1)
    assert [meta.name for meta, _ in overview.queues(app)] == ["a", "b", "z"]
    assert overview.unwatched == 1
    # z every pass although fresh; then the stalest other, while one is stale.
    assert passes == [(2, ["a", "z"]), (2, ["b", "z"]), (1, ["z"])]


def test_lengths_are_the_measurement_plus_the_posts_counted_since():
    lengths = Lengths()
    meta = QueueMeta("app", "q", incarnation="one")
    assert lengths.length(meta) is None and lengths.usage("app") is None
    counted = lengths.admit(meta, 3, 300)
    assert (counted.count, counted.size) == (3, 300)
    assert lengths.length(meta) == 3  # not measured yet: its posts
    assert lengths.mark(meta) == (0, 0)  # not written yet: the scan may miss them
    lengths.settle(meta, counted)
    mark = lengths.mark(meta)
    assert mark == (3, 300)
    lengths.measured(meta, 10, 1000, mark, at_micros=2)
    lengths.settle(meta, lengths.admit(meta, 2, 200))
    assert lengths.length(meta) == 12
    assert lengths.usage("app") == (12, 1000 + 200)  # the posts' own bytes
    # One of two servers taking posts: the other is reckoned to post alike.
    assert lengths.length(meta, share=0.5) == 14
    assert lengths.usage("app", share=0.5) == (14, 1000 + 400)
    lengths.measured(meta, 9, 900, (0, 0), at_micros=1)  # older figures change nothing
    assert lengths.length(meta) == 12
    purged = QueueMeta("app", "q", incarnation="two")
    assert lengths.length(purged) == 2  # purged elsewhere: the posts since count
    lengths.forget("app", "q")
    assert lengths.usage("app") == (0, 0)
    lengths.admit(purged, 1, 50)  # made again under the same name
    assert lengths.length(purged) == 1
    assert lengths.usage("app") == (1, 50)


def test_admission_counts_and_refuses_in_one_step():
    """The check and the count are one step: the figure a refusal names is
    exact, a refused post counts nothing, an unknown usage is empty."""
    lengths = Lengths()
    meta = QueueMeta("app", "q", incarnation="one")
    assert lengths.admit(meta, 41, 41, max_messages=40).field == "max_messages"
    assert lengths.usage("app") == (0, 0)  # nothing counted
    counted = lengths.admit(meta, 40, 4000, max_messages=40, max_bytes=4000)
    assert isinstance(counted, Counted)
    refusal = lengths.admit(meta, 1, 1, max_messages=40)
    assert (refusal.field, refusal.stored, refusal.limit) == ("max_messages", 40, 40)
    refusal = lengths.admit(meta, 0, 1, max_bytes=4000)
    assert (refusal.field, refusal.stored) == ("max_bytes", 4000)
    lengths.unpost(meta, counted)  # the write failed
    assert lengths.usage("app") == (0, 0)
    assert lengths.admit(meta, 3, 3, max_length=2).field == "max_length"


def test_a_post_not_yet_written_when_measured_still_counts():
    """A post counted before a measurement's mark but written after its scan
    is in neither the scan nor the posts since unless it is pending: it stays
    counted until written, and one whose writer died is forgotten after one
    to two epochs."""
    now = [0.0]
    lengths = Lengths(now=lambda: now[0])
    meta = QueueMeta("app", "q", incarnation="one")
    lengths.settle(meta, lengths.admit(meta, 5, 50))
    slow = lengths.admit(meta, 2, 20, max_messages=7)  # its write is under way
    mark = lengths.mark(meta)
    lengths.measured(meta, 5, 50, mark, at_micros=1)  # the scan missed it
    assert lengths.usage("app") == (7, 70)
    assert lengths.admit(meta, 1, 1, max_messages=7).field == "max_messages"
    lengths.settle(meta, slow)  # written: the next scan sees it
    lengths.measured(meta, 7, 70, lengths.mark(meta), at_micros=2)
    assert lengths.usage("app") == (7, 70)
    dead = lengths.admit(meta, 3, 30)  # its writer is killed: never settled
    lengths.measured(meta, 7, 70, lengths.mark(meta), at_micros=3)
    assert lengths.usage("app") == (10, 100)  # over until forgotten, never under
    now[0] = 2 * PENDING_SECONDS
    lengths.measured(meta, 7, 70, lengths.mark(meta), at_micros=4)
    assert lengths.usage("app") == (7, 70)
    lengths.settle(meta, dead)  # late: changes nothing
    assert lengths.usage("app") == (7, 70)


def test_a_purge_empties_the_length_for_every_process(tmp_path):
    processes = [Lengths(tmp_path) for _ in range(2)]
    meta = QueueMeta("app", "q", incarnation="one")
    processes[0].admit(meta, 5, 5, max_length=5)
    assert processes[1].admit(meta, 1, 1, max_length=5).field == "max_length"
    fresh = QueueMeta("app", "q", incarnation="two")
    processes[0].purged(fresh, at_micros=10)
    assert processes[1].length(fresh) == 0
    assert isinstance(processes[1].admit(fresh, 5, 5, max_length=5), Counted)
    for lengths in processes:
        lengths.close()


def test_the_processes_of_a_server_count_each_other_posts(tmp_path):
    """Posts through any worker count for every worker: however the posts
    are spread, the server stops at the length."""
    workers = [Lengths(tmp_path) for _ in range(2)]
    refresher = Lengths(tmp_path)
    meta = QueueMeta("app", "q", incarnation="one")
    workers[0].settle(meta, workers[0].admit(meta, 5, 500))
    workers[1].settle(meta, workers[1].admit(meta, 3, 300))
    mark = refresher.mark(meta)
    refresher.measured(meta, 8, 800, mark, at_micros=1)
    workers[1].admit(meta, 4, 400)
    assert [w.length(meta) for w in workers] == [12, 12]
    assert [w.usage("app") for w in workers] == [(12, 1200), (12, 1200)]
    for lengths in (*workers, refresher):
        lengths.close()


def test_a_worker_adds_the_posts_since_to_the_refresher_figures(sqlite_storage, clock, tmp_path):
    """Under the production server the refresher process measures into the
    shared tables: the posts after the measurement count, those before it
    are in the figures."""
    snapshot = tmp_path / "overview.pickle"
    app = "flow-" + uuid.uuid4().hex[:12]
    meta = sqlite_storage.create_queue(QueueMeta(app, "q", attributes={"flow.max_length": "9"}))
    refresher = Overview(
        sqlite_storage,
        clock,
        lambda: [app],
        interval=0,
        publish=snapshot,
        lengths=Lengths(tmp_path / "limits"),
    )
    worker_lengths = Lengths(tmp_path / "limits")
    worker = Overview(
        sqlite_storage, clock, lambda: [app], interval=0, follow=snapshot, lengths=worker_lengths
    )
    worker.stored_quota = refresher.stored_quota = lambda application: (0, 10**6)

    def post(count: int) -> None:
        counted = worker_lengths.admit(meta, count, count * SIZE, max_length=9)
        assert isinstance(counted, Counted)
        sqlite_storage.put_messages(meta, [NewMessage(BODY, 1, 3600)] * count)
        worker_lengths.settle(meta, counted)

    post(2)
    refresher.refresh_pass()
    refresher.publish()
    assert worker.length(meta) == 2  # the two posts are in the measurement now
    post(3)
    assert worker.length(meta) == 5
    refresher.refresh_pass()
    refresher.publish()
    assert worker.figures(app, "q").depth == 5
    assert worker.length(meta) == 5
    assert worker.usage(app) == (5, 5 * SIZE)


# -- through the REST API (SQLite) ----------------------------------------------------
APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8
{own}
"""


@pytest.fixture
def quota_app(make_app, sqlite_storage, wrap_app, tmp_path, test_apps):
    """``quota_app(own)``: the REST app with the test application's own lines."""

    def make(own: str):
        path = tmp_path / "quota-apps.ini"
        path.write_text(APPLICATIONS.format(app=test_apps.app, key=KEY, own=own), encoding="utf-8")
        return wrap_app(make_app(sqlite_storage, **{"queuey.applications": str(path)}))

    return make


def test_rest_answers_429_over_the_application_post_rate(quota_app, clock):
    app = quota_app("max_posts_per_second = 2")
    app.post_json("/queue", {"queue_name": "q"}, headers=app.auth, status=201)
    for _ in range(2):
        app.post_json("/queue/q", {"n": 1}, headers=app.auth, status=201)
    res = app.post_json("/queue/q", {"n": 1}, headers=app.auth, status=429)
    assert res.json["status"] == "error"
    assert list(res.json["error_msg"]) == ["max_posts_per_second"]
    assert "2 posts per second" in res.json["error_msg"]["max_posts_per_second"]
    assert res.headers["Retry-After"] == "1"
    clock.advance(1)
    app.post_json("/queue/q", {"n": 1}, headers=app.auth, status=201)


def test_rest_answers_507_over_the_stored_quota_and_the_length(quota_app):
    app = quota_app("max_messages = 3")
    services = app.app.registry.queuey
    app.post_json("/queue", {"queue_name": "q"}, headers=app.auth, status=201)
    app.post_json(
        "/queue/q/batch",
        {"messages": [{"body": {"n": n}} for n in range(2)]},
        headers=app.auth,
        status=201,
    )
    services.overview.refresh_pass()
    app.post_json("/queue/q", {"n": 2}, headers=app.auth, status=201)
    res = app.post_json("/queue/q", {"n": 3}, headers=app.auth, status=507)
    assert list(res.json["error_msg"]) == ["max_messages"]
    assert res.headers["Retry-After"] == "5"

    app.post_json("/queue", {"queue_name": "short", "max_length": 1}, headers=app.auth, status=201)
    app.delete("/queue/q", headers=app.auth, status=200)
    services.overview.refresh_pass()
    app.post_json("/queue/short", {"n": 1}, headers=app.auth, status=201)
    res = app.post_json("/queue/short", {"n": 2}, headers=app.auth, status=507)
    assert list(res.json["error_msg"]) == ["max_length"]


# -- configuration ----------------------------------------------------------------------
def write_apps(tmp_path, lines: str):
    path = tmp_path / "apps.ini"
    path.write_text(f"[application:shop]\nkeys = plain:k\n{lines}\n", encoding="utf-8")
    return path


@pytest.mark.unit
@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("max_posts_per_second = fast", "max_posts_per_second must be a number"),
        ("max_posts_per_second = nan", "max_posts_per_second must be between 0 and 1000000"),
        ("max_messages = -1", "max_messages must be between 0 and"),
        ("max_messages = 1.5", "max_messages must be a number"),
        ("max_bytes = 2000000000000000000", "max_bytes must be between 0 and"),
    ],
)
def test_the_applications_file_names_a_bad_quota_and_its_application(tmp_path, line, words):
    with pytest.raises(ConfigurationError) as info:
        load_applications(write_apps(tmp_path, line))
    assert words in str(info.value)
    assert "[application:shop]" in str(info.value)


@pytest.mark.unit
def test_quotas_come_from_the_file_else_the_settings(tmp_path):
    apps = load_applications(
        write_apps(tmp_path, "max_posts_per_second = 2.5\nmax_messages = 0\nmax_bytes = 4096")
    )
    settings = load_settings(
        {
            "queuey.applications": "apps.ini",
            "queuey.limits.max_messages": "100",
            "queuey.limits.max_posts_per_second": "50",
        }
    )
    limits = limits_of(apps["shop"], default_limits(settings))
    assert (limits.posts_per_second, limits.messages, limits.bytes) == (2.5, 0, 4096)
    plain = default_limits(load_settings({"queuey.applications": "apps.ini"}))
    assert (plain.posts_per_second, plain.messages, plain.bytes) == (0, 0, 0)
    with pytest.raises(ConfigurationError) as info:
        load_settings({"queuey.applications": "apps.ini", "queuey.limits.max_bytes": "-5"})
    assert info.value.key == "queuey.limits.max_bytes"

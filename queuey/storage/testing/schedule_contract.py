"""The schedule contract: storage of schedules and the ticks the service fires.

:class:`ScheduleContract` needs the ``storage``
fixture and the ``clock`` fixture (a ``ManualClock`` the storage was built
with). The service (:class:`queuey.core.schedules.Schedules`) runs on the
backend with the test's clock and no ticker thread: each test calls ``tick()``
where a node's ticker would, so time only moves when a test moves it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from queuey import ids
from queuey.core.messages import InvalidFields, MessageRules
from queuey.core.queues import Queues
from queuey.core.schedules import LATE_GRACE, MAX_CATCH_UP, Schedules, TooManySchedules
from queuey.core.workqueues import WorkQueues
from queuey.errors import ScheduleExists, ScheduleNotFound
from queuey.model import QueueMeta, ReadQuery
from queuey.model.schedules import TICK_ATTRIBUTE, Schedule
from queuey.storage import Storage

RULES = MessageRules(max_ttl=30 * 86400, max_message_size=65536)
MONTH = 30 * 86400


def at(*fields: int) -> int:
    """Epoch seconds of a UTC date and time."""
    return int(datetime(*fields, tzinfo=UTC).timestamp())


class ScheduleContract:
    @pytest.fixture
    def app(self) -> str:
        return "app-" + uuid.uuid4().hex[:12]

    @pytest.fixture
    def target(self, storage: Storage, app: str) -> QueueMeta:
        return storage.create_queue(
            QueueMeta(application=app, name="ticks", partitions=2, ttl=MONTH)
        )

    @pytest.fixture
    def service(self, storage, clock, app, target) -> Schedules:
        return self.make_service(storage, clock, app)

    # -- helpers ------------------------------------------------------------------
    @staticmethod
    def make_service(storage, clock, app, limit=100) -> Schedules:
        queues = Queues(storage)
        posts = WorkQueues(storage, clock, rules=RULES, queues=queues)
        return Schedules(storage, queues, RULES, clock, posts.post, lambda: [app], limit=limit)

    @staticmethod
    def now(clock) -> int:
        return clock.now_micros() // ids.MICROS

    @staticmethod
    def set_time(clock, seconds: int) -> None:
        clock.set(seconds * ids.MICROS)

    def ticks(self, storage, clock, app) -> list[int]:
        """The tick of every message in the target queue, in posting order."""
        queue = storage.get_queue(app, "ticks")
        found = storage.read_messages(
            queue,
            ReadQuery(
                partitions=[1, 2],
                now_micros=clock.now_micros() + 10**6,
                limit=1000,
                order="ascending",
            ),
        )
        return [int(m.attributes[TICK_ATTRIBUTE]) for m in found]

    def create(self, service, app, **fields) -> Schedule:
        fields.setdefault("name", "s")
        fields.setdefault("queue", "ticks")
        fields.setdefault("message", {"body": {"hello": "world"}})
        return service.create(app, fields)

    # -- storage --------------------------------------------------------------------
    def test_schedules_are_stored_per_application_by_name(self, storage, service, app):
        made = self.create(service, app, name="b", interval=60)
        assert made.version == 1 and made.next_tick == made.created
        self.create(service, app, name="a", cron="*/5 * * * *", timezone="Europe/Paris")
        with pytest.raises(ScheduleExists):
            self.create(service, app, name="a", interval=5)
        assert [s.name for s in storage.list_schedules(app)] == ["a", "b"]
        assert storage.list_schedules(app + "-other") == []
        got = storage.get_schedule(app, "b")
        assert got == made and got.message == {"body": {"hello": "world"}}
        storage.delete_schedule(app, "b")
        with pytest.raises(ScheduleNotFound):
            storage.get_schedule(app, "b")
        with pytest.raises(ScheduleNotFound):
            storage.delete_schedule(app, "b")
        assert [s.name for s in storage.list_schedules(app)] == ["a"]

    def test_a_schedule_update_is_a_compare_and_set_on_its_version(self, storage, service, app):
        made = self.create(service, app, interval=60)
        first = storage.update_schedule(replace(made, next_tick=made.next_tick + 60, posted=1))
        assert first is not None and first.version == 2
        assert storage.update_schedule(replace(made, paused=True)) is None  # stale version
        assert storage.get_schedule(app, "s") == first
        storage.delete_schedule(app, "s")
        assert storage.update_schedule(first) is None

    # -- ticks ------------------------------------------------------------------------
    def test_an_interval_schedule_posts_once_per_tick(self, storage, service, clock, app):
        made = self.create(service, app, interval=60)
        t0 = made.next_tick
        assert service.tick() == 1
        assert service.tick() == 0  # the same instant again: nothing new
        clock.advance(59)
        assert service.tick() == 0
        clock.advance(1)
        assert service.tick() == 1
        assert self.ticks(storage, clock, app) == [t0, t0 + 60]
        got = service.get(app, "s")
        assert (got.posted, got.last_tick, got.next_tick) == (2, t0 + 60, t0 + 120)

    def test_cron_ticks_follow_the_wall_clock_across_dst_changes(
        self, storage, service, clock, app
    ):
        # New York springs forward on 2026-03-08 (02:00 EST -> 03:00 EDT) and
        # falls back on 2026-11-01 (02:00 EDT -> 01:00 EST).
        self.set_time(clock, at(2026, 3, 7, 12))
        zone = {"timezone": "America/New_York"}
        self.create(service, app, name="spring", cron="30 2 * * *", **zone)
        expected = [at(2026, 3, 8, 7, 30), at(2026, 3, 9, 6, 30)]  # 03:30 EDT: the gap's rule
        for tick in expected:
            assert service.get(app, "spring").next_tick == tick
            self.set_time(clock, tick)
            assert service.tick() == 1
        assert self.ticks(storage, clock, app) == expected
        service.delete(app, "spring")
        self.set_time(clock, at(2026, 10, 31, 12))
        self.create(service, app, name="fall", cron="30 1 * * *", **zone)
        fall = [at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)]  # once, 01:30 EDT; then EST
        for tick in fall:
            assert service.get(app, "fall").next_tick == tick
            self.set_time(clock, tick + 1)
            assert service.tick() == 1
        assert self.ticks(storage, clock, app) == fall  # (March's have expired by now)

    def test_no_tick_before_start_nor_after_end(self, storage, service, clock, app):
        now = self.now(clock)
        self.create(service, app, interval=10, start=now + 100, end=now + 125)
        assert service.tick() == 0
        for step in (100, 10, 10, 10, 10):
            clock.advance(step)
            service.tick()
        assert self.ticks(storage, clock, app) == [now + 100, now + 110, now + 120]
        ended = service.get(app, "s")
        assert ended.next_tick is None and ended.state == "ended"

    def test_resuming_skips_the_ticks_missed_while_paused(self, storage, service, clock, app):
        t0 = self.create(service, app, interval=10).next_tick
        assert service.tick() == 1
        assert service.pause(app, "s").state == "paused"
        clock.advance(35)
        assert service.tick() == 0
        resumed = service.resume(app, "s")
        assert resumed.state == "active" and resumed.next_tick == t0 + 40
        clock.advance(5)
        assert service.tick() == 1
        assert self.ticks(storage, clock, app) == [t0, t0 + 40]

    def test_after_downtime_latest_posts_the_most_recent_tick_once(
        self, storage, service, clock, app
    ):
        t0 = self.create(service, app, interval=10).next_tick
        service.tick()
        clock.advance(95)  # nine ticks missed
        assert service.tick() == 1
        assert self.ticks(storage, clock, app) == [t0, t0 + 90]
        assert service.get(app, "s").next_tick == t0 + 100

    def test_a_late_pass_is_not_downtime_it_posts_every_late_tick(
        self, storage, service, clock, app
    ):
        t0 = self.create(service, app, interval=1).next_tick
        clock.advance(LATE_GRACE)  # the first pass runs late
        assert service.tick() == LATE_GRACE + 1
        assert self.ticks(storage, clock, app) == list(range(t0, t0 + LATE_GRACE + 1))

    def test_after_downtime_all_posts_every_tick_a_bounded_number_per_pass(
        self, storage, service, clock, app
    ):
        t0 = self.create(service, app, interval=1, missed="all").next_tick
        clock.advance(MAX_CATCH_UP + 30)
        assert service.tick() == MAX_CATCH_UP
        assert service.tick() == 31
        assert self.ticks(storage, clock, app) == list(range(t0, t0 + MAX_CATCH_UP + 31))

    def test_two_nodes_ticking_at_once_post_each_tick_once(self, storage, service, clock, app):
        other = self.make_service(storage, clock, app)
        t0 = self.create(service, app, interval=10).next_tick
        for _ in range(3):
            barrier, counts = threading.Barrier(2), []

            def run(node, barrier=barrier, counts=counts):
                barrier.wait()
                counts.append(node.tick())

            threads = [threading.Thread(target=run, args=(n,)) for n in (service, other)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sum(counts) == 1, counts  # exactly one node advanced the schedule
            clock.advance(10)
        assert self.ticks(storage, clock, app) == [t0, t0 + 10, t0 + 20]
        assert service.get(app, "s").posted == 3

    def test_a_node_dying_between_a_tick_post_and_advance_is_healed(
        self, storage, service, clock, app, monkeypatch
    ):
        t0 = self.create(service, app, interval=10).next_tick
        crashing = self.make_service(storage, clock, app)
        monkeypatch.setattr(crashing, "storage", _NoUpdates(storage))
        crashing.tick()  # posted, never advanced
        assert service.get(app, "s").next_tick == t0
        assert service.tick() == 1  # posts the same tick again: the dedup id answers
        assert self.ticks(storage, clock, app) == [t0]
        assert service.get(app, "s").next_tick == t0 + 10

    def test_a_deleted_queue_stops_the_schedule_once(self, storage, service, clock, app):
        self.create(service, app, interval=10)
        storage.delete_queue(app, "ticks")
        assert service.tick() == 0
        stopped = service.get(app, "s")
        assert stopped.state == "stopped" and "ticks" in stopped.error
        clock.advance(30)
        assert service.tick() == 0
        assert service.get(app, "s").version == stopped.version  # no write per pass
        with pytest.raises(InvalidFields) as refused:
            service.resume(app, "s")
        assert "queue" in refused.value.errors

    def test_an_application_has_at_most_limit_schedules(self, storage, clock, app, target):
        service = self.make_service(storage, clock, app, limit=2)
        self.create(service, app, name="a", interval=5)
        self.create(service, app, name="b", interval=5)
        with pytest.raises(TooManySchedules):
            self.create(service, app, name="c", interval=5)
        service.delete(app, "a")
        self.create(service, app, name="c", interval=5)


class _NoUpdates:
    """A storage whose schedule updates are lost (the node dies right before)."""

    def __init__(self, storage) -> None:
        self._storage = storage

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def update_schedule(self, schedule):
        return None

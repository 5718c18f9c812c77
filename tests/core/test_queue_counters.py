"""The per-queue metric counts (queuey.core.queuecounters): one table the
server's processes share, forgotten with the queue, bounded per application.
Two ``QueueCounters`` on one file stand for two worker processes."""

from __future__ import annotations

import pytest

from queuey.core import queuecounters
from queuey.core.queuecounters import OTHER, QueueCounters
from queuey.model import QueueMeta

pytestmark = pytest.mark.unit

THROTTLED = "queuey_flow_throttled"


@pytest.fixture
def now():
    return [1_000_000.0]


@pytest.fixture
def workers(tmp_path, monkeypatch, now):
    # No timer writes during a test: each writes when told (or before a read).
    monkeypatch.setattr(queuecounters, "WRITE_SECONDS", 3600.0)
    made = [QueueCounters(tmp_path / "counts.sqlite3", lambda: now[0]) for _ in range(2)]
    yield made
    for counters in made:
        counters.close()


def series(counters: QueueCounters) -> dict[tuple[str, str, str], float]:
    return {(c.application, c.queue, c.kind): c.value for c in counters.counts()}


def queue(name: str, created: int = 1, application: str = "shop") -> QueueMeta:
    return QueueMeta(application, name, created=created)


def test_counts_of_every_process_in_one_table(workers):
    one, two = workers
    one.add(THROTTLED, queue("orders"), "paused", 1)
    two.add(THROTTLED, queue("orders"), "paused", 2)
    two.add(THROTTLED, queue("orders"), "post_rate", 1)
    two.write()
    assert (
        series(one)
        == series(two)
        == {
            ("shop", "orders", "paused"): 3,
            ("shop", "orders", "post_rate"): 1,
        }
    )


def test_a_deleted_queue_leaves_every_process_and_a_new_one_starts_at_zero(workers, now):
    one, two = workers
    old = queue("orders", created=1)
    one.add(THROTTLED, old, "paused", 1)  # the first count is written at once
    two.add(THROTTLED, old, "paused", 1)
    two.add(THROTTLED, old, "paused", 1)  # this one waits in worker two
    now[0] += 1
    one.forget(old)
    assert series(one) == {}
    two.write()  # counted just before the delete: discarded (the tombstone)
    assert series(two) == series(one) == {}

    new = queue("orders", created=2)
    two.add(THROTTLED, new, "paused", 1)
    two.write()
    one.add(THROTTLED, old, "paused", 1)  # a stale copy of the old queue's metadata
    assert series(one) == {("shop", "orders", "paused"): 1}


def test_a_queue_created_again_within_the_clocks_tick_is_counted(workers, now):
    """A store's clock may give the new queue the old one's creation time
    (a manual clock, a legacy queue without one): its counts after the
    delete are its own, not the deleted queue's."""
    one, two = workers
    same = queue("orders", created=1)
    one.add(THROTTLED, same, "paused", 1)
    two.add(THROTTLED, same, "paused", 1)
    two.add(THROTTLED, same, "paused", 1)  # before the delete, waiting in worker two
    now[0] += 1
    one.forget(same)
    now[0] += 1
    one.add(THROTTLED, same, "paused", 1)  # the queue created again
    two.write()
    assert series(one) == {("shop", "orders", "paused"): 1}


def test_a_queue_created_again_elsewhere_replaces_the_old_counts(workers):
    one, _ = workers
    one.add(THROTTLED, queue("orders", created=1), "paused", 5)
    one.add(THROTTLED, queue("orders", created=1), "max_length", 5)
    one.add(THROTTLED, queue("orders", created=9), "paused", 1)
    assert series(one) == {("shop", "orders", "paused"): 1}


def test_an_application_past_its_cap_is_counted_in_one_series(workers, monkeypatch):
    monkeypatch.setattr(queuecounters, "PER_APPLICATION", 3)
    one, two = workers
    for n in range(5):
        (one, two)[n % 2].add(THROTTLED, queue(f"q{n}"), "paused", n + 1)
        (one, two)[n % 2].write()
    two.add(THROTTLED, queue("own", application="calm"), "paused", 1)
    two.write()
    shown = series(one)
    assert shown == {
        ("shop", "q0", "paused"): 1,
        ("shop", "q1", "paused"): 2,
        ("shop", "q2", "paused"): 3,
        ("shop", OTHER, "paused"): 4 + 5,
        ("calm", "own", "paused"): 1,  # another application keeps its room
    }
    one.forget(queue("q0"))  # a deleted queue frees its place
    one.add(THROTTLED, queue("q9"), "paused", 1)
    assert ("shop", "q9", "paused") in series(one)


def test_the_cap_over_all_applications(workers, monkeypatch):
    monkeypatch.setattr(queuecounters, "MAX_QUEUES", 2)
    one, _ = workers
    for app in ("a", "b", "c"):
        one.add(THROTTLED, queue("q", application=app), "paused", 1)
        one.write()
    assert series(one) == {
        ("a", "q", "paused"): 1,
        ("b", "q", "paused"): 1,
        ("c", OTHER, "paused"): 1,
    }


def test_an_idle_queue_gives_its_place_up_and_the_sum_never_goes_down(workers, monkeypatch, now):
    monkeypatch.setattr(queuecounters, "PER_APPLICATION", 2)
    one, _ = workers
    one.add(THROTTLED, queue("old"), "paused", 7)
    one.write()
    now[0] += 10
    one.add(THROTTLED, queue("busy"), "paused", 1)
    one.write()
    one.add(THROTTLED, queue("late"), "paused", 1)  # nobody idle long enough
    assert series(one)[("shop", OTHER, "paused")] == 1
    now[0] += queuecounters.IDLE
    one.add(THROTTLED, queue("busy"), "paused", 1)
    one.write()
    one.add(THROTTLED, queue("new"), "paused", 2)
    shown = series(one)
    assert shown == {
        ("shop", "busy", "paused"): 2,
        ("shop", "new", "paused"): 2,
        ("shop", OTHER, "paused"): 1 + 7,  # "old" folded in
    }


def test_prune_drops_queues_deleted_through_another_node(workers):
    one, two = workers
    one.add(THROTTLED, queue("kept", created=5), "paused", 1)
    one.write()
    one.add(THROTTLED, queue("gone", created=5), "paused", 1)
    one.write()
    one.add(THROTTLED, queue("remade", created=5), "paused", 1)
    one.write()
    one.add(THROTTLED, queue("young", created=10**15), "paused", 1)  # after the listing
    one.write()
    listed = {"shop": [queue("kept", created=5), queue("remade", created=6)]}

    def list_queues(application, limit, after):
        return listed.get(application, []) if after is None else []

    two.prune(list_queues, lambda: 10**15)
    assert set(series(one)) == {("shop", "kept", "paused"), ("shop", "young", "paused")}
    two.add(THROTTLED, queue("kept", created=5), "paused", 1)
    two.prune(list_queues, lambda: 10**15)  # at most every PRUNE_SECONDS: nothing listed
    assert series(two)[("shop", "kept", "paused")] == 2

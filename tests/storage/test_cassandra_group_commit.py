"""Cassandra group commit: concurrent posts to one queue partition share one write.

A gate on the driver's request path holds the first message write in flight
while other callers queue behind it, so the test knows which posts share the
next write. What a user would notice: fewer writes than posts, each caller
answered with exactly its own messages (all readable afterwards, in its
order), a failed shared write failing every caller in it, and nobody hanging.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pytest
from cassandra import OperationTimedOut
from cassandra.query import BatchStatement, BatchType, BoundStatement

from queuey.errors import StorageUnavailable
from queuey.model import Message, NewMessage, ReadQuery
from queuey.storage.cassandra import CassandraStorage
from tests.storage.cassandra_support import KEYSPACE, Recorder, put
from tests.support import wait_until

pytestmark = pytest.mark.cassandra

DEADLINE = 20.0
CALLERS = 8


def is_message_write(query: Any) -> bool:
    """A batch, or a lone INSERT into the messages table (not the index)."""
    if isinstance(query, BatchStatement):
        return True
    return isinstance(query, BoundStatement) and query.prepared_statement.query_string.startswith(
        f"INSERT INTO {KEYSPACE}.messages "
    )


def message_writes(recorder: Recorder) -> list[str]:
    return [s.cql.split(" (")[0] for s in recorder.sent if s.cql.startswith("BATCH")] + [
        s.cql.split(" (")[0] for s in recorder.on("messages", "INSERT")
    ]


class Gate:
    """Holds the first message write in flight until released; with ``fail``,
    the second message write (the shared one) fails as a driver timeout would."""

    def __init__(self, store: CassandraStorage, fail: bool = False) -> None:
        self.session = store.session
        self.fail = fail
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._seen = 0
        self.session.add_request_init_listener(self._on_request)

    def _on_request(self, future: Any) -> None:
        if not is_message_write(future.query):
            return
        with self._lock:
            self._seen += 1
            seen = self._seen
        if seen == 1:
            self.held.set()
            assert self.release.wait(DEADLINE), "the gate was never released"
        elif seen == 2 and self.fail:
            raise OperationTimedOut("injected: the shared write timed out")

    def close(self) -> None:
        self.release.set()
        self.session.remove_request_init_listener(self._on_request)


@pytest.fixture
def gate(store) -> Any:
    gates: list[Gate] = []

    def make(fail: bool = False) -> Gate:
        gates.append(Gate(store, fail))
        return gates[-1]

    yield make
    for g in gates:
        g.close()


def start(call: Callable[[], Any], outcomes: dict[int, Any], key: int) -> threading.Thread:
    """Run ``call`` in a thread; its result or exception lands in ``outcomes[key]``."""

    def run() -> None:
        try:
            outcomes[key] = call()
        except BaseException as exc:  # noqa: BLE001 - the outcome is what we check
            outcomes[key] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive(), "a caller hangs"


def bodies(caller: int, count: int) -> list[str]:
    return ['{"caller": %d, "n": %d}' % (caller, n) for n in range(count)]


def post(store, queue, caller: int, count: int = 3, partition: int = 1) -> Callable[[], Any]:
    messages = [NewMessage(b, partition, 600) for b in bodies(caller, count)]
    return lambda: store.put_messages(queue, messages)


def behind_a_held_write(store, queue, gate: Gate, calls: list[Callable[[], Any]]) -> dict:
    """Run ``calls[0]`` and hold its write until every other call is queued
    behind it; returns every call's outcome by index."""
    outcomes: dict[int, Any] = {}
    threads = [start(calls[0], outcomes, 0)]
    assert gate.held.wait(DEADLINE)
    threads += [start(call, outcomes, i) for i, call in enumerate(calls) if i > 0]
    groups = store._writer.groups
    wait_until(lambda: groups.waiting() == len(calls) - 1, DEADLINE, "every caller to queue")
    gate.release.set()
    join(threads)
    return outcomes


def read_all(store, queue, clock, partition: int = 1) -> list[Message]:
    query = ReadQuery(
        partitions=[partition], now_micros=clock.now_micros(), limit=1000, order="ascending"
    )
    return store.read_messages(queue, query)


def test_concurrent_posts_share_a_write_and_each_gets_its_own_messages(
    store, queue, clock, recorder, gate
):
    put(store, queue, 0)  # the bucket's index row: later posts write messages only
    recorder.clear()
    calls = [post(store, queue, i) for i in range(CALLERS)]
    outcomes = behind_a_held_write(store, queue, gate(), calls)

    # The first post went alone at once; the seven queued behind it went together.
    assert message_writes(recorder) == [
        f"BATCH {BatchType.UNLOGGED}",
        f"BATCH {BatchType.UNLOGGED}",
    ]
    for i in range(CALLERS):
        got = outcomes[i]
        assert [m.body for m in got] == bodies(i, 3)
        assert [m.partition for m in got] == [1, 1, 1]
        assert [m.id.time for m in got] == sorted(m.id.time for m in got)
    ids = [m.id for i in range(CALLERS) for m in outcomes[i]]
    assert len(set(ids)) == len(ids)
    stored = {m.id: m.body for m in read_all(store, queue, clock)}
    assert {m.id: m.body for i in range(CALLERS) for m in outcomes[i]}.items() <= stored.items()
    order = [stored[m.id] for m in read_all(store, queue, clock) if m.id in set(ids)]
    for i in range(CALLERS):
        assert [b for b in order if b in bodies(i, 3)] == bodies(i, 3)


def test_an_idle_post_is_one_write_at_once(store, queue, recorder):
    put(store, queue, 0)
    recorder.clear()
    put(store, queue, 1)
    assert [s.cql.split(" (")[0] for s in recorder.sent] == [f"INSERT INTO {KEYSPACE}.messages"]
    recorder.clear()
    store.put_messages(queue, [NewMessage("{}", 1, 600) for _ in range(3)])
    assert [s.cql for s in recorder.sent] == [f"BATCH {BatchType.UNLOGGED}"]


def test_a_failed_shared_write_fails_every_caller_in_it(store, queue, clock, gate):
    put(store, queue, 0)
    calls = [post(store, queue, i) for i in range(CALLERS)]
    outcomes = behind_a_held_write(store, queue, gate(fail=True), calls)

    assert [m.body for m in outcomes[0]] == bodies(0, 3)
    for i in range(1, CALLERS):
        assert isinstance(outcomes[i], StorageUnavailable), outcomes[i]
        assert "OperationTimedOut" in str(outcomes[i])
    assert len({id(outcomes[i]) for i in range(1, CALLERS)}) == CALLERS - 1
    stored = {m.body for m in read_all(store, queue, clock)}
    assert not stored & {b for i in range(1, CALLERS) for b in bodies(i, 3)}
    # The partition's writes are not stuck behind the failure.
    assert put(store, queue, 99).body == '{"n": 99}'


def test_a_capped_group_leaves_the_overflow_to_the_next_write(store, queue, clock, recorder, gate):
    put(store, queue, 0)
    store._writer.groups.max_messages = 6  # two callers of three messages a write
    recorder.clear()
    calls = [post(store, queue, i) for i in range(CALLERS)]
    outcomes = behind_a_held_write(store, queue, gate(), calls)

    assert len(message_writes(recorder)) == 1 + 4
    for i in range(CALLERS):
        assert [m.body for m in outcomes[i]] == bodies(i, 3)
    assert len(read_all(store, queue, clock)) == 1 + 3 * CALLERS


def test_other_partitions_and_dedup_posts_do_not_wait(store, queue, clock, gate):
    put(store, queue, 0, partition=1)
    put(store, queue, 0, partition=2)
    held = gate()
    outcomes: dict[int, Any] = {}
    first = start(post(store, queue, 0), outcomes, 0)
    assert held.held.wait(DEADLINE)
    # Partition 1's write is in flight: partition 2 and dedup posts write at once.
    other = store.put_messages(queue, [NewMessage('{"other": 1}', 2, 600)])
    dedup = [NewMessage('{"dedup": 1}', 1, 600, dedup_id="d-1")]
    first_dedup = store.put_messages(queue, dedup)
    assert store.put_messages(queue, dedup)[0].id == first_dedup[0].id
    assert store._writer.groups.waiting() == 0
    held.release.set()
    join([first])
    assert [m.body for m in outcomes[0]] == bodies(0, 3)
    assert other[0].id in {m.id for m in read_all(store, queue, clock, partition=2)}


def test_a_caller_queued_too_long_is_withdrawn_and_nothing_of_it_is_stored(
    store, queue, clock, gate
):
    put(store, queue, 0)
    store.write_timeout_seconds = 0.5
    held = gate()
    outcomes: dict[int, Any] = {}
    first = start(post(store, queue, 0), outcomes, 0)
    assert held.held.wait(DEADLINE)
    waiter = start(post(store, queue, 1), outcomes, 1)
    join([waiter])  # gives up after the write timeout, while the first write is held
    assert isinstance(outcomes[1], StorageUnavailable)
    assert "nothing was stored" in str(outcomes[1])
    held.release.set()
    join([first])
    store.write_timeout_seconds = 5
    assert put(store, queue, 2).body == '{"n": 2}'
    assert not {m.body for m in read_all(store, queue, clock)} & set(bodies(1, 3))


class Interrupted(BaseException):
    """Raised inside a waiting caller's thread, as a signal or a timeout would."""


def interrupt(thread: threading.Thread) -> None:
    """Raise :class:`Interrupted` in ``thread`` once it runs Python code again."""
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(Interrupted)
    )
    assert done == 1


def test_an_interrupted_caller_hands_its_group_on(store, queue, clock, gate):
    """The first queued caller is to lead the next write but is interrupted
    as it wakes: the others of its group are written all the same."""
    put(store, queue, 0)
    held = gate()
    outcomes: dict[int, Any] = {}
    threads = [start(post(store, queue, 0), outcomes, 0)]
    assert held.held.wait(DEADLINE)
    groups = store._writer.groups
    for i in (1, 2, 3):
        threads.append(start(post(store, queue, i), outcomes, i))
        wait_until(lambda i=i: groups.waiting() == i, DEADLINE, "the caller to queue")
    interrupt(threads[1])  # blocked in its wait: raised when the lane wakes it
    held.release.set()
    join(threads)

    assert isinstance(outcomes[1], BaseException)
    for i in (0, 2, 3):
        assert [m.body for m in outcomes[i]] == bodies(i, 3)
    stored = {m.body for m in read_all(store, queue, clock)}
    assert set(bodies(2, 3)) | set(bodies(3, 3)) <= stored
    assert not stored & set(bodies(1, 3))
    assert groups.waiting() == 0
    assert put(store, queue, 4).body == '{"n": 4}'

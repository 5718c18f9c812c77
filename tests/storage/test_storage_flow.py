"""What flow control asks of storage beyond the shipped contract
(:mod:`queuey.storage.testing.flow_contract`, run by each backend's suite):
the live processes, the shared bucket file, and processes sharing a store.

SQLite enforces ``max_in_flight`` inside its write transaction, checked here
with threads of two storages (two processes) sharing one file; on Cassandra a
second storage object stands for a second API process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from queuey.clock import ManualClock
from queuey.storage import Storage
from queuey.storage.cassandra import load_from_config
from queuey.storage.sqlite import SQLiteStorage
from queuey.storage.testing.flow_contract import flow_queue_in, post, reserve, stats_in_flight
from tests.support import wait_until

#: Seconds any wait of these tests may take at most.
DEADLINE = 30.0


@pytest.fixture
def queue(storage):
    return flow_queue_in(storage)


class TestSQLiteFlow:
    @pytest.fixture
    def storage(self, tmp_path, clock):
        store = SQLiteStorage(tmp_path / "queuey.sqlite3", clock, sweep_interval=0)
        yield store
        store.close()

    def test_concurrent_reserves_never_pass_the_cap(self, storage, queue, clock):
        """8 threads, half of them through a second storage on the same file,
        reserve 5 at a time under a cap of 7 and ack what they got; a monitor
        reads the in-flight count meanwhile. Then all reserve at once and keep
        their leases: 7 in all, whoever asked."""
        cap, workers, rounds = 7, 8, 6
        second = SQLiteStorage(storage.path, clock, sweep_interval=0)
        post(storage, queue, 300)
        lock = threading.Lock()
        held = peak = delivered = 0
        finals: list[int] = []
        sampled: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(workers)
        last = threading.Barrier(workers)
        done = threading.Event()

        def work(node: Storage) -> None:
            nonlocal held, peak, delivered
            try:
                start.wait(DEADLINE)
                for _ in range(rounds):
                    got = reserve(node, queue, clock, limit=5, max_in_flight=cap).deliveries
                    # Counted once the reserve returns and uncounted before
                    # the ack: never above what the store holds in flight.
                    with lock:
                        held += len(got)
                        peak = max(peak, held)
                        delivered += len(got)
                    if got:
                        with lock:
                            held -= len(got)
                        node.ack(queue, "s", [d.receipt for d in got], clock.now_micros())
                last.wait(DEADLINE)
                final = reserve(node, queue, clock, limit=5, max_in_flight=cap).deliveries
                with lock:
                    finals.append(len(final))
            except BaseException as exc:  # reported below
                errors.append(exc)

        def monitor() -> None:
            while not done.is_set():
                sampled.append(storage.in_flight(queue, "s", clock.now_micros()))

        threads = [
            threading.Thread(target=work, args=(storage if n % 2 else second,))
            for n in range(workers)
        ]
        watcher = threading.Thread(target=monitor)
        watcher.start()
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(DEADLINE)
        finally:
            done.set()
            watcher.join(DEADLINE)
            second.close()
        now = clock.now_micros()
        print(
            f"threads={workers} rounds={rounds} cap={cap} delivered={delivered} "
            f"peak_held={peak} samples={len(sampled)} peak_sampled={max(sampled)} "
            f"final={sorted(finals)}"
        )
        assert not errors, errors
        assert max(sampled) <= cap and peak <= cap
        assert sum(finals) == cap
        assert storage.in_flight(queue, "s", now) == stats_in_flight(storage, queue, "s", now)
        assert storage.in_flight(queue, "s", now) == cap

    def test_the_default_in_flight_from_stats_agrees(self, storage, queue, clock):
        post(storage, queue, 5)
        reserve(storage, queue, clock, limit=3)
        now = clock.now_micros()
        assert Storage.in_flight(storage, queue, "s", now) == storage.in_flight(queue, "s", now)
        assert Storage.in_flight(storage, queue, "unused", now) == 0

    def test_processes_share_a_tables_directory_beside_the_database(self, storage, clock):
        assert storage.flow_state_path() == storage.path + ".limits"
        assert storage.live_processes() is None
        memory = SQLiteStorage(":memory:", clock, sweep_interval=0)
        try:
            assert memory.flow_state_path() is None
        finally:
            memory.close()


@pytest.mark.cassandra
class TestCassandraFlow:
    @pytest.fixture(scope="class")
    def flow_settings(self, cassandra_settings) -> Iterator[dict[str, str]]:
        """A keyspace of this class's own, so the processes counted are only
        its tests' (no member left by another test's storage), dropped before
        and after; and a short owner term, so heartbeats come every 0.75 s."""
        keyspace = cassandra_settings["queuey.cassandra.keyspace"] + "_flow"
        settings = {
            **cassandra_settings,
            "queuey.cassandra.keyspace": keyspace,
            "queuey.cassandra.owner_term": "3",
        }
        drop = f"DROP KEYSPACE IF EXISTS {keyspace}"
        first = load_from_config(cassandra_settings, ManualClock())
        try:
            first.session.execute(drop, timeout=60)
        finally:
            first.close()
        yield settings
        last = load_from_config(cassandra_settings, ManualClock())
        try:
            last.session.execute(drop, timeout=60)
        finally:
            last.close()

    @pytest.fixture
    def storage(self, flow_settings, clock):
        store = load_from_config(flow_settings, clock)
        yield store
        store.close()

    @pytest.fixture
    def other(self, flow_settings, clock):
        """A second API process."""
        store = load_from_config(flow_settings, clock)
        yield store
        store.close()

    def test_in_flight_is_the_same_from_another_process(self, storage, other, queue, clock):
        post(storage, queue, 5)
        got = reserve(storage, queue, clock, limit=4).deliveries
        now = clock.now_micros()
        assert other.in_flight(queue, "s", now) == 4
        assert other.ack(queue, "s", [got[0].receipt], now) == {got[0].receipt: "acked"}
        assert storage.in_flight(queue, "s", now) == other.in_flight(queue, "s", now) == 3

    def test_live_processes_count_the_processes_of_the_keyspace(
        self, flow_settings, storage, clock
    ):
        assert storage.flow_state_path() is None
        assert storage.live_processes() >= 1
        second = load_from_config(flow_settings, clock)
        try:
            both = second.live_processes()
            assert both >= 2
            wait_until(
                lambda: storage.live_processes() == both,
                DEADLINE,
                lambda: f"the first process counts {storage.live_processes()}, not {both}",
            )
        finally:
            second.close()
        wait_until(
            lambda: storage.live_processes() == both - 1,
            DEADLINE,
            lambda: f"after a close, {storage.live_processes()} live, not {both - 1}",
        )

"""Owned work queues on the real Cassandra node (``work_queue = owned``).

Each storage object stands for one API process: its own session, peer port and
owned partitions. The tests check what the design promises a user: calls may
reach any process, no message is leased twice at once, nothing acknowledged
comes back after a takeover, a former owner's late write is never applied, and
in steady state no lightweight transaction is paid per message.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from queuey.errors import StorageUnavailable
from queuey.model import MessageRef, NewMessage, QueueMeta
from queuey.storage.cassandra import load_from_config
from queuey.storage.cassandra.leases import ACKED, LeaseState, Slot
from tests.storage.cassandra_support import Recorder

pytestmark = pytest.mark.cassandra


@pytest.fixture(scope="module")
def settings(settings):
    return {**settings, "queuey.cassandra.work_queue": "owned"}


@pytest.fixture
def other(settings, clock):
    """A second API process."""
    node = load_from_config(settings, clock)
    yield node
    node.close()


@pytest.fixture
def four(store) -> QueueMeta:
    app = "app-" + uuid.uuid4().hex[:12]
    return store.create_queue(QueueMeta(application=app, name="q", partitions=4, ttl=600))


def post(store, queue, count: int) -> None:
    for start in range(0, count, 100):
        batch = range(start, min(count, start + 100))
        store.put_messages(queue, [NewMessage('{"n": %d}' % n, n % 4 + 1, 600) for n in batch])


def reserve(store, queue, clock, limit=10, vt=30, sub="s"):
    now = clock.now_micros()
    return store.reserve(
        queue,
        sub,
        partitions=list(range(1, queue.partitions + 1)),
        limit=limit,
        visibility_timeout=vt,
        now_micros=now,
        settled_micros=now,
    )


def drain(nodes, queue, clock, limit=7) -> list:
    """Reserve in turn from each node until two rounds in a row find nothing."""
    got, empty = [], 0
    while empty < 2 * len(nodes):
        for node in nodes:
            batch = reserve(node, queue, clock, limit=limit).deliveries
            got.extend(batch)
            empty = 0 if batch else empty + 1
    return got


def test_calls_reach_any_process_and_each_message_is_handed_out_once(store, other, four, clock):
    post(store, four, 200)
    got = drain([store, other], four, clock)
    ids = Counter(d.message.id for d in got)
    assert len(ids) == 200 and max(ids.values()) == 1
    # Each receipt acknowledged through the process that did not hand it out.
    half = len(got) // 2
    statuses = other.ack(four, "s", [d.receipt for d in got[:half]], clock.now_micros())
    statuses |= store.ack(four, "s", [d.receipt for d in got[half:]], clock.now_micros())
    assert Counter(statuses.values()) == {"acked": 200}
    clock.advance(31)
    assert drain([store, other], four, clock) == []
    sub = store.stats(four, clock.now_micros()).subscriptions[0]
    assert (sub.available, sub.in_flight) == (0, 0)


def test_threads_on_two_processes_never_share_a_lease(store, other, four, clock):
    total = 400
    post(store, four, total)
    seen: Counter[uuid.UUID] = Counter()
    acked: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def consume(node) -> None:
        try:
            while True:
                batch = reserve(node, four, clock, limit=5).deliveries
                if not batch:
                    return
                with lock:
                    seen.update(d.message.id for d in batch)
                statuses = node.ack(four, "s", [d.receipt for d in batch], clock.now_micros())
                with lock:
                    acked.update(statuses.values())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=consume, args=(n,)) for n in (store, other) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    print(f"sent={total} delivered={sum(seen.values())} distinct={len(seen)} acked={acked}")
    assert not errors, errors
    assert sum(seen.values()) == len(seen), "a message was leased twice while its lease ran"
    assert acked == {"acked": len(seen)}
    assert len(seen) + len(drain([store, other], four, clock)) == total


def test_a_takeover_keeps_acks_and_running_leases(settings, store, other, four, clock):
    post(store, four, 8)
    got = reserve(store, four, clock, limit=8).deliveries
    assert len(got) == 8
    assert store.ack(four, "s", [d.receipt for d in got[:3]], clock.now_micros())
    statuses, _ = store.release(four, "s", [got[3].receipt], clock.now_micros())
    assert statuses == {got[3].receipt: "acked"}
    store.close()  # the owner goes away; its partitions are free at once
    again = reserve(other, four, clock, limit=8).deliveries
    assert [d.message.id for d in again] == [got[3].message.id]
    clock.advance(31)  # the leases still running end (and the one just given again)
    later = {d.message.id for d in reserve(other, four, clock, limit=8).deliveries}
    assert later == {d.message.id for d in got[3:]}
    # The old receipts went stale with the new leases.
    assert set(other.ack(four, "s", [got[4].receipt], clock.now_micros()).values()) == {"expired"}


def test_a_former_owners_late_write_is_never_applied(settings, store, other, four, clock):
    post(store, four, 4)
    got = reserve(store, four, clock, limit=4).deliveries
    first = got[0]
    key = (four.incarnation, "s", first.message.partition)
    owner = store._work.ownership
    held = owner.held(key)
    assert held is not None
    # The owner freezes past its term: its row expires, another process takes over.
    held.expires = 0.0
    owner._delete_row(key)
    assert reserve(other, four, clock, limit=4).deliveries == []  # all leases still run
    assert other._work.ownership.held(key) is not None
    # The frozen owner wakes up and writes an ack it never answered.
    stale = LeaseState(partition=key[2], slots=dict(held.state.slots))
    slot = stale.by_message[first.message.id]
    stale.put(Slot(**{**slot.__dict__, "state": ACKED}))
    owner.log.write_deltas([(key, stale, held.epoch, held.seq + 1, owner.stamp() - 10**6)]).result()
    other.close()
    third = load_from_config(settings, clock)
    try:
        clock.advance(31)
        back = {d.message.id for d in reserve(third, four, clock, limit=4).deliveries}
        assert first.message.id in back, "a write of a former owner was applied"
    finally:
        third.close()


def test_steady_state_pays_no_lightweight_transaction_per_message(store, four, clock):
    post(store, four, 40)
    assert drain([store], four, clock, limit=10)  # ownership is taken here
    post(store, four, 2000)
    recorder = Recorder(store)
    try:
        delivered = 0
        started = time.monotonic()
        while True:
            batch = reserve(store, four, clock, limit=100).deliveries
            if not batch:
                break
            delivered += len(batch)
            store.ack(four, "s", [d.receipt for d in batch], clock.now_micros())
        elapsed = time.monotonic() - started
        lwt = [s for s in recorder.sent if " IF " in s.cql]
        reads = [s for s in recorder.sent if s.cql.upper().startswith("SELECT")]
        writes = [
            s for s in recorder.sent if s.cql.upper().startswith(("UPDATE", "INSERT", "BATCH"))
        ]
        print(
            f"delivered={delivered} lwt={len(lwt)} writes={len(writes)} reads={len(reads)} "
            f"requests={len(recorder.sent)} seconds={elapsed:.2f}"
        )
        assert delivered == 2000
        # Renewals of the four terms may fall inside the loop; nothing else is conditional.
        assert all(".work_owners" in s.cql or ".work_members" in s.cql for s in lwt)
        assert len(lwt) <= 4 * (1 + int(elapsed / (store.config.owner_term / 4)) + 1)
        assert len(writes) / delivered <= 0.1
        # The owner keeps what it read (rows ahead, the priorities used): a
        # reserve of 100 over 4 partitions does not read each of them again.
        assert len(reads) / delivered <= 0.02
    finally:
        recorder.close()


def test_a_post_through_one_process_wakes_long_polls_on_the_others(store, other, four, clock):
    woken: list[tuple[str, str]] = []
    other.watch_available(lambda application, name: woken.append((application, name)))
    reserve(other, four, clock)  # the other process serves work queues: it has a peer port
    reserve(store, four, clock)
    deadline = time.monotonic() + 3 * store.config.owner_term
    while (four.application, four.name) not in woken:
        assert time.monotonic() < deadline, "no wake-up reached the other process"
        store.announce_available(four.application, four.name)
        time.sleep(0.05)


def test_a_priority_first_used_through_another_process_is_reserved_first(store, other, four, clock):
    post(store, four, 200)
    assert reserve(store, four, clock).deliveries  # owned here, priorities kept
    urgent = other.put_messages(four, [NewMessage('{"urgent": 1}', 2, 600, priority=7)])[0]
    deadline = time.monotonic() + 5
    while True:
        other.announce_available(four.application, four.name)
        first = reserve(store, four, clock, limit=1).deliveries[0]
        if first.message.id == urgent.id:
            break
        assert first.message.priority == 0
        assert time.monotonic() < deadline, "the new priority was never reserved first"
        time.sleep(0.05)


def owner_row(store, key):
    row = store.session.execute(
        f"SELECT owner FROM {store.config.keyspace}.work_owners "
        "WHERE incarnation = %s AND subscription = %s AND partition = %s",
        key,
    ).one()
    return row[0] if row else None


def test_a_call_racing_a_hand_over_never_leaves_a_partition_held_without_its_row(
    store, four, clock, monkeypatch
):
    """A call arriving while the owner lets a partition go must not take it
    back between the release and the row's deletion (it would then serve it
    while another process takes the free row)."""
    reserve(store, four, clock)
    owner = store._work.ownership
    key = (four.incarnation, "s", 1)
    assert owner.held(key) is not None
    racers: list[threading.Thread] = []
    delete = owner._delete_row

    def delete_while_a_call_arrives(k):
        racer = threading.Thread(target=owner.route, args=(four.incarnation, "s", [1]))
        racer.start()
        racers.append(racer)
        racer.join(0.3)  # the call waits for the release to finish
        delete(k)

    monkeypatch.setattr(owner, "_delete_row", delete_while_a_call_arrives)
    owner.release(key)
    for racer in racers:
        racer.join(10)
    held = owner.held(key)
    assert held is None or owner_row(store, key) == owner.member


def test_an_answer_a_process_cannot_read_is_storage_unavailable(
    store, other, four, clock, monkeypatch
):
    """A partition owner answering in a shape this process does not know (a
    peer of another release): the forwarded reserve and ack fail as storage
    unavailable (a 503 the caller retries), never as an internal error, and
    what the owner did stands (the acks, idempotent, are acked once retried)."""
    post(store, four, 40)
    got = drain([other], four, clock)  # the other process owns every partition now
    assert len(got) == 40
    store.stats(four, clock.now_micros())  # this process's peer client is started
    client = store._work._client
    real = client.call
    monkeypatch.setattr(client, "call", lambda *call: {"garbled": real(*call)})
    receipts = [d.receipt for d in got]
    with pytest.raises(StorageUnavailable):
        store.ack(four, "s", receipts, clock.now_micros())
    post(store, four, 4)
    with pytest.raises(StorageUnavailable):
        reserve(store, four, clock)
    monkeypatch.setattr(client, "call", real)
    statuses = store.ack(four, "s", receipts, clock.now_micros())
    assert Counter(statuses.values()) == {"acked": 40}


def test_a_reopen_through_a_process_owning_nothing_is_forwarded_and_counted(
    store, other, four, clock
):
    """A redrive's reopen reaching a process that owns none of the partitions
    is carried out by their owner, and its count comes back decoded."""
    post(store, four, 10)
    got = drain([other], four, clock)  # the other process owns every partition now
    acked = other.ack(four, "s", [d.receipt for d in got], clock.now_micros())
    assert Counter(acked.values()) == {"acked": 10}
    refs = [MessageRef(d.message.partition, d.message.id) for d in got]
    assert store.reopen(four, "s", refs, clock.now_micros()) == 10
    assert len(drain([other], four, clock)) == 10

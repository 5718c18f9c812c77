"""Work queues on the real Cassandra node: what is specific to this backend.

Two storage objects with their own sessions stand for two API nodes serving
one subscription; the lease states' size (as their owner keeps them), the
settled rule, the priority index, dedup retries and the upgrade from schema
version 1 are checked.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter, defaultdict

import pytest

from queuey import ids
from queuey.errors import StorageUnavailable
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery, make_receipt
from queuey.storage.cassandra import leases, load_from_config, upgrade_schema
from queuey.storage.cassandra import schema as schema_module
from queuey.storage.cassandra import writes as writes_module
from queuey.storage.cassandra.schema import LATEST_VERSION, current_version
from queuey.storage.cassandra.writes import MessageWriter
from tests.storage.cassandra_support import KEYSPACE, MICROS, raw

pytestmark = pytest.mark.cassandra


def reserve(store, queue, clock, limit=10, vt=30, sub="s", settled=None, partitions=None):
    now = clock.now_micros()
    return store.reserve(
        queue,
        sub,
        partitions=partitions or list(range(1, queue.partitions + 1)),
        limit=limit,
        visibility_timeout=vt,
        now_micros=now,
        settled_micros=now if settled is None else settled,
    )


def lease_state(store, queue, sub="s", partition=1):
    """The subscription's state in one queue partition, as its owner keeps it."""
    return store._work.table.read(store._connection(), queue, sub, [partition])[partition]


def positions(store, queue, sub="s", partition=1):
    return lease_state(store, queue, sub, partition).positions


@pytest.fixture
def second_node(settings, clock):
    """Another API node: its own storage object, session and id generator."""
    other = load_from_config(settings, clock)
    yield other
    other.close()


# -- many API nodes ---------------------------------------------------------------------------
@pytest.mark.slow
def test_two_api_nodes_share_a_subscription_without_early_redelivery(
    store, second_node, queue, clock
):
    """Four threads on each of two nodes compete for one subscription. While
    the clock stands still every lease is running, so any second delivery
    would be an early one; then the leases of the dropped messages end and
    those (only those) come back."""
    total = 1200
    for start in range(0, total, 100):
        store.put_messages(
            queue, [NewMessage('{"n": %d}' % n, n % 3 + 1, 600) for n in range(start, start + 100)]
        )
    deliveries: Counter[uuid.UUID] = Counter()
    attempts: dict[uuid.UUID, list[int]] = defaultdict(list)
    dropped: set[uuid.UUID] = set()
    acked: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def consume(node, drop_every: int) -> None:
        try:
            seen = 0
            while True:
                got = reserve(node, queue, clock, limit=5, vt=30).deliveries
                if not got:
                    return
                keep = []
                with lock:
                    for d in got:
                        deliveries[d.message.id] += 1
                        attempts[d.message.id].append(d.attempts)
                        seen += 1
                        if drop_every and seen % drop_every == 0:
                            dropped.add(d.message.id)  # the consumer "dies" holding it
                        else:
                            keep.append(d.receipt)
                if keep:
                    statuses = node.ack(queue, "s", keep, clock.now_micros())
                    with lock:
                        acked.update(statuses.values())
        except BaseException as exc:  # reported below
            errors.append(exc)

    def phase(drop_every: int) -> None:
        threads = [
            threading.Thread(target=consume, args=(node, drop_every))
            for node in (store, second_node)
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)

    phase(drop_every=7)
    early = sum(n - 1 for n in deliveries.values())
    first_round = sum(deliveries.values())
    clock.advance(31)  # the dropped messages' leases end
    phase(drop_every=0)
    redelivered = sum(deliveries.values()) - first_round
    lost = total - len(deliveries)
    figures = (
        f"sent={total} delivered={sum(deliveries.values())} acked={acked['acked']} "
        f"dropped={len(dropped)} redelivered={redelivered} early_duplicates={early} lost={lost}"
    )
    print(figures)
    assert errors == [], figures
    assert early == 0 and lost == 0, figures
    assert redelivered == len(dropped) and acked == {"acked": total}, figures
    assert all(attempts[m] == [1, 2] for m in dropped), figures
    assert reserve(store, queue, clock).deliveries == []


# -- the settled rule --------------------------------------------------------------------------
def test_a_write_landing_late_with_an_older_id_is_still_delivered(store, queue, clock):
    """A message whose id was minted before a newer, already delivered one, but
    whose write lands later (still within the write timeout), is delivered:
    the subscription never records itself past what was not settled."""
    t0 = clock.now_micros()
    in_flight = store._writer.mint(NewMessage('{"late": true}', 1, 600), t0)
    clock.advance(0.001)
    newer = store.put_messages(queue, [NewMessage('{"late": false}', 1, 600)])[0]
    assert ids.order_key(in_flight.id) < ids.order_key(newer.id)
    settled = t0 - 1  # the read delay still covers both ids
    got = reserve(store, queue, clock, settled=settled).deliveries
    assert [d.message.id for d in got] == [newer.id]
    store._writer.write(store._connection(), queue, [in_flight], clock.now_micros(), 1e9)
    clock.advance(0.001)
    got = reserve(store, queue, clock, settled=settled).deliveries
    assert [d.message.id for d in got] == [in_flight.id]
    # Once settled passes both, the position moves past them for good.
    clock.advance(1)
    assert reserve(store, queue, clock).deliveries == []
    (pos,) = positions(store, queue).values()
    assert ids.order_key(pos) > ids.order_key(newer.id)


def test_a_position_moves_over_the_handed_out_prefix_and_stops_before_settled():
    """Pure logic of :func:`leases.advance` (the settled rule), no I/O."""
    t = 1_800_000_000 * MICROS
    a, b, c, d = (ids.make_uuid(t + n, 0x010000000001, 1) for n in (1, 2, 3, 10))
    other = ids.make_uuid(t + 4, 0x010000000001, 1)  # another priority's row
    rows = [(a, True), (b, True), (c, True), (other, False), (d, True)]
    # stops at the first message not handed out
    assert leases.advance(None, rows, True, {a}, settled=t + 100) == a
    # passes rows of other priorities, stops before the settled instant
    assert leases.advance(None, rows, True, {a, b, c, d}, settled=t + 10) == other
    # everything seen and handed out: just before settled
    assert leases.advance(None, rows, True, {a, b, c, d}, settled=t + 100) == ids.min_uuid(t + 100)
    # a partial scan never jumps ahead of what it saw
    assert leases.advance(None, rows, False, {a, b, c, d}, settled=t + 100) == d


# -- bounded lease partitions ---------------------------------------------------------------
def test_lease_partition_stays_bounded_over_many_rounds(store, clock):
    app = "app-" + uuid.uuid4().hex[:12]
    queue = store.create_queue(QueueMeta(application=app, name="q", partitions=1, ttl=600))
    rounds, batch = 200, 5
    delivered = 0
    most_rows = 0
    for _ in range(rounds):
        store.put_messages(queue, [NewMessage("{}", 1, 600) for _ in range(batch)])
        clock.advance(0.001)
        now = clock.now_micros()
        got = reserve(store, queue, clock, limit=batch, settled=now - 2000).deliveries
        statuses = store.ack(queue, "s", [d.receipt for d in got], now)
        assert set(statuses.values()) <= {"acked"}
        delivered += len(got)
        most_rows = max(most_rows, len(lease_state(store, queue).slots))
    clock.advance(1)
    delivered += len(reserve(store, queue, clock, limit=100).deliveries)
    slots = lease_state(store, queue).slots
    print(f"rounds={rounds} delivered={delivered} slots_max={most_rows} now={len(slots)}")
    assert delivered == rounds * batch
    # In flight (5) plus those not yet behind the position (2 ms of posts).
    assert most_rows <= 4 * batch, most_rows


def test_full_slots_stop_new_deliveries_until_messages_finish(store, queue, clock, monkeypatch):
    monkeypatch.setattr(leases, "SLOTS", 4)
    store.put_messages(queue, [NewMessage('{"n": %d}' % n, 1, 600) for n in range(10)])
    clock.advance(0.001)  # settled: a finished slot is reusable once behind the position
    first = reserve(store, queue, clock, limit=10).deliveries
    assert len(first) == 4
    assert reserve(store, queue, clock, limit=10).deliveries == []
    store.ack(queue, "s", [d.receipt for d in first[:3]], clock.now_micros())
    again = reserve(store, queue, clock, limit=10).deliveries
    assert [d.message.body for d in again] == ['{"n": %d}' % n for n in (4, 5, 6)]
    assert len(lease_state(store, queue).slots) == 4


def test_each_reopen_draws_a_new_generation_even_after_its_slot_was_reused(store, clock):
    """A dead-lettered message's slot is reused by the next delivery; a reopen
    (redrive) then makes it a new slot, whose generation must still differ from
    every earlier one, or its next dead letter would be deduplicated away."""
    app = "app-" + uuid.uuid4().hex[:12]
    queue = store.create_queue(QueueMeta(application=app, name="dq", ttl=600, max_attempts=1))
    posted = store.put_messages(queue, [NewMessage('{"n": 0}', 1, 600)])[0]
    generations = []
    for n in range(1, 4):
        clock.advance(0.001)  # settled: a finished slot is reusable once behind the position
        (delivery,) = reserve(store, queue, clock).deliveries
        assert delivery.message.id == posted.id
        _, (letter,) = store.release(queue, "s", [delivery.receipt], clock.now_micros())
        assert store.ack(queue, "s", [letter.claim], clock.now_micros()) == {letter.claim: "acked"}
        generations.append(letter.generation)
        store.put_messages(queue, [NewMessage('{"n": %d}' % n, 1, 600)])
        clock.advance(0.001)
        (other,) = reserve(store, queue, clock).deliveries
        store.ack(queue, "s", [other.receipt], clock.now_micros())
        slots = lease_state(store, queue).slots.values()
        assert posted.id not in {x.message_id for x in slots}  # slot reused
        ref = MessageRef(1, posted.id)
        assert store.reopen(queue, "s", [ref], clock.now_micros()) == 1
    assert generations[0] == "" and len(set(generations)) == 3


def test_an_ack_retried_after_its_slot_went_to_another_delivery_says_expired(store, clock):
    """An ack whose answer was lost (a 503 while its write landed, as when an
    owner froze past its term) is sent again; by then its finished slot may
    hold another delivery, and which lease finished the message is no longer
    known. The retry answers ``expired`` (SQS: a standard queue's delete
    succeeds), not ``unknown``, which stays for a receipt naming a message
    never handed out."""
    app = "app-" + uuid.uuid4().hex[:12]
    queue = store.create_queue(QueueMeta(application=app, name="q", partitions=1, ttl=600))
    first = store.put_messages(queue, [NewMessage('{"n": 0}', 1, 600)])[0]
    clock.advance(0.001)  # settled: a finished slot is reusable once behind the position
    (delivery,) = reserve(store, queue, clock).deliveries
    assert store.ack(queue, "s", [delivery.receipt], clock.now_micros()) == {
        delivery.receipt: "acked"
    }
    store.put_messages(queue, [NewMessage('{"n": 1}', 1, 600)])
    clock.advance(0.001)
    (other,) = reserve(store, queue, clock).deliveries
    slots = lease_state(store, queue).slots.values()
    assert first.id not in {x.message_id for x in slots}  # its slot went to the next delivery
    waiting = store.put_messages(queue, [NewMessage('{"n": 2}', 1, 600)])[0]
    never = make_receipt(1, waiting.id, "0123456789abcdef")
    invented = make_receipt(1, uuid.uuid1(), "0123456789abcdef")
    answers = store.ack(queue, "s", [delivery.receipt, never, invented], clock.now_micros())
    assert answers == {delivery.receipt: "expired", never: "unknown", invented: "unknown"}
    assert store.ack(queue, "s", [other.receipt], clock.now_micros()) == {other.receipt: "acked"}


# -- priorities and delays -------------------------------------------------------------------
def test_reserve_reads_only_the_priorities_in_use(store, queue, clock, recorder):
    store.put_messages(queue, [NewMessage("{}", 1, 600), NewMessage("{}", 1, 600, priority=3)])
    recorder.clear()
    got = reserve(store, queue, clock, partitions=[1]).deliveries
    assert [d.message.priority for d in got] == [3, 0]
    index_reads = recorder.on("priority_buckets", "SELECT")
    assert index_reads and {s.values[2] for s in index_reads} == {(3).to_bytes(4, "big")}


def test_a_caught_up_subscription_reads_its_bucket_without_the_index(store, queue, clock, recorder):
    width = store.bucket_micros
    clock.set((clock.now_micros() // width + 1) * width + 10 * MICROS)  # early in a bucket
    store.put_messages(queue, [NewMessage("{}", 1, 600)])
    clock.advance(0.001)
    assert len(reserve(store, queue, clock, partitions=[1]).deliveries) == 1
    store.put_messages(queue, [NewMessage("{}", 1, 600)])
    clock.advance(0.001)
    recorder.clear()
    assert len(reserve(store, queue, clock, partitions=[1]).deliveries) == 1
    assert recorder.on("messages", "SELECT") and not recorder.on("message_buckets")


def test_delayed_messages_cost_no_reads_until_due(store, queue, clock, recorder):
    store.put_messages(queue, [NewMessage("{}", 1, 3600, delay=600) for _ in range(20)])
    recorder.clear()
    assert reserve(store, queue, clock, partitions=[1]).deliveries == []
    # The bucket index is read only up to just after now: the future buckets
    # holding the delayed messages are never asked for.
    hi_buckets = {int.from_bytes(s.values[-1], "big") for s in recorder.on("message_buckets")}
    assert max(hi_buckets, default=0) * store.bucket_micros <= clock.now_micros() + 2 * MICROS
    clock.advance(600)
    assert len(reserve(store, queue, clock, limit=100, partitions=[1]).deliveries) == 20


# -- dedup retries ---------------------------------------------------------------------------
def claimed_id(store, queue, dedup_id):
    rows = raw(
        store,
        f"SELECT id FROM {KEYSPACE}.dedup WHERE incarnation = %s AND dedup_id = %s",
        (queue.incarnation, dedup_id),
    )
    return rows[0][0]


def lose_message_write(monkeypatch):
    """The next message write fails after the dedup claim was written."""
    real = MessageWriter.write

    def failing(self, *args, **kwargs):
        monkeypatch.setattr(MessageWriter, "write", real)
        raise StorageUnavailable("cassandra: put messages failed (WriteTimeout)")

    monkeypatch.setattr(MessageWriter, "write", failing)


def test_a_retried_post_completes_with_the_claimed_id_while_readers_wait(
    store, queue, clock, monkeypatch
):
    lose_message_write(monkeypatch)
    with pytest.raises(StorageUnavailable):
        store.put_messages(queue, [NewMessage('{"a": 1}', 2, 600, dedup_id="job-1")])
    first = claimed_id(store, queue, "job-1")
    retried = store.put_messages(queue, [NewMessage('{"a": 1}', 2, 600, dedup_id="job-1")])[0]
    assert retried.id == first and retried.partition == 2
    got = store.get_messages(queue, [MessageRef(2, first)], clock.now_micros())
    assert [m.body for m in got] == ['{"a": 1}']


def test_a_retried_post_after_the_read_delay_gets_a_fresh_id(store, queue, clock, monkeypatch):
    lose_message_write(monkeypatch)
    with pytest.raises(StorageUnavailable):
        store.put_messages(queue, [NewMessage('{"a": 2}', 1, 600, dedup_id="job-2")])
    first = claimed_id(store, queue, "job-2")
    clock.advance(store.write_timeout_seconds + 1)  # readers may have passed that id
    retried = store.put_messages(queue, [NewMessage('{"a": 2}', 1, 600, dedup_id="job-2")])[0]
    assert retried.id != first and retried.timestamp >= clock.now_micros()
    assert claimed_id(store, queue, "job-2") == retried.id
    again = store.put_messages(queue, [NewMessage('{"a": 2}', 1, 600, dedup_id="job-2")])[0]
    assert again == retried
    read = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert [m.id for m in read] == [retried.id]


def claim_written(store, queue, dedup_id):
    rows = raw(
        store,
        f"SELECT written FROM {KEYSPACE}.dedup WHERE incarnation = %s AND dedup_id = %s",
        (queue.incarnation, dedup_id),
    )
    return rows[0][0]


def test_a_lost_written_mark_is_repaired_by_the_next_repeat(store, queue, clock, monkeypatch):
    """The first post stored its message but its mark failed: the post still
    succeeds, and a repeat that finds the message marks the claim, so a later
    repeat after the message is deleted brings nothing back."""
    monkeypatch.setattr(writes_module, "mark_written", lambda *args: None)
    first = store.put_messages(queue, [NewMessage('{"a": 3}', 1, 600, dedup_id="job-3")])[0]
    assert claim_written(store, queue, "job-3") is False
    monkeypatch.undo()
    assert store.put_messages(queue, [NewMessage('{"a": 3}', 1, 600, dedup_id="job-3")]) == [first]
    assert claim_written(store, queue, "job-3") is True
    store.delete_messages(queue, [MessageRef(1, first.id)])
    clock.advance(store.write_timeout_seconds + 1)
    again = store.put_messages(queue, [NewMessage('{"a": 3}', 1, 600, dedup_id="job-3")])[0]
    assert again.id == first.id
    read = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert read == []


# -- schema upgrade --------------------------------------------------------------------------
def test_upgrade_from_schema_version_1(settings, store, clock, monkeypatch):
    keyspace = "queuey_v1_" + uuid.uuid4().hex[:10]
    old = {**settings, "queuey.cassandra.keyspace": keyspace}
    try:
        monkeypatch.setattr(schema_module, "MIGRATIONS", schema_module.MIGRATIONS[:1])
        upgrade_schema(old)
        monkeypatch.undo()
        assert current_version(store.session, keyspace) == 1
        now = clock.now_micros()
        mid = ids.IdGenerator().make(now)
        inc = uuid.uuid4().hex
        store.session.execute(
            f"INSERT INTO {keyspace}.queues (application, name, partitions, default_ttl,"
            " queue_type, consistency, created, incarnation)"
            " VALUES ('app', 'old', 1, 600, 'public', 'strong', %s, %s)",
            (now, inc),
        )
        store.session.execute(
            f"INSERT INTO {keyspace}.message_buckets (incarnation, partition, bucket, message_ttl)"
            " VALUES (%s, 1, %s, 600)",
            (inc, now // (60 * MICROS)),
        )
        store.session.execute(
            f"INSERT INTO {keyspace}.messages (incarnation, partition, bucket, id, body, expires)"
            " VALUES (%s, 1, %s, %s, '{\"v\": 1}', %s)",
            (inc, now // (60 * MICROS), mid, now + 600 * MICROS),
        )
        applied = upgrade_schema(old)
        assert any("ALTER TABLE" in s for s in applied)
        assert current_version(store.session, keyspace) == LATEST_VERSION == 7
        upgraded = load_from_config(old, clock)
        try:
            queue = upgraded.get_queue("app", "old")
            assert (queue.visibility_timeout, queue.max_attempts, queue.delay) == (30, 0, 0)
            assert (queue.fifo, dict(queue.attributes)) == (False, {})
            (delivery,) = reserve(upgraded, queue, clock).deliveries
            assert delivery.first_delivered == clock.now_micros()
            message = delivery.message
            assert (message.id, message.priority, message.attributes) == (mid, 0, None)
            changed = upgraded.update_queue("app", "old", max_attempts=3)
            assert upgraded.get_queue("app", "old") == changed
        finally:
            upgraded.close()
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)

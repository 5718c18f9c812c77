"""Queue and subscription counts on Cassandra (``GET /queue/{name}/stats``).

Counts are exact for the instant each partition is read, but the partitions
and subscriptions are read one after another without a snapshot, so a message
that changes state during the call may be counted in its old or new state (or
both): never off by more than the messages that changed meanwhile. The cost is
a scan of the ids (no bodies) of every live message per queue partition, and
per subscription of the ids after its positions plus one read per message
handed out and unfinished; each scan stops at :data:`COUNT_CAP` rows per queue
partition, beyond which a count is a lower bound. A filtered subscription
(:mod:`queuey.model.subscriptions`) reads the messages after its positions
whole, to count only those its filter takes.

:func:`in_flight` counts one subscription's in-flight messages for flow
control, from its lease states alone (one read per queue partition, none for
a partition this process owns): unlike the stats it does not read the
messages, so a message that expired or was deleted while leased still counts
until its lease lapses. The figure may thus exceed the stats' by those
messages, for at most their visibility timeout, never fall short of it.
"""

from __future__ import annotations

from queuey.model import PartitionStats, QueueMeta, QueueStats, ReadQuery, SubscriptionStats
from queuey.model.subscriptions import accepts
from queuey.storage.cassandra.leases import CLAIMED, FINISHED, LEASED, RELEASED
from queuey.storage.cassandra.ownedtable import OwnedTable
from queuey.storage.cassandra.reads import PartitionReader, ReadPlan, hidden
from queuey.storage.cassandra.session import consistency_profile
from queuey.storage.cassandra.statements import Connection

#: Most message ids counted per queue partition and scan.
COUNT_CAP = 1_000_000
#: Rows per page while counting.
COUNT_PAGE = 5000


def _reader(
    table: OwnedTable,
    c: Connection,
    queue: QueueMeta,
    partition: int,
    priority: int,
    after,
    now: int,
    delayed_too: bool,
    full: bool = False,
) -> PartitionReader | None:
    """Reads ids only, or whole messages when ``full`` (a filter needs the attributes)."""
    query = ReadQuery(
        partitions=[partition], now_micros=now, limit=COUNT_PAGE, order="ascending", after_id=after
    )
    plan = ReadPlan.make(c, queue, query, table.max_ttl_micros, delayed_too=delayed_too)
    if plan is None:
        return None
    if priority == 0:
        return PartitionReader(plan, partition, c.st.messages if full else c.st.message_ids)
    return PartitionReader(
        plan, partition, c.st.priority if full else c.st.priority_ids, (priority,)
    )


def _started(readers: list) -> list:
    for r in readers:
        if r is not None:
            r.start()
    for r in readers:
        if r is not None:
            r.prime()
    return readers


def queue_stats(table: OwnedTable, c: Connection, queue: QueueMeta, now: int) -> QueueStats:
    parts = queue.partition_numbers
    readers = _started([_reader(table, c, queue, p, 0, None, now, False) for p in parts])
    partitions = []
    for p, reader in zip(parts, readers, strict=True):
        count, oldest = 0, None
        for msg in reader.messages() if reader is not None else ():
            oldest = msg.timestamp if oldest is None else oldest
            count += 1
            if count >= COUNT_CAP:
                break
        partitions.append(PartitionStats(p, count, oldest))
    subs = sorted(
        row[0]
        for row in c.session.execute(
            c.st.list_subscriptions, (queue.incarnation,), timeout=table.timeout
        )
    )
    used = _priorities(table, c, queue, parts)
    return QueueStats(
        messages=sum(p.messages for p in partitions),
        oldest_timestamp=min(
            (p.oldest_timestamp for p in partitions if p.oldest_timestamp), default=None
        ),
        partitions=partitions,
        subscriptions=[_subscription(table, c, queue, s, parts, used, now) for s in subs],
    )


def _priorities(
    table: OwnedTable, c: Connection, queue: QueueMeta, parts: list[int]
) -> dict[int, list[int]]:
    futures = [
        c.session.execute_async(
            c.st.queue_priorities,
            (queue.incarnation, p),
            execution_profile=consistency_profile(queue),
            timeout=table.timeout,
        )
        for p in parts
    ]
    return {
        p: [0] + sorted({row[0] for row in f.result()} - {0})
        for p, f in zip(parts, futures, strict=True)
    }


def _subscription(
    table: OwnedTable,
    c: Connection,
    queue: QueueMeta,
    sub: str,
    parts: list[int],
    used: dict[int, list[int]],
    now: int,
) -> SubscriptionStats:
    states = table.read(c, queue, sub, parts)
    available = in_flight = delayed = dead = 0
    oldest: int | None = None

    def seen(ts: int) -> None:
        nonlocal oldest
        oldest = ts if oldest is None else min(oldest, ts)

    accept = accepts(queue, sub)
    scans = []
    for p in parts:
        state = states[p]
        dead += state.dead_lettered
        open_slots = [s for s in state.slots.values() if s.state not in FINISHED]
        live = table.messages(c, queue, p, [s.message_id for s in open_slots], now)
        for s in open_slots:
            if s.message_id not in live:
                continue
            if s.state in (LEASED, CLAIMED) and s.visible_at > now:
                in_flight += 1
            elif s.state == RELEASED and s.visible_at > now:
                delayed += 1
            elif s.state != CLAIMED:
                available += 1
                seen(s.timestamp)
        for q in used[p]:
            after = state.positions.get(q)
            reader = _reader(table, c, queue, p, q, after, now, True, accept is not None)
            scans.append((state, q, reader))
    _started([r for _, _, r in scans])
    for state, q, reader in scans:
        if reader is None:
            continue
        for count, msg in enumerate(reader.messages()):
            if count >= COUNT_CAP:
                break
            if (q == 0 and msg.priority > 0) or msg.id in state.by_message:
                continue
            if accept is not None and not accept(msg):
                continue
            if hidden(msg.id, now):
                delayed += 1
            else:
                available += 1
                seen(msg.timestamp)
    return SubscriptionStats(sub, available, in_flight, delayed, dead, oldest)


def in_flight(table: OwnedTable, c: Connection, queue: QueueMeta, sub: str, now: int) -> int:
    """Slots leased or claimed, lease not lapsed at ``now``, over every queue
    partition (see the module)."""
    states = table.read(c, queue, sub, queue.partition_numbers)
    return sum(
        1
        for state in states.values()
        for s in state.slots.values()
        if s.state in (LEASED, CLAIMED) and s.visible_at > now
    )

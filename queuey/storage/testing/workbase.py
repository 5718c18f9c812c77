"""What the work-queue contracts share: a queue per test and the calls they make.

:class:`WorkQueueBase` needs the ``storage`` fixture and the ``clock`` fixture
(a ``ManualClock`` the storage was built with). Time only moves when a test
moves it, so visibility timeouts, delays and the dedup window are exact and
nothing sleeps. Each test works in its own application. Reserve calls pass
``settled_micros = now``: every write of a test has completed before it reads.
"""

from __future__ import annotations

import uuid

import pytest

from queuey import ids
from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.storage import Storage

S = ids.MICROS
#: Slack allowed between "now + delay" and a delayed message's timestamp: a
#: backend may step a microsecond or so to keep ids distinct.
SLACK = 1000


def body(n: int) -> str:
    return '{"n": %d}' % n


class WorkQueueBase:
    @pytest.fixture
    def app(self) -> str:
        return "app-" + uuid.uuid4().hex[:12]

    @pytest.fixture
    def wq(self, storage: Storage, app: str) -> QueueMeta:
        return storage.create_queue(
            QueueMeta(application=app, name="wq", partitions=3, ttl=3600, visibility_timeout=30)
        )

    # -- helpers ------------------------------------------------------------------
    def post(self, storage, queue, n, partition=1, ttl=3600, **fields):
        return storage.put_messages(queue, [NewMessage(body(n), partition, ttl, **fields)])[0]

    def reserve(self, storage, queue, clock, sub="default", limit=10, vt=30, partitions=None):
        now = clock.now_micros()
        parts = partitions or list(range(1, queue.partitions + 1))
        return storage.reserve(
            queue,
            sub,
            partitions=parts,
            limit=limit,
            visibility_timeout=vt,
            now_micros=now,
            settled_micros=now,
        )

    def bodies(self, reserved):
        return [d.message.body for d in reserved.deliveries]

    def ack(self, storage, queue, clock, receipts, sub="default"):
        return storage.ack(queue, sub, receipts, clock.now_micros())

    def release(self, storage, queue, clock, receipts, sub="default", **kw):
        return storage.release(queue, sub, receipts, clock.now_micros(), **kw)

    def read_oldest_first(self, storage, queue, clock):
        query = ReadQuery(
            partitions=list(range(1, queue.partitions + 1)),
            now_micros=clock.now_micros(),
            order="ascending",
            limit=1000,
        )
        return storage.read_messages(queue, query)

    def sub_stats(self, storage, queue, clock):
        stats = storage.stats(queue, clock.now_micros())
        return {s.subscription: s for s in stats.subscriptions}

    def dead_queue(self, storage, app, max_attempts, vt=30):
        return storage.create_queue(
            QueueMeta(
                application=app,
                name="dq",
                ttl=3600,
                visibility_timeout=vt,
                max_attempts=max_attempts,
            )
        )

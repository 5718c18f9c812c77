"""The storage contract suite, shipped so any backend runs it (as Kinto ships
``kinto.core.storage.testing``).

A backend's test module subclasses :class:`StorageSuite` and gives it two
fixtures: ``storage``, the store under test, and ``clock``, the
:class:`~queuey.clock.ManualClock` the store was built with (time moves only
when a test moves it, so nothing sleeps)::

    import pytest

    from queuey.clock import ManualClock
    from queuey.storage.testing import StorageSuite


    class TestPostgresStorage(StorageSuite):
        @pytest.fixture
        def clock(self):
            return ManualClock()

        @pytest.fixture
        def storage(self, clock):
            store = PostgresStorage(DSN, clock)
            yield store
            store.close()

The suite is one class per area, each usable alone:
:class:`~.queue_contract.QueueContract` (queues and messages),
:class:`~.work_contract.WorkQueueContract` (settings, fields, delays, dedup ids,
reserve, leases), :class:`~.delivery_contract.DeliveryContract` (dead letters,
priorities, reopen, stats, threads, FIFO) and
:class:`~.schedule_contract.ScheduleContract` (schedules and their ticks, run
through the core's service) and :class:`~.flow_contract.FlowContract`
(in-flight counts and the cap: set ``exact_cap = False`` on the subclass if
reserve accepts ``max_in_flight`` without enforcing it).
Each test works in its own application, so backends may share one database.
A backend skips a test only with a stated reason (``pytest.skip``). The suite
needs pytest; nothing in the service imports it.
"""

from queuey.storage.testing.delivery_contract import DeliveryContract
from queuey.storage.testing.flow_contract import FlowContract
from queuey.storage.testing.queue_contract import QueueContract
from queuey.storage.testing.schedule_contract import ScheduleContract
from queuey.storage.testing.work_contract import WorkQueueContract


class StorageSuite(
    QueueContract, WorkQueueContract, DeliveryContract, ScheduleContract, FlowContract
):
    """Every area of the contract, for one backend."""


__all__ = [
    "DeliveryContract",
    "FlowContract",
    "QueueContract",
    "ScheduleContract",
    "StorageSuite",
    "WorkQueueContract",
]

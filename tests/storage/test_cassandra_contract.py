"""The shared storage and work-queue contracts on the real Cassandra node."""

from __future__ import annotations

import pytest

from queuey.storage.cassandra import load_from_config
from tests.storage.contract import StorageContract
from tests.storage.schedules_contract import ScheduleContract
from tests.storage.work_contract import WorkQueueContract


@pytest.mark.cassandra
class TestCassandraContract(StorageContract, WorkQueueContract, ScheduleContract):
    """Both contracts on the real node; a fresh storage object (and id
    generator) per test so each test's ManualClock mints its ids."""

    @pytest.fixture
    def storage(self, cassandra_settings, clock):
        store = load_from_config(cassandra_settings, clock)
        yield store
        store.close()

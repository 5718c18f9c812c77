"""The storage contract suite (:mod:`queuey.storage.testing`) on the real Cassandra node."""

from __future__ import annotations

import pytest

from queuey.storage.cassandra import load_from_config
from queuey.storage.testing import StorageSuite


@pytest.mark.cassandra
class TestCassandraContract(StorageSuite):
    """The shipped suite on the real node; a fresh storage object (and id
    generator) per test so each test's ManualClock mints its ids."""

    exact_cap = False  # the core bounds max_in_flight per process

    @pytest.fixture
    def storage(self, cassandra_settings, clock):
        store = load_from_config(cassandra_settings, clock)
        yield store
        store.close()

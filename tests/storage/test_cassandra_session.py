"""How the driver is set up: what decides how fast the service uses a node again."""

from __future__ import annotations

import itertools

import pytest

from queuey.storage.cassandra import parse_settings
from queuey.storage.cassandra.session import build_cluster


@pytest.mark.unit
def test_a_node_that_is_back_is_retried_within_seconds():
    """In-process (no node): after a long outage the driver must still try
    the node every few seconds, or a node that is back stays unused for up
    to the driver's default ten minutes."""
    cluster = build_cluster(parse_settings({}))
    schedule = cluster.reconnection_policy.new_schedule()
    delays = list(itertools.islice(schedule, 200))
    assert len(delays) == 200, "the driver must keep trying"
    assert max(delays) <= 10
    assert sum(delays[:10]) < 60  # the first minute already holds ten attempts

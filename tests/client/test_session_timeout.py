"""A member trusts the session timeout ZooKeeper granted, not the one it asked for.

The real shared ZooKeeper caps sessions at ``maxSessionTimeout`` = 120 s and
raises them to ``minSessionTimeout`` = 1 s (etc/zookeeper/zoo.cfg.in).
"""

from __future__ import annotations

import time

import pytest

from tests.client.conftest import REBALANCE_TIMEOUT
from tests.client.test_group import expire_session, settled, static
from tests.support import wait_until


def silent_for(group, seconds: float) -> None:
    """As if ZooKeeper last answered the member ``seconds`` ago."""
    group._confirmed = time.monotonic() - seconds


@pytest.mark.zookeeper
def test_a_session_timeout_above_the_servers_maximum_is_capped(make_group, zookeeper_chroot):
    group = make_group(static(2), "m0", session_timeout=300)
    wait_until(lambda: settled([group]), REBALANCE_TIMEOUT, "the member to settle")
    lease = group.leases()[0]
    silent_for(group, 81)  # ZooKeeper may expire the session 120 s after it last heard from us
    assert not lease.valid() and group.leases() == [], "paused after 2/3 of the granted 120 s"
    silent_for(group, 0)
    assert lease.valid()
    granted, pause = group.negotiated_session_timeout, group.pause_after
    print(f"asked 300 s, granted {granted} s, pauses after {pause} s without an answer")
    assert granted == 120.0 and pause == pytest.approx(80.0)

    expire_session(group.zk, zookeeper_chroot)  # a new session negotiates again
    wait_until(lambda: group.stats.sessions == 2 and settled([group]), 30, "the new session")
    assert group.negotiated_session_timeout == 120.0 and group.pause_after == pytest.approx(80.0)


@pytest.mark.zookeeper
@pytest.mark.parametrize(("asked", "granted"), [(5.0, 5.0), (0.5, 1.0)])
def test_a_session_timeout_within_or_below_the_servers_bounds_is_the_one_granted(
    make_group, asked, granted
):
    group = make_group(static(1), "m0", session_timeout=asked)
    wait_until(lambda: settled([group]), REBALANCE_TIMEOUT, "the member to settle")
    assert group.negotiated_session_timeout == granted
    assert group.pause_after == pytest.approx(granted * 2 / 3)

"""Consumer groups as operators see them, read from the real ZooKeeper
(queuey.core.consumergroups): members, partition owners and lag per partition."""

from __future__ import annotations

import pytest

from queuey.client import Checkpoint, ConsumerGroup
from tests.support import wait_until
from tests.web.calls import create, post
from tests.web.test_operator_figures import gauge

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def group_app(make_app, sqlite_storage, wrap_app, zookeeper_chroot):
    app = wrap_app(
        make_app(
            sqlite_storage,
            **{"queuey.zookeeper.hosts": zookeeper_chroot},
        )
    )
    yield app
    app.app.registry.queuey.groups.close()


@pytest.fixture
def start_group(zookeeper_chroot):
    started = []

    def start(name: str, discover, **kwargs) -> ConsumerGroup:
        group = ConsumerGroup(
            zookeeper_chroot,
            name,
            discover,
            member_id=f"{name}-1",
            session_timeout=4,
            rebalance_timeout=2,
            **kwargs,
        )
        group.start()
        started.append(group)
        return group

    yield start
    for group in started:
        group.stop()


def test_a_groups_members_owners_and_lag_per_partition(group_app, start_group):
    app = group_app
    create(app, "orders", partitions=2)
    ids = [
        post(app, "orders", {"n": n}, partition=1).json["messages"][0]["message_id"]
        for n in range(5)
    ]
    for n in range(3):
        post(app, "orders", {"n": n}, partition=2)
    group = start_group("billing", lambda: [("orders", 1), ("orders", 2)], application=app.apps.app)
    wait_until(lambda: len(group.owned()) == 2, timeout=20, what="the member to own both")
    group.checkpoints.write(group.zk, ("orders", 1), Checkpoint.for_id(ids[1]), None)

    (found,) = app.app.registry.queuey.groups.for_application(app.apps.app)
    assert found.name == "billing"
    assert [m.member for m in found.members] == ["billing-1"]
    assert found.members[0].application == app.apps.app
    lags = {p.partition: (p.owner, p.lag_messages, p.lag_capped) for p in found.partitions}
    assert lags == {1: ("billing-1", 3, False), 2: ("billing-1", 3, False)}
    assert found.partitions[0].checkpoint_id == ids[1]
    assert found.partitions[0].lag_seconds >= 0
    # Another application sees nothing of it.
    assert app.app.registry.queuey.groups.for_application(app.apps.remote_app) == []

    text = app.get("/metrics").text
    labels = {"application": app.apps.app, "group": "billing", "queue": "orders"}
    assert gauge(text, "queuey_group_lag_messages", **labels, partition="1") == 3
    assert gauge(text, "queuey_group_members", application=app.apps.app, group="billing") == 1


def test_a_group_without_a_declared_application_is_matched_by_its_queues(group_app, start_group):
    app = group_app
    create(app, "only-here")
    group = start_group("legacy", lambda: [("only-here", 1)])
    wait_until(lambda: group.owned() == [("only-here", 1)], timeout=20, what="ownership")
    (found,) = app.app.registry.queuey.groups.for_application(app.apps.app)
    assert (found.name, found.members[0].application) == ("legacy", None)

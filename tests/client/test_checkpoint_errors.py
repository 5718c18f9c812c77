"""An error reading a checkpoint never sends a partition back to its beginning.

Real ZooKeeper, real Queuey server; the checkpoint API answers 503 through a
fault injector in front of the real app.
"""

from __future__ import annotations

from collections import Counter

import pytest

from queuey.client import Checkpoint
from tests.client.conftest import Recorder, post_numbered
from tests.client.test_worker import consume_with_a_mirror
from tests.support import wait_until


@pytest.mark.zookeeper
def test_a_failed_mirror_read_fails_the_lease_instead_of_starting_over(
    client, faulty_server, make_worker
):
    recorder = Recorder()
    posted = consume_with_a_mirror(client, make_worker, recorder)
    faulty_server.injector.fail("GET", "/checkpoints/")
    # Another ZooKeeper root has no checkpoints: this member must read the mirror.
    second = make_worker(
        "w1",
        recorder.job_for("w1"),
        mirror_checkpoints="true",
        zookeeper_root="/elsewhere",
        server=faulty_server,
    )
    wait_until(lambda: faulty_server.injector.hits >= 12, 30, "12 failed checkpoint reads")
    held_while_failing = len(second.worker.group.leases())
    more = post_numbered(client, "q", 30, 3, 3)
    faulty_server.injector.heal()
    wait_until(lambda: recorder.count() >= 33, 30, "the new messages")
    wait_until(lambda: second.worker.group.settled, 10, "the member to settle")

    counts = Counter(recorder.ids())
    expected = Counter(p.message_id for p in posted + more)
    duplicates = sum(n - 1 for n in counts.values())
    figures = (
        f"sent {len(expected)}, read back {len(counts)}, duplicates {duplicates}, "
        f"failed checkpoint reads {faulty_server.injector.hits}, "
        f"partitions held while failing {held_while_failing}"
    )
    print(figures)
    assert held_while_failing == 0, figures
    assert counts == expected, figures


@pytest.mark.zookeeper
def test_an_unreadable_checkpoint_node_is_not_taken_for_none(make_group, zk):
    zk.create("/queuey/groups/g/checkpoints/q/1", b"{not json", makepath=True)
    good = Checkpoint("2" * 32, 2.0)
    zk.create("/queuey/groups/g/checkpoints/q/2", good.to_bytes("earlier"), makepath=True)
    group = make_group(lambda: [("q", 1), ("q", 2)], "m0")
    wait_until(lambda: [lease.key for lease in group.leases()] == [("q", 2)], 10, "partition 2")
    assert group.leases()[0].committed == good
    assert ("q", 1) not in group.owned(), "a partition whose checkpoint is unreadable is not run"

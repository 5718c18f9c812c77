"""Consumer-group membership and partition ownership on a real ZooKeeper."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from queuey.client import Checkpoint, ConsumerGroup, PartitionLease
from tests.client.conftest import REBALANCE_TIMEOUT, SESSION_TIMEOUT, owners
from tests.support import wait_until


def static(count: int, queue: str = "q"):
    return lambda: [(queue, p) for p in range(1, count + 1)]


def settled(groups: list[ConsumerGroup], members: int | None = None) -> bool:
    members = members if members is not None else len(groups)
    return all(g.settled and len(g.members) == members for g in groups)


def assert_complete_and_disjoint(groups: list[ConsumerGroup], partitions: int, queue="q"):
    owned = [set(g.owned()) for g in groups]
    for a, b in itertools.combinations(owned, 2):
        assert not a & b
    assert set().union(*owned) == {(queue, p) for p in range(1, partitions + 1)}
    sizes = [len(o) for o in owned]
    assert max(sizes) - min(sizes) <= 1


class OwnershipSampler:
    """Checks, many times a second, that no partition has two members processing it."""

    def __init__(self, groups: list[ConsumerGroup]) -> None:
        self.groups = groups
        self.samples = 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            seen: dict = {}
            for g in list(self.groups):
                for lease in g.leases():
                    if lease.key in seen:
                        self.violations.append(
                            f"{lease.key} by {seen[lease.key]} and {g.member_id}"
                        )
                    seen[lease.key] = g.member_id
            self.samples += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self.samples > 10
        assert not self.violations, self.violations[:5]


def expire_session(zk: KazooClient, hosts: str) -> None:
    """End a client's session on the server (kazoo's own test trick)."""
    session_id, password = zk.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=15)
    twin.stop()
    twin.close()


# ------------------------------------------------------------------------- tests


@pytest.mark.zookeeper
def test_three_members_share_27_partitions_9_each(make_group, zk):
    groups = [make_group(static(27), f"m{i}") for i in range(3)]
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "3 members to settle")
    assert [len(g.owned()) for g in groups] == [9, 9, 9]
    assert_complete_and_disjoint(groups, 27)
    # ZooKeeper agrees: one ephemeral owner node per partition, naming its member
    recorded = owners(zk, "q", group="g")
    assert recorded == {p: g.member_id for g in groups for _, p in g.owned()}
    assert sorted(zk.get_children("/queuey/groups/g/members")) == ["m0", "m1", "m2"]
    data = json.loads(zk.get("/queuey/groups/g/members/m1")[0])
    assert {"host", "pid", "started", "member"} <= set(data)


@pytest.mark.zookeeper
def test_join_and_leave_settle_within_the_bound_with_one_owner_at_a_time(make_group, zk):
    groups = [make_group(static(27), f"m{i}") for i in range(2)]
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "2 members to settle")
    sampler = OwnershipSampler(groups)

    started = time.monotonic()
    groups.append(make_group(static(27), "m2"))
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "the newcomer to get its share")
    joined_in = time.monotonic() - started
    assert_complete_and_disjoint(groups, 27)

    started = time.monotonic()
    leaving = groups.pop(0)
    leaving.stop()
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "the others to take over")
    left_in = time.monotonic() - started
    sampler.stop()
    assert_complete_and_disjoint(groups, 27)
    assert joined_in <= REBALANCE_TIMEOUT and left_in <= REBALANCE_TIMEOUT
    print(f"rebalance after a join: {joined_in:.2f}s, after a leave: {left_in:.2f}s")
    assert "m0" not in zk.get_children("/queuey/groups/g/members")


@pytest.mark.zookeeper
def test_a_member_whose_session_expired_stops_then_rejoins(make_group, zookeeper_chroot):
    groups = [make_group(static(8), f"m{i}") for i in range(2)]
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "2 members to settle")
    victim = groups[0]
    old_leases = [victim._leases[k] for k in victim.owned()]
    sampler = OwnershipSampler(groups)
    started = time.monotonic()
    expire_session(victim.zk, zookeeper_chroot)
    wait_until(lambda: victim.stats.sessions == 2, SESSION_TIMEOUT * 2, "a new session")
    assert not any(lease.valid() for lease in old_leases), "old leases die with the session"
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "the group to settle again")
    sampler.stop()
    print(f"rejoined and settled {time.monotonic() - started:.2f}s after the expiry")
    assert_complete_and_disjoint(groups, 8)
    assert len(victim.owned()) == 4


@pytest.mark.zookeeper
def test_a_dropped_connection_pauses_then_resumes_in_the_same_session(make_group):
    group = make_group(static(3), "m0")
    wait_until(lambda: settled([group]), REBALANCE_TIMEOUT, "the member to settle")
    lease = group._leases[("q", 1)]
    states = []

    on_state = group._on_state

    def recording(generation, state):  # what the worker would see right after the event
        on_state(generation, state)
        states.append((state, lease.valid(), group.paused))

    group._on_state = recording
    group.zk._call(_CONNECTION_DROP, group.zk.handler.async_result())  # kazoo's test hook
    wait_until(lambda: any(s == KazooState.CONNECTED for s, _, _ in states), 15, "a reconnect")
    assert states[0] == (KazooState.SUSPENDED, False, True), "paused at once on SUSPENDED"
    wait_until(lambda: lease.valid(), 5, "the lease to be usable again")
    assert group.stats.sessions == 1
    assert set(group.owned()) == {("q", 1), ("q", 2), ("q", 3)}


@pytest.mark.zookeeper
def test_queues_and_partitions_added_later_are_assigned(make_group):
    wanted = [("a", 1), ("a", 2)]
    groups = [make_group(lambda: list(wanted), f"m{i}", discovery_interval=0.2) for i in range(2)]
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "settle on 2 partitions")
    wanted.extend([("a", 3), ("a", 4), ("b", 1), ("b", 2)])  # a grows, b is created
    wait_until(
        lambda: settled(groups) and sum(len(g.owned()) for g in groups) == 6,
        REBALANCE_TIMEOUT + 1,
        "the new partitions to be owned",
    )
    assert [len(g.owned()) for g in groups] == [3, 3]


@pytest.mark.zookeeper
def test_checkpoints_of_every_partition_are_read_on_acquire(make_group, zk):
    base = "/queuey/groups/g/checkpoints/q"
    for p in range(1, 28):
        cp = Checkpoint(f"{p:032x}", 1700000000.0 + p)
        zk.create(f"{base}/{p}", cp.to_bytes("earlier"), makepath=True)
    groups = [make_group(static(27), f"m{i}") for i in range(3)]
    wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "3 members to settle")
    for g in groups:
        for lease in g.leases():
            assert lease.committed == Checkpoint(
                f"{lease.partition:032x}", 1700000000.0 + lease.partition
            )
            assert lease.position == lease.committed
    assert len(groups[0].read_checkpoints("q")) == 27


@pytest.mark.zookeeper
def test_commit_is_refused_once_another_member_owns_the_partition(make_group, zk):
    group = make_group(static(1), "m0")
    wait_until(lambda: settled([group]), REBALANCE_TIMEOUT, "the member to settle")
    lease = group.leases()[0]
    lease.advance("1" * 32, 1.0)
    assert lease.commit() is True
    # Someone else's commit (as after a takeover) moves the version on:
    zk.set("/queuey/groups/g/checkpoints/q/1", Checkpoint("2" * 32, 2.0).to_bytes("x"))
    zk.delete("/queuey/groups/g/owners/q/1")
    lease.advance("3" * 32, 3.0)
    assert lease.commit() is False
    assert (
        Checkpoint.from_bytes(zk.get("/queuey/groups/g/checkpoints/q/1")[0]).message_id == "2" * 32
    )


# ------------------------------------------------------------- the state handler


class FakeKazoo:
    """A stand-in exposing only ``client_id``, for driving the state handler directly."""

    def __init__(self, session: int) -> None:
        self.client_id = (session, b"password")


@pytest.mark.unit
def test_suspended_pauses_processing_and_commits_until_reconnected():
    group = ConsumerGroup("127.0.0.1:1", "g", static(2), member_id="m0")
    group._generation, group._session = 1, 42
    group._confirmed = time.monotonic()  # as if the heartbeat just got an answer
    group._running.set()
    lease = PartitionLease(group, ("q", 1), 42, None, None)
    group._leases[("q", 1)] = lease
    assert group.leases() == [lease] and lease.valid()

    group._on_state(1, KazooState.SUSPENDED)
    assert group.paused and not lease.valid()
    assert group.leases() == []
    lease.advance("a" * 32, 1.0)
    assert lease.commit() is False  # never reached ZooKeeper (group.zk is None)

    group.zk = FakeKazoo(42)
    group._confirmed = 0.0  # long unconfirmed: the reconnect itself confirms the session
    group._on_state(1, KazooState.CONNECTED)
    group._handle_state(*group._events.queue[-1][1])
    assert not group.paused and lease.valid() and group.leases() == [lease]
    assert lease.dirty, "work done while paused is committed after the reconnect"

    group._on_state(0, KazooState.SUSPENDED)  # an old client's event is ignored
    assert lease.valid()
    group._confirmed = time.monotonic() - group.session_timeout  # no answer for too long
    assert not lease.valid() and group.leases() == [], "silence alone pauses"
    group._confirmed = time.monotonic()
    assert lease.valid()
    group._on_state(1, KazooState.LOST)
    assert not lease.valid() and group.leases() == []


# ----------------------------------------------------------- a network partition


class BlackholeProxy:
    """A TCP proxy to ZooKeeper that can silently stop forwarding (a network partition).

    While black-holed, bytes are read and dropped in both directions and new
    connections are accepted but go nowhere, so the client notices only by its
    own timeouts, as with a real partition.
    """

    def __init__(self, target: str) -> None:
        host, port = target.split("/")[0].split(",")[0].rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.holed = threading.Event()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            if self.holed.is_set():
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            upstream = socket.create_connection(self.target)
            self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while data := src.recv(65536):
                if dst is not None and not self.holed.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    def close(self) -> None:
        self.closed.set()
        for s in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                s.close()


@pytest.mark.zookeeper
@pytest.mark.slow
def test_a_partitioned_member_pauses_before_anyone_takes_its_partitions(
    make_group, zookeeper_chroot
):
    chroot = "/" + zookeeper_chroot.split("/", 1)[1]
    proxy = BlackholeProxy(zookeeper_chroot)
    try:
        victim = make_group(static(6), "m0", hosts=proxy.address + chroot)
        other = make_group(static(6), "m1")
        groups = [victim, other]
        wait_until(lambda: settled(groups), REBALANCE_TIMEOUT, "2 members to settle")
        victim_partitions = set(victim.owned())
        events: dict[str, float] = {}
        on_state = victim._on_state

        def recording(generation, state):
            on_state(generation, state)
            events.setdefault(state, time.monotonic())

        victim._on_state = recording
        sampler = OwnershipSampler(groups)

        paused: list[float] = []

        def watch_victim() -> None:
            while not paused and time.monotonic() - holed_at < 30:
                if not victim.leases():
                    paused.append(time.monotonic())
                time.sleep(0.005)

        proxy.holed.set()
        holed_at = time.monotonic()
        threading.Thread(target=watch_victim, daemon=True).start()
        wait_until(
            lambda: victim_partitions <= set(other.owned()),
            SESSION_TIMEOUT + REBALANCE_TIMEOUT + 2,
            "the other member to take the partitioned member's partitions",
        )
        taken_at = time.monotonic()
        assert paused, "the victim never paused"
        paused_after = paused[0] - holed_at
        suspended_after = events.get(KazooState.SUSPENDED, float("nan")) - holed_at
        print(
            f"paused {paused_after:.2f}s after the partition (kazoo: SUSPENDED after "
            f"{suspended_after:.2f}s), taken over after {taken_at - holed_at:.2f}s "
            f"(session timeout {SESSION_TIMEOUT}s)"
        )
        assert paused[0] < taken_at
        assert paused_after <= SESSION_TIMEOUT * 2 / 3 + SESSION_TIMEOUT / 6 + 0.2
        assert victim.leases() == []

        proxy.holed.clear()  # the network heals: the old session is gone, so rejoin
        wait_until(lambda: victim.stats.sessions >= 2 and settled(groups), 30, "the rejoin")
        sampler.stop()
        assert_complete_and_disjoint(groups, 6)
    finally:
        proxy.close()

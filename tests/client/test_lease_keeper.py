"""The lease keeper and one reserve-mode batch, against a recording fake client.

These pin the rules on a manual clock (when a lease is renewed, what a lost
lease does, what is acked and released); the live-server tests in
``test_worker_reserve.py`` show the same end to end.
"""

from __future__ import annotations

import pytest

from queuey.client import ClientError, ReceiptResult, ReservedMessage, Unavailable, WorkerConfig
from queuey.client.worker.keeper import ERROR_PAUSE, LeaseKeeper
from queuey.client.worker.reserve import FAILED, ReserveWorker
from queuey.errors import ConfigurationError

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeClient:
    """Records the work-queue calls; answers from ``batches`` and ``expired``."""

    def __init__(self, batches=(), expired=(), fail_extend: int = 0) -> None:
        self.batches = list(batches)
        self.expired = set(expired)
        self.fail_extend = fail_extend
        self.calls: list[tuple] = []

    def reserve(self, queue, **kwargs):
        self.calls.append(("reserve", queue, kwargs))
        return self.batches.pop(0) if self.batches else []

    def extend(self, queue, receipts, visibility_timeout, subscription):
        self.calls.append(("extend", queue, list(receipts), visibility_timeout))
        if self.fail_extend:
            self.fail_extend -= 1
            raise Unavailable("no node answered")
        failed = {r: "expired" for r in receipts if r in self.expired}
        return ReceiptResult(len(receipts) - len(failed), failed)

    def ack(self, queue, receipts, subscription):
        self.calls.append(("ack", queue, list(receipts)))
        failed = {r: "expired" for r in receipts if r in self.expired}
        return ReceiptResult(len(receipts) - len(failed), failed)

    def release(self, queue, receipts, subscription, delay, error):
        self.calls.append(("release", queue, list(receipts), delay, error))
        return ReceiptResult(len(receipts), {})

    def close(self) -> None:
        pass

    def named(self, action: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == action]


def message(n: int, attempts: int = 1) -> ReservedMessage:
    message_id = f"{n:012x}10008{n:015x}"  # a version-1 UUID's hex, as the service makes
    return ReservedMessage(message_id, 1.0, 1, {"n": n}, 0, None, attempts, f"r{n}")


# ---------------------------------------------------------------- the keeper


def test_a_lease_is_renewed_once_half_of_it_passed_counted_from_before_the_call():
    clock, client = Clock(), FakeClient()
    keeper = LeaseKeeper(client, "default", clock=clock)
    keeper.hold("q", ["r1"], timeout=10, granted_at=clock.now)
    clock.now += 4.9
    assert keeper.renew_due() == pytest.approx(0.1) and client.named("extend") == []
    clock.now += 0.1
    keeper.renew_due()
    assert client.named("extend") == [("extend", "q", ["r1"], 10)]
    clock.now += 4.9  # the renewed lease runs 10 s from the call: next due 5 s after it
    keeper.renew_due()
    assert len(client.named("extend")) == 1 and keeper.extended == 1


def test_a_lease_the_server_says_is_gone_is_marked_lost_and_no_longer_renewed():
    clock, client = Clock(), FakeClient(expired={"r2"})
    keeper = LeaseKeeper(client, "default", clock=clock)
    keeper.hold("q", ["r1", "r2"], timeout=2, granted_at=clock.now)
    clock.now += 1
    keeper.renew_due()
    assert keeper.is_lost("r2") and not keeper.is_lost("r1") and keeper.lost == 1
    clock.now += 1
    keeper.renew_due()
    assert [c[2] for c in client.named("extend")] == [["r1", "r2"], ["r1"]]
    keeper.drop(["r1", "r2"])
    assert keeper.holding() == 0 and not keeper.is_lost("r2")


def test_a_failed_renewal_is_tried_again_after_a_short_pause():
    clock, client = Clock(), FakeClient(fail_extend=1)
    keeper = LeaseKeeper(client, "default", clock=clock)
    keeper.hold("q", ["r1"], timeout=4, granted_at=clock.now)
    clock.now += 2
    assert keeper.renew_due() == ERROR_PAUSE
    keeper.renew_due()
    assert len(client.named("extend")) == 2 and keeper.extended == 1


def test_renewals_go_by_queue_and_at_most_100_receipts_a_call():
    clock, client = Clock(), FakeClient()
    keeper = LeaseKeeper(client, "default", clock=clock)
    keeper.hold("a", [f"a{n}" for n in range(150)], timeout=2, granted_at=clock.now)
    keeper.hold("b", ["b1"], timeout=2, granted_at=clock.now)
    clock.now += 1
    keeper.renew_due()
    sizes = sorted((c[1], len(c[2])) for c in client.named("extend"))
    assert sizes == [("a", 50), ("a", 100), ("b", 1)]


# --------------------------------------------------------- one reserve batch


def make_worker(job, client: FakeClient, **worker) -> ReserveWorker:
    section = {"mode": "reserve", "queues": "q", "job": "m:f", "visibility_timeout": "30"}
    section.update({k: str(v) for k, v in worker.items()})
    config = WorkerConfig.from_mapping(
        {"queuey": {"urls": "http://unused", "application": "app"}, "worker": section},
        environ={},
    )
    return ReserveWorker(config, job=job, client_factory=lambda: client, clock=Clock())


def test_only_successful_jobs_are_acked_and_failures_released_with_backoff_and_error():
    client = FakeClient(batches=[[message(1), message(2, attempts=3), message(3)]])

    def job(m: ReservedMessage) -> None:
        if m.body["n"] == 2:
            raise LookupError("missing\nmore detail")

    worker = make_worker(job, client, retry_backoff=1, retry_max_backoff=60)
    assert worker.process_next(client, "q") == 3
    assert client.named("ack") == [("ack", "q", ["r1", "r3"])]
    assert client.named("release") == [("release", "q", ["r2"], 4, "LookupError: missing")]
    assert worker.keeper.holding() == 0
    assert (worker.stats.processed, worker.stats.failed, worker.stats.released) == (2, 1, 1)


def test_a_message_whose_lease_was_lost_before_its_job_is_skipped_not_acked():
    client = FakeClient(batches=[[message(1), message(2)]])
    worker = make_worker(lambda m: worker.keeper._lost.add("r2"), client)
    worker.process_next(client, "q")
    assert client.named("ack") == [("ack", "q", ["r1"])]
    assert client.named("release") == [], "a lost lease is not ours to release"


def test_a_late_ack_is_counted_not_hidden():
    client = FakeClient(batches=[[message(1)]], expired={"r1"})
    worker = make_worker(lambda m: None, client)
    worker.process_next(client, "q")
    assert (worker.stats.processed, worker.stats.ack_expired) == (0, 1)


def test_a_failed_reserve_is_reported_to_the_loop():
    client = FakeClient()

    def broken(queue, **kwargs):
        raise ClientError("HTTP 404: no queue named q", status=404)

    client.reserve = broken
    worker = make_worker(lambda m: None, client)
    assert worker.process_next(client, "q") == FAILED and worker.stats.reserve_errors == 1


def test_a_reserve_worker_refuses_a_partitions_config():
    config = WorkerConfig.from_mapping(
        {
            "queuey": {"urls": "http://a", "application": "app"},
            "zookeeper": {"hosts": "z:1"},
            "worker": {"group": "g", "queues": "q", "job": "m:f"},
        },
        environ={},
    )
    with pytest.raises(ConfigurationError) as info:
        ReserveWorker(config, job=lambda m: None, client_factory=FakeClient)
    assert info.value.key == "worker.mode"


def test_long_polls_with_several_queues_wait_only_once_a_round_found_nothing():
    one = make_worker(lambda m: None, FakeClient(), wait=8)
    assert one._wait_for(all_empty=False) == 8, "one queue: always the long poll"
    three = make_worker(lambda m: None, FakeClient(), wait=8, queues="a,b,c")
    assert three._wait_for(all_empty=False) == 0, "another queue may have messages"
    assert three._wait_for(all_empty=True) == 2, "the wait shared among the queues"

"""Fair queues' lanes (queuey.core.fairness) and the token buckets flow control
takes from (queuey.core.quotas.take_tokens), with an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuey.core.buckets import Buckets, give_tokens, take_tokens
from queuey.core.fairness import (
    BUSY_LANE,
    HOLD,
    MAX_GROUPS,
    NORMAL_LANE,
    QUIET_LANE,
    GroupTracker,
)

Q = ("app", "queue")


class Clock:
    def __init__(self) -> None:
        self.at = 1000.0

    def __call__(self) -> float:
        return self.at


def test_a_flood_is_busy_and_trickling_groups_stay_quiet() -> None:
    clock = Clock()
    tracker = GroupTracker(clock, threshold=100)
    flood = tracker.lanes(Q, ["a"] * 10_000)
    # A flood is busy from past its threshold, even before anyone else posts;
    # before, every message is in the one normal lane.
    assert flood[:101] == [NORMAL_LANE] * 101
    assert set(flood[101:]) == {BUSY_LANE}
    assert tracker.busy(Q) == ["a"]
    assert tracker.top(Q, 1)[0][0] == "a"
    for second in range(20):
        clock.at += 1
        lanes = tracker.lanes(Q, [f"g{n}" for n in range(9) for _ in range(10)])
        assert set(lanes) == {QUIET_LANE}, second  # they pass the flood


def test_groups_posting_alike_share_the_normal_lane() -> None:
    tracker = GroupTracker(Clock(), threshold=10)
    lanes = tracker.lanes(Q, ["b", "c", "d"] * 1000)
    assert set(lanes) == {NORMAL_LANE}
    assert tracker.busy(Q) == []


def test_a_flood_stays_busy_until_its_hold_passes_then_all_is_normal() -> None:
    clock = Clock()
    tracker = GroupTracker(clock, threshold=10)
    tracker.lanes(Q, ["a"] * 1000 + ["b"])
    clock.at += 60  # the flood's posts are long past, its backlog may not be
    assert tracker.lanes(Q, ["b", "a"]) == [QUIET_LANE, BUSY_LANE]
    clock.at += HOLD - 59
    assert tracker.lanes(Q, ["b", "a"]) == [NORMAL_LANE, NORMAL_LANE]
    assert tracker.busy(Q) == []


def test_the_groups_counted_are_bounded() -> None:
    tracker = GroupTracker(Clock(), threshold=10)
    tracker.lanes(Q, [f"g{n}" for n in range(MAX_GROUPS * 3)])
    assert len(tracker.top(Q, MAX_GROUPS * 3)) <= MAX_GROUPS


def test_take_tokens_whole_batches_and_partial_reserves() -> None:
    # A whole batch takes all or none.
    tokens, last, taken, wait = take_tokens(2.0, 0.0, 0.0, rate=2.0, capacity=2, want=2, whole=True)
    assert (taken, wait) == (2, 0.0) and tokens == 0.0
    tokens, last, taken, wait = take_tokens(tokens, last, 0.25, 2.0, 2, 1, True)
    assert taken == 0 and wait == pytest.approx(0.25)
    # A larger one than the capacity needs a full bucket and is charged in full:
    # the bucket is in debt, and the next post waits for it to be paid back.
    tokens, last, taken, wait = take_tokens(2.0, 0.0, 0.0, 2.0, 2, 3, True)
    assert taken == 3 and tokens == -1.0
    tokens, last, taken, wait = take_tokens(tokens, last, 0.5, 2.0, 2, 1, True)
    assert taken == 0 and wait == pytest.approx(0.5)
    # A reserve takes what there is.
    tokens, last, taken, wait = take_tokens(1.5, 0.0, 0.0, 2.0, 5, 10, False)
    assert taken == 1 and tokens == pytest.approx(0.5)
    assert give_tokens(0.5, 3, 2) == 2.0


@given(
    rate=st.floats(0.5, 1000),
    burst=st.integers(1, 100),
    asks=st.lists(st.tuples(st.floats(0, 2), st.integers(1, 100), st.booleans()), max_size=60),
)
def test_a_bucket_never_hands_out_more_than_burst_plus_rate_times_time(rate, burst, asks):
    """Over any window: whole batches up to the burst and partial reserves alike."""
    buckets = Buckets()
    at = [0.0]
    taken_at: list[tuple[float, int]] = []
    for step, want, whole in asks:
        at[0] += step
        want = min(want, burst) if whole else want
        taken, _ = buckets.take("app", "k", lambda: at[0], rate, burst, want, whole)
        taken_at.append((at[0], taken))
    for start, _ in taken_at:
        window = [(t, n) for t, n in taken_at if t >= start]
        total = sum(n for _, n in window)
        assert total <= burst + rate * (at[0] - start) + 1e-6

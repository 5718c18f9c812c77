"""The assignment of partitions to members (pure logic)."""

from __future__ import annotations

import itertools
import random

import pytest

from queuey.client.assignment import assign, assigned_to

pytestmark = pytest.mark.unit


def partitions(queues: dict[str, int]) -> list[tuple[str, int]]:
    return [(q, p) for q, n in queues.items() for p in range(1, n + 1)]


def owner_of(table: dict[str, list]) -> dict:
    return {p: m for m, ps in table.items() for p in ps}


@pytest.mark.parametrize("members", [1, 2, 3, 4, 5, 7, 10, 27, 40])
@pytest.mark.parametrize("count", [0, 1, 8, 27, 100])
def test_every_partition_has_one_owner_and_shares_differ_by_at_most_one(members, count):
    ms = [f"member-{i}" for i in range(members)]
    ps = partitions({"q": count})
    table = assign(ms, ps)
    assert sorted(table) == sorted(ms)
    flat = [p for owned in table.values() for p in owned]
    assert sorted(flat) == sorted(ps), "complete and disjoint"
    sizes = [len(owned) for owned in table.values()]
    assert max(sizes) - min(sizes) <= 1


def test_27_partitions_over_3_members_give_9_each():
    table = assign(["a", "b", "c"], partitions({"q": 27}))
    assert [len(v) for v in table.values()] == [9, 9, 9]


def test_deterministic_whatever_the_input_order():
    ms = [f"m{i}" for i in range(5)]
    ps = partitions({"a": 16, "b": 3, "c": 7})
    expected = assign(ms, ps)
    rng = random.Random(4)
    for _ in range(20):
        shuffled_ms, shuffled_ps = ms[:], ps[:]
        rng.shuffle(shuffled_ms)
        rng.shuffle(shuffled_ps)
        assert assign(shuffled_ms, shuffled_ps) == expected
    assert assigned_to("m2", ms, ps) == expected["m2"]
    assert assigned_to("stranger", ms, ps) == []


def test_lists_are_sorted_and_duplicates_ignored():
    table = assign(["b", "a", "a"], [("q", 3), ("q", 1), ("q", 2), ("q", 1)])
    assert sorted(table) == ["a", "b"]
    for owned in table.values():
        assert owned == sorted(owned)
    assert sum(len(v) for v in table.values()) == 3


def test_no_members_no_assignment():
    assert assign([], partitions({"q": 4})) == {}


@pytest.mark.parametrize("members", [2, 3, 4, 6])
def test_a_joining_member_moves_few_partitions(members):
    """Sticky: far fewer moves than re-dealing the table (which moves most of it)."""
    ps = partitions({"q": 27, "r": 13})
    before = [f"m{i}" for i in range(members)]
    after = before + ["newcomer"]
    old, new = owner_of(assign(before, ps)), owner_of(assign(after, ps))
    moved = sum(1 for p in ps if old[p] != new[p])
    necessary = len(assign(after, ps)["newcomer"])
    assert moved <= 2 * necessary
    # partitions that move go to the newcomer or fill the gap a move left
    assert moved < len(ps) / 2


def test_a_leaving_member_keeps_the_others_mostly_in_place():
    ps = partitions({"q": 27})
    ms = ["a", "b", "c", "d"]
    old = owner_of(assign(ms, ps))
    new = owner_of(assign(["a", "b", "c"], ps))
    kept = sum(1 for p in ps if old[p] != "d" and new[p] == old[p])
    survivors_had = sum(1 for p in ps if old[p] != "d")
    assert kept >= survivors_had - 4


def test_every_membership_subset_agrees_on_a_complete_table():
    ps = partitions({"q": 10})
    names = ["a", "b", "c", "d"]
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            table = assign(subset, ps)
            assert sorted(p for owned in table.values() for p in owned) == ps

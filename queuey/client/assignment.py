"""Dividing queue partitions among the live members of a consumer group.

Every member computes the assignment on its own from the same two sorted
lists (members, partitions), so the function must be deterministic: the same
sets give the same answer whatever order they arrive in. It is also *sticky*:
each partition ranks the members by a hash of (member, partition), highest
random weight first (rendezvous hashing), and goes to the best-ranked member
that still has room. A member joining or leaving therefore moves about the
partitions it must, not the whole table as a round-robin deal would.

Shares differ by at most one: with ``P`` partitions and ``M`` members, every
member gets ``P // M`` and ``P % M`` of them get one more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

P = TypeVar("P", bound=Hashable)

Partition = tuple[str, int]
"""A queue partition: (queue name, partition number from 1)."""


def _weight(member: str, partition: object) -> bytes:
    return hashlib.blake2b(f"{member}\x00{partition!r}".encode(), digest_size=8).digest()


def assign(members: Iterable[str], partitions: Iterable[P]) -> dict[str, list[P]]:
    """Map every member to its sorted list of partitions.

    Deterministic in the *sets* of members and partitions; every partition is
    assigned to exactly one member (when there is any member) and shares differ
    by at most one.
    """
    ms = sorted(set(members))
    ps: Sequence[P] = sorted(set(partitions))  # type: ignore[type-var]
    result: dict[str, list[P]] = {m: [] for m in ms}
    if not ms or not ps:
        return result
    base, extra = divmod(len(ps), len(ms))
    counts = dict.fromkeys(ms, 0)
    full_extra = 0  # members already holding base + 1

    def has_room(member: str) -> bool:
        count = counts[member]
        return count < base or (count == base and full_extra < extra)

    prefs = {p: sorted(ms, key=lambda m, p=p: (_weight(m, p), m), reverse=True) for p in ps}
    unassigned = list(ps)
    # Round r offers every still-unassigned partition its r-th choice, so a
    # partition loses its first choice only to others that ranked it first too.
    for rank in range(len(ms)):
        if not unassigned:
            break
        left = []
        for p in unassigned:
            member = prefs[p][rank]
            if has_room(member):
                result[member].append(p)
                counts[member] += 1
                if counts[member] == base + 1:
                    full_extra += 1
            else:
                left.append(p)
        unassigned = left
    assert not unassigned, "capacities add up to the partition count"
    for member in ms:
        result[member].sort()
    return result


def assigned_to(member: str, members: Iterable[str], partitions: Iterable[P]) -> list[P]:
    """The partitions ``member`` should own (empty if it is not among ``members``)."""
    return assign(members, partitions).get(member, [])

"""Which partition a message goes to.

The web layer, the client and the Spark writer all place messages by the same
rules, so a ``partition_key`` lands in the same partition whichever way it was
posted.
"""

from __future__ import annotations

import hashlib
import random


def partition_for_key(key: str, partitions: int) -> int:
    """A stable partition for ``partition_key`` (the same on every node and release).

    BLAKE2b of the key's UTF-8 bytes, modulo the queue's partition count: growing
    a queue's partitions re-maps keys.
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions + 1


def random_partition(partitions: int) -> int:
    """A partition for a message posted without a placement."""
    return random.randint(1, partitions)

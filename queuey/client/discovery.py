"""Which (queue, partition) pairs a consumer group consumes, asked of the HTTP API."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Sequence

from queuey.client.assignment import Partition
from queuey.client.errors import NotFound
from queuey.client.http import QueueyClient
from queuey.client.models import QueueInfo

log = logging.getLogger(__name__)

#: How a failure queue's name ends (``{queue}-failed``); discovery skips them by default.
FAILED_SUFFIX = "-failed"
#: The patterns discovery skips by default: failure queues.
DEFAULT_EXCLUDE = ("*" + FAILED_SUFFIX,)


class QueueDiscovery:
    """The (queue, partition) pairs a group consumes, asked of the HTTP API.

    ``queues`` are names or shell patterns (``crash-*``, ``*``). Plain names are
    looked up with ``queue_info`` (a queue that does not exist yet has no
    partitions and appears once created); patterns list the application's
    queues. Names matching ``exclude`` (by default failure queues) are skipped.
    Partitions added to a queue later show up at the next call.
    """

    def __init__(
        self,
        client: QueueyClient,
        queues: Sequence[str],
        exclude: Sequence[str] = DEFAULT_EXCLUDE,
    ) -> None:
        if not queues:
            raise ValueError("a consumer group needs at least one queue name or pattern")
        self.client = client
        self.names = [q for q in queues if not is_pattern(q)]
        self.patterns = [q for q in queues if is_pattern(q)]
        self.exclude = list(exclude)

    def __call__(self) -> list[Partition]:
        found: dict[str, int] = {}
        for name in self.names:
            try:
                found[name] = self.client.queue_info(name).partitions
            except NotFound:
                log.debug("queue %s does not exist (yet)", name)
        if self.patterns:
            for info in self.client.iter_queues():
                assert isinstance(info, QueueInfo)
                if any(fnmatch.fnmatchcase(info.name, p) for p in self.patterns):
                    found[info.name] = info.partitions
        return sorted(
            (name, p)
            for name, count in found.items()
            if not any(fnmatch.fnmatchcase(name, x) for x in self.exclude)
            for p in range(1, count + 1)
        )


def is_pattern(name: str) -> bool:
    """True for a shell pattern (``*``, ``?`` or ``[``), not a plain name."""
    return any(ch in name for ch in "*?[")

"""The partitions a consumer group consumes, discovered again and again.

The group's ``discover`` callable (usually a
:class:`~queuey.client.discovery.QueueDiscovery`) is called at start and then
every ``interval`` seconds, less up to a fifth so members do not ask the API
in step, on a thread of its own: a slow or failing API never holds up the
coordinator, and a failed call keeps the last list. Each change found by the
thread is reported through ``changed``, so the group reconciles.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from queuey.client.assignment import Partition

log = logging.getLogger(__name__)


@dataclass(eq=False)
class PartitionWatch:
    """The sorted (queue, partition) pairs ``discover`` last returned for ``group``."""

    group: str
    discover: Callable[[], Sequence[Partition]]
    interval: float
    stopping: threading.Event
    changed: Callable[[], None]
    partitions: list[Partition] = field(default_factory=list, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        """Discover again every ``interval`` seconds until ``stopping`` is set."""
        self._thread = threading.Thread(
            target=self._loop, name=f"queuey-discovery-{self.group}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self.stopping.wait(self.interval * random.uniform(0.8, 1.0)):
            if self.refresh():
                self.changed()

    def refresh(self) -> bool:
        """Call ``discover`` once; True when the partitions changed."""
        try:
            found = sorted(set(self.discover()))
        except Exception as exc:  # noqa: BLE001 - keep the last list; try again later
            log.warning(
                "group %s: discovering queues failed (%s); keeping %d partition(s)",
                self.group,
                exc,
                len(self.partitions),
            )
            return False
        if found == self.partitions:
            return False
        log.info(
            "group %s: %d partition(s) to consume (was %d)",
            self.group,
            len(found),
            len(self.partitions),
        )
        self.partitions = found
        return True

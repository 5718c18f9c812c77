"""Who an SQS action runs for, and what every group of actions shares.

An SQS queue's consumers share one subscription, :data:`SUBSCRIPTION`; a
caller is an application at an endpoint (:class:`Caller`). :class:`Actions`
holds the app's services and finds the caller's queues: by ``QueueUrl``, by
name, or all of them a page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from queuey.applications import Application
from queuey.core.services import Services
from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.sqs import queues as qs
from queuey.sqs.errors import missing

#: The subscription SQS consumers share: an SQS queue is one work queue.
SUBSCRIPTION = "default"
#: Queues one ListQueues / ListDeadLetterSourceQueues call looks at, at most.
SCAN = 1000


@dataclass(frozen=True)
class Caller:
    application: Application
    place: qs.Place


class Actions:
    """The app's services, as every group of SQS actions uses them."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.storage = services.storage
        self.work = services.workqueues
        self.queues = services.queues
        self.clock = services.clock
        self.settings = services.settings
        #: The message rules, which are also the limits SQS attributes are checked against.
        self.limits = services.rules

    def _queue(self, caller: Caller, params: Mapping) -> QueueMeta:
        url = params.get("QueueUrl")
        if url is None:
            raise missing("QueueUrl")
        return self._named(caller, caller.place.name_from_url(url))

    def _named(self, caller: Caller, name: str) -> QueueMeta:
        try:
            return self.queues.get(caller.application.name, name)
        except QueueNotFound:
            raise qs.no_such_queue() from None

    def _every_queue(self, caller: Caller) -> Iterator[QueueMeta]:
        """The application's queues, a page at a time (at most 100 pages)."""
        after = None
        for _ in range(100):
            page = self.storage.list_queues(caller.application.name, limit=SCAN, after=after)
            yield from page
            if len(page) < SCAN:
                return
            after = page[-1].name

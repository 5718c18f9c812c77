"""Who an SQS action runs for, and what every group of actions shares.

An SQS queue's consumers share one subscription, :data:`SUBSCRIPTION`; a
caller is an application at an endpoint (:class:`Caller`). :class:`Actions`
holds the app's services and finds the caller's queues: by ``QueueUrl``, by
name, or all of them a page at a time.

A ``QueueUrl`` (or GetQueueUrl's ``QueueOwnerAWSAccountId``) may name another
account's queue: the application of that account id is found, and its queue
is used when its ``Policy`` lets the caller run the action
(:func:`queuey.sqs.policy.allows`). Everything else about such a queue is
refused alike, whether the account or the queue exists or not, so a caller
cannot tell them apart. The caller's own queues are found as before, with no
policy read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from queuey.applications import Application, by_account_id
from queuey.core.services import Services
from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.sqs import policy
from queuey.sqs import queues as qs
from queuey.sqs.errors import missing

#: The subscription SQS consumers share: an SQS queue is one work queue.
SUBSCRIPTION = "default"
#: Queues one ListQueues / ListDeadLetterSourceQueues call looks at, at most.
SCAN = 1000


@dataclass
class Caller:
    """One request's caller: its application, where its queues are, and the
    action it runs. Made per request; when the request's queue is another
    account's, :meth:`Actions._queue` points ``place`` at the owner's account,
    so the URLs and ARNs the answer holds are the owner's."""

    application: Application
    place: qs.Place
    action: str = ""


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
        account, name = caller.place.locate(url)
        if account == caller.place.account_id:
            return self._named(caller, name)
        return self._shared(caller, account, name)

    def _named(self, caller: Caller, name: str, account: str | None = None) -> QueueMeta:
        """The queue of stored name ``name`` of the caller's account (or of
        ``account``, when that is another's and shares the queue)."""
        if account is not None and account != caller.place.account_id:
            return self._shared(caller, account, name)
        try:
            return self.queues.get(caller.application.name, name)
        except QueueNotFound:
            raise qs.no_such_queue() from None

    def _shared(self, caller: Caller, account: str, name: str) -> QueueMeta:
        """Another account's queue, when its policy lets the caller run this action."""
        place = replace(caller.place, account_id=account)
        meta = None
        if policy.grant_action(caller.action) is not None:
            owner = by_account_id(self.services.applications, account)
            if owner is not None:
                try:
                    meta = self.queues.get(owner.name, name)
                except QueueNotFound:
                    pass
        if meta is None or not policy.allows(
            meta.attributes.get("sqs.Policy"),
            caller.place.account_id,
            caller.action,
            place.arn(meta.name),
        ):
            raise policy.denied(caller.action, place.url(name))
        caller.place = place
        return meta

    def _every_queue(self, caller: Caller) -> Iterator[QueueMeta]:
        """The application's queues, a page at a time (at most 100 pages)."""
        after = None
        for _ in range(100):
            page = self.storage.list_queues(caller.application.name, limit=SCAN, after=after)
            yield from page
            if len(page) < SCAN:
                return
            after = page[-1].name

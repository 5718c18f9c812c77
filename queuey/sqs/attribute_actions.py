"""The SQS actions on a queue's attributes and tags.

Attributes are parsed and worded by :mod:`queuey.sqs.queues`; a change is
stored through the core's queue lifecycle (:meth:`queuey.core.queues.Queues.update`),
which keeps this node's metadata cache right.
"""

from __future__ import annotations

from queuey.core.queues import Queues
from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.sqs import queues as qs
from queuey.sqs.caller import SUBSCRIPTION, Actions, Caller
from queuey.sqs.errors import SQSError, invalid, missing


def check_dead_letter_target(
    queues: Queues, caller: Caller, source: str, fifo: bool, target: str
) -> None:
    """A ``RedrivePolicy``'s target exists, is of the source's type, is not the
    source, and its ``RedriveAllowPolicy`` allows the source."""
    try:
        dead = queues.fresh(caller.application.name, target)
    except QueueNotFound:
        raise SQSError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target "
            "does not exist.",
        ) from None
    if dead.fifo != fifo:
        raise SQSError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: a dead-letter queue must "
            "be of the same type (standard or FIFO) as its source queue.",
        )
    if dead.name == source:
        raise invalid("A queue cannot be its own dead-letter queue.")
    if not qs.redrive_allowed(dead, source, caller.place):
        raise SQSError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue's "
            "RedriveAllowPolicy does not allow this source queue.",
        )


class AttributeActions(Actions):
    """GetQueueAttributes, SetQueueAttributes, TagQueue, UntagQueue, ListQueueTags."""

    def get_queue_attributes(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        names = qs.check_attribute_names(params.get("AttributeNames"))
        counts: dict[str, str] = {}
        if "All" in names or names & set(qs.COUNTS):
            counts = self._counts(meta)
        values = qs.attribute_values(meta, names, caller.place, self.limits, counts)
        return {"Attributes": values} if values else {}

    def _counts(self, meta: QueueMeta) -> dict[str, str]:
        stats = self.work.stats(meta)
        for sub in stats.subscriptions:
            if sub.subscription == SUBSCRIPTION:
                available, in_flight, delayed = sub.available, sub.in_flight, sub.delayed
                break
        else:  # never received from: every stored message is new
            available, in_flight, delayed = stats.messages, 0, 0
        return dict(zip(qs.COUNTS, map(str, (available, in_flight, delayed)), strict=True))

    def set_queue_attributes(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        if params.get("Attributes") is None:
            raise missing("Attributes")
        changes = qs.attribute_changes(
            params["Attributes"],
            meta,
            fifo=meta.fifo,
            place=caller.place,
            limits=self.limits,
            now_micros=self.clock.now_micros(),
        )
        target = changes.get("dead_letter_queue")
        if target:
            check_dead_letter_target(self.queues, caller, meta.name, meta.fifo, target)
        if "dead_letter_queue" in changes and target is None:
            del changes["dead_letter_queue"]  # max_attempts 0 turns dead-lettering off
        self.queues.update(meta.application, meta.name, **changes)
        return {}

    def tag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        if params.get("Tags") is None:
            raise missing("Tags")
        tags = qs.check_tags(params["Tags"])
        self.queues.update(
            meta.application, meta.name, attributes_set=qs.tag_attributes(meta.attributes, tags)
        )
        return {}

    def untag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        keys = params.get("TagKeys")
        if keys is None:
            raise missing("TagKeys")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise invalid("TagKeys must be a list of tag keys.")
        self.queues.update(
            meta.application, meta.name, attributes_removed=[qs.TAG_PREFIX + k for k in keys]
        )
        return {}

    def list_queue_tags(self, caller: Caller, params: dict) -> dict:
        tags = qs.tags_of(self._queue(caller, params))
        return {"Tags": tags} if tags else {}

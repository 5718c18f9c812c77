"""The SQS actions on a queue's attributes and tags.

Attributes are parsed and worded by :mod:`queuey.sqs.queues`; a change is
stored through the core's queue lifecycle (:meth:`queuey.core.queues.Queues.update`),
which keeps this node's metadata cache right.
"""

from __future__ import annotations

from collections.abc import Mapping

from queuey.core.queues import Queues
from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.sqs import attributes as qa
from queuey.sqs import queues as qs
from queuey.sqs.caller import SUBSCRIPTION, Actions, Caller
from queuey.sqs.errors import missing


def check_dead_letter_target(
    queues: Queues, caller: Caller, source: str, fifo: bool, target: str, given: Mapping
) -> None:
    """A ``RedrivePolicy``'s target exists, is of the source's type, is not the
    source, and its ``RedriveAllowPolicy`` allows the source (``given``: the
    attributes as sent, whose policy text SQS quotes)."""
    text = str(given.get("RedrivePolicy", ""))
    try:
        dead = queues.fresh(caller.application.name, target)
    except QueueNotFound:
        raise qa.invalid_redrive_policy(text, "Dead letter target does not exist.") from None
    if dead.fifo != fifo:
        raise qa.invalid_redrive_policy(
            text,
            "Dead-letter target must be of the same type (standard or FIFO) as the source queue.",
        )
    if dead.name == source:
        raise qa.invalid_redrive_policy(text, "A queue cannot be its own dead-letter queue.")
    if not qa.redrive_allowed(dead, source, caller.place):
        raise qa.invalid_redrive_policy(
            text, "Dead-letter target's RedriveAllowPolicy does not allow this source queue."
        )


class AttributeActions(Actions):
    """GetQueueAttributes, SetQueueAttributes, TagQueue, UntagQueue, ListQueueTags."""

    def get_queue_attributes(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        names = qa.check_attribute_names(params.get("AttributeNames"))
        counts: dict[str, str] = {}
        if "All" in names or names & set(qa.COUNTS):
            counts = self._counts(meta)
        values = qa.attribute_values(meta, names, caller.place, self.limits, counts)
        return {"Attributes": values} if values else {}

    def _counts(self, meta: QueueMeta) -> dict[str, str]:
        stats = self.work.stats(meta)
        for sub in stats.subscriptions:
            if sub.subscription == SUBSCRIPTION:
                available, in_flight, delayed = sub.available, sub.in_flight, sub.delayed
                break
        else:  # never received from: every stored message is new
            available, in_flight, delayed = stats.messages, 0, 0
        return dict(zip(qa.COUNTS, map(str, (available, in_flight, delayed)), strict=True))

    def set_queue_attributes(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        changes = qa.attribute_changes(
            params["Attributes"],
            meta,
            fifo=meta.fifo,
            place=caller.place,
            limits=self.limits,
            now_micros=self.clock.now_micros(),
        )
        target = changes.get("dead_letter_queue")
        if target:
            check_dead_letter_target(
                self.queues, caller, meta.name, meta.fifo, target, params["Attributes"]
            )
        if "dead_letter_queue" in changes and target is None:
            del changes["dead_letter_queue"]  # max_attempts 0 turns dead-lettering off
        self.queues.update(meta.application, meta.name, **changes)
        return {}

    def tag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        if not params.get("Tags"):
            raise missing("Tags")
        tags = qs.check_tags(params["Tags"])
        self.queues.update(
            meta.application, meta.name, attributes_set=qs.tag_attributes(meta.attributes, tags)
        )
        return {}

    def untag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        keys = params.get("TagKeys")
        if not keys:
            raise missing("TagKeys")
        self.queues.update(
            meta.application, meta.name, attributes_removed=[qs.TAG_PREFIX + k for k in keys]
        )
        return {}

    def list_queue_tags(self, caller: Caller, params: dict) -> dict:
        tags = qs.tags_of(self._queue(caller, params))
        return {"Tags": tags} if tags else {}

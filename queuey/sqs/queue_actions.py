"""The SQS actions on queues: create, find, list, purge, delete, and move
messages back from a dead-letter queue (:mod:`queuey.sqs.movetasks`).

Queues are made and dropped through the core's queue lifecycle
(:class:`queuey.core.queues.Queues`): the application's queue limit and this
node's metadata cache are kept there, for every door alike.

A standard queue made here is a fair queue (:mod:`queuey.core.fairness`),
because Amazon SQS serves a standard queue's message groups fairly without
a setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuey.errors import QueueExists, QueueNotFound
from queuey.model import QueueMeta
from queuey.model.flow import queue_key
from queuey.sqs import attributes as qa
from queuey.sqs import inputs
from queuey.sqs import queues as qs
from queuey.sqs.attribute_actions import check_dead_letter_target
from queuey.sqs.caller import SCAN, Actions, Caller
from queuey.sqs.errors import SQSError, invalid
from queuey.sqs.movetasks import MoveTasks


class QueueActions(Actions):
    """CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
    ListDeadLetterSourceQueues and the message move tasks."""

    #: The message move tasks this process runs and answers for.
    moves: MoveTasks

    def create_queue(self, caller: Caller, params: dict) -> dict:
        given = params.get("Attributes") or {}
        flag = given.get("FifoQueue")
        fifo = isinstance(flag, str) and flag.lower() == "true"
        name = caller.place.stored(qs.check_name(params["QueueName"], fifo))
        app = caller.application.name
        tags = qs.check_tags(params.get("tags") or {})
        now = self.clock.now_micros()
        # Values are checked first, as SQS does: a bad one is refused as such,
        # whether or not the queue exists.
        changes = qa.attribute_changes(
            given, None, fifo=fifo, place=caller.place, limits=self.limits, now_micros=now
        )
        try:
            return self._existing(caller, self.queues.fresh(app, name), given)
        except QueueNotFound:
            pass
        if changes.get("dead_letter_queue"):
            check_dead_letter_target(
                self.queues, caller, name, fifo, changes["dead_letter_queue"], given
            )
        attributes = changes.pop("attributes_set")
        attributes.update(qs.tag_attributes(attributes, tags))
        if not fifo:
            # As Amazon SQS, unasked: a standard queue serves its message
            # groups fairly (a FIFO queue keeps each group's strict order).
            attributes[queue_key("fair")] = "1"
        meta = QueueMeta(
            application=app,
            name=name,
            partitions=(
                self.settings.sqs_fifo_partitions if fifo else self.settings.sqs_partitions
            ),
            ttl=changes.get("ttl", self.limits.clamp_ttl(qs.DEFAULT_RETENTION)),
            type="private",
            created=now,
            visibility_timeout=changes.get("visibility_timeout", 30),
            max_attempts=changes.get("max_attempts", 0),
            dead_letter_queue=changes.get("dead_letter_queue"),
            delay=changes.get("delay", 0),
            fifo=fifo,
            attributes=attributes,
        )
        try:
            self.queues.create(meta)
        except QueueExists:  # made meanwhile by another call
            return self._existing(caller, self.queues.fresh(app, name), given)
        return {"QueueUrl": caller.place.url(name)}

    def _existing(self, caller: Caller, meta: QueueMeta, given: Mapping) -> dict:
        """CreateQueue of a queue that exists: its URL when every attribute given
        has the value the queue has (attributes not given are not compared)."""
        name = qa.differing_attribute(meta, given, caller.place, self.limits)
        if name is not None:
            raise SQSError(
                "QueueNameExists",
                "A queue already exists with the same name and a different value for "
                f"attribute {name}",
            )
        return {"QueueUrl": caller.place.url(meta.name)}

    def get_queue_url(self, caller: Caller, params: dict) -> dict:
        name, owner = params["QueueName"], params.get("QueueOwnerAWSAccountId")
        # Another account's queue when its policy allows GetQueueUrl (Actions._named);
        # caller.place then shows the owner's account id.
        meta = self._named(caller, caller.place.stored(name), owner)
        return {"QueueUrl": caller.place.url(meta.name)}

    def list_queues(self, caller: Caller, params: dict) -> dict:
        prefix = params.get("QueueNamePrefix") or ""
        if len(prefix) > 80:
            raise invalid("QueueNamePrefix must be at most 80 characters.")
        limit = inputs.integer(params, "MaxResults", 1, 1000)
        after = inputs.read_token(params.get("NextToken"))
        if not qs.NAME_PREFIX.match(prefix):
            return {}  # no queue name starts with a character a name cannot hold
        stored_prefix = caller.place.stored(prefix)
        if after is None and stored_prefix:
            # Just below every stored name that starts with the prefix (names are ASCII).
            after = stored_prefix[:-1] + chr(ord(stored_prefix[-1]) - 1) + "\x7f"
        wanted = limit or 1000
        names: list[str] = []
        more = False
        for _ in range(10):  # pages of other regions' queues are skipped, up to a bound
            found = self.storage.list_queues(caller.application.name, limit=SCAN, after=after)
            for meta in found:
                if not meta.name.startswith(stored_prefix):
                    if meta.name > stored_prefix:
                        break  # past every name with the prefix
                    continue
                if caller.place.local(meta.name) is None:
                    continue  # another region's queue
                if len(names) == wanted:
                    more = True
                    break
                names.append(meta.name)
            else:
                if len(found) == SCAN:
                    after = found[-1].name
                    continue
            break
        result: dict[str, Any] = {}
        if names:
            result["QueueUrls"] = [caller.place.url(n) for n in names]
        if limit and more:
            result["NextToken"] = inputs.make_token(names[-1])
        return result

    def delete_queue(self, caller: Caller, params: dict) -> dict:
        self.queues.delete(self._queue(caller, params))
        return {}

    def purge_queue(self, caller: Caller, params: dict) -> dict:
        self.queues.purge(self._queue(caller, params))
        return {}

    def list_dead_letter_source_queues(self, caller: Caller, params: dict) -> dict:
        dead = self._queue(caller, params)
        limit = inputs.integer(params, "MaxResults", 1, 1000)
        after = inputs.read_token(params.get("NextToken"))
        scanned = self.storage.list_queues(dead.application, limit=SCAN, after=after)
        urls: list[str] = []
        last = None
        for meta in scanned:
            last = meta.name
            if meta.max_attempts and meta.dead_letter_name == dead.name:
                urls.append(caller.place.url(meta.name))
                if limit and len(urls) >= limit:
                    break
        result: dict[str, Any] = {"queueUrls": urls}
        full = limit is not None and len(urls) >= limit
        if (full or len(scanned) == SCAN) and last is not None and limit:
            result["NextToken"] = inputs.make_token(last)
        return result

    def start_message_move_task(self, caller: Caller, params: dict) -> dict:
        source = self._by_arn(caller, params, "SourceArn")
        destination = None
        if params.get("DestinationArn") is not None:
            destination = self._by_arn(caller, params, "DestinationArn")
        rate = inputs.integer(params, "MaxNumberOfMessagesPerSecond", 1, 500)
        if destination is None and not any(
            q.max_attempts and q.dead_letter_name == source.name for q in self._every_queue(caller)
        ):
            raise invalid(
                "Source queue must be configured as a Dead Letter Queue, or a DestinationArn "
                "must be given."
            )
        handle = self.moves.start(source, destination, rate, self._every_queue(caller))
        return {"TaskHandle": handle}

    def _by_arn(self, caller: Caller, params: dict, member: str) -> QueueMeta:
        """The caller's queue the ARN in ``member`` names."""
        return self._named(caller, caller.place.name_from_arn(params.get(member), member))

    def list_message_move_tasks(self, caller: Caller, params: dict) -> dict:
        source = self._by_arn(caller, params, "SourceArn")
        limit = inputs.integer(params, "MaxResults", 1, 10) or 1
        return {"Results": self.moves.list(caller.place, source)[:limit]}

    def cancel_message_move_task(self, caller: Caller, params: dict) -> dict:
        moved = self.moves.cancel(caller.application.name, params["TaskHandle"])
        return {"ApproximateNumberOfMessagesMoved": moved}

"""The SQS actions, on Queuey's storage and work-queue service.

Every action takes its input and answers its output as the JSON protocol
shapes them (member names of the SQS API); :mod:`.protocol` translates for the
query protocol. An SQS queue's consumers share one subscription,
:data:`SUBSCRIPTION`; receipt handles are work-queue receipts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuey.applications import Application
from queuey.clock import Clock
from queuey.core.longpoll import LongPolls
from queuey.core.workqueues import WorkQueues
from queuey.errors import QueueExists, QueueNotFound
from queuey.model import Delivery, NewMessage, QueueMeta
from queuey.settings import Settings
from queuey.sqs import inputs
from queuey.sqs import messages as msgs
from queuey.sqs import queues as qs
from queuey.sqs.errors import SQSError, batch_failure, invalid, missing
from queuey.sqs.movetasks import MoveTasks
from queuey.sqs.sending import new_message
from queuey.storage import Storage

#: The subscription SQS consumers share (DESIGN.md: "one default subscription").
SUBSCRIPTION = "default"
#: Queues one ListQueues / ListDeadLetterSourceQueues call looks at, at most.
SCAN = 1000


@dataclass(frozen=True)
class Caller:
    application: Application
    place: qs.Place


class SQSService:
    """Runs one action for one caller. Shared by every request of a process."""

    def __init__(
        self,
        storage: Storage,
        workqueues: WorkQueues,
        clock: Clock,
        settings: Settings,
        long_polls: LongPolls,
        on_received: Callable[[int], None] = lambda n: None,
    ) -> None:
        self.storage = storage
        self.work = workqueues
        self.clock = clock
        self.settings = settings
        self.long_polls = long_polls
        self.limits = qs.Limits(settings.max_message_size, settings.max_ttl)
        self.on_received = on_received
        self.moves = MoveTasks(storage, workqueues, clock)
        self.handlers: dict[str, Callable[[Caller, dict], dict]] = {
            name: getattr(self, _snake(name)) for name in ACTIONS
        }

    def call(self, action: str, caller: Caller, params: dict) -> dict:
        handler = self.handlers.get(action)
        if handler is None:
            raise SQSError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        return handler(caller, params)

    # -- helpers --------------------------------------------------------------
    def _queue(self, caller: Caller, params: Mapping) -> QueueMeta:
        url = params.get("QueueUrl")
        if url is None:
            raise missing("QueueUrl")
        return self._named(caller, caller.place.name_from_url(url))

    def _named(self, caller: Caller, name: str) -> QueueMeta:
        try:
            return self.work.get_queue(caller.application.name, name)
        except QueueNotFound:
            raise qs.no_such_queue() from None

    def _update(self, meta: QueueMeta, **changes: Any) -> QueueMeta:
        with self.work.cache.changing(meta.application, meta.name):
            return self.storage.update_queue(meta.application, meta.name, **changes)

    def _check_dead_letter_target(self, caller: Caller, source: str, fifo: bool, target: str):
        try:
            dead = self.storage.get_queue(caller.application.name, target)
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

    # -- queues ---------------------------------------------------------------
    def create_queue(self, caller: Caller, params: dict) -> dict:
        if params.get("QueueName") is None:
            raise missing("QueueName")
        name = qs.check_name(params["QueueName"])
        app = caller.application.name
        fifo = name.endswith(".fifo")
        given = params.get("Attributes") or {}
        if isinstance(given, Mapping) and given.get("FifoQueue", "false").lower() == "true":
            if not fifo:
                raise invalid(
                    "The name of a FIFO queue can only include alphanumeric "
                    "characters, hyphens, or underscores, must end with .fifo suffix."
                )
        tags = qs.check_tags(params.get("tags") or {})
        now = self.clock.now_micros()
        try:
            return self._existing(caller, self.storage.get_queue(app, name), given)
        except QueueNotFound:
            pass
        changes = qs.attribute_changes(
            given, None, fifo=fifo, place=caller.place, limits=self.limits, now_micros=now
        )
        if changes.get("dead_letter_queue"):
            self._check_dead_letter_target(caller, name, fifo, changes["dead_letter_queue"])
        attributes = changes.pop("attributes_set")
        attributes.update(qs.tag_attributes(attributes, tags))
        meta = QueueMeta(
            application=app,
            name=name,
            partitions=(
                self.settings.sqs_fifo_partitions if fifo else self.settings.sqs_partitions
            ),
            ttl=changes.get("ttl", min(qs.DEFAULT_RETENTION, self.settings.max_ttl)),
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
            self.work.create_queue(meta)
        except QueueExists:  # made meanwhile by another call
            return self._existing(caller, self.storage.get_queue(app, name), given)
        return {"QueueUrl": caller.place.url(name)}

    def _existing(self, caller: Caller, meta: QueueMeta, given: Mapping) -> dict:
        """CreateQueue of a queue that exists: fine when nothing given differs."""
        current = qs.attribute_values(meta, {"All"}, caller.place, self.limits, {})
        current.setdefault("FifoQueue", "false")
        for name, value in given.items() if isinstance(given, Mapping) else ():
            if name in current and str(current[name]).lower() != str(value).lower():
                raise SQSError(
                    "QueueNameExists",
                    f"A queue already exists with the same name and a different value for "
                    f"attribute {name}",
                )
        return {"QueueUrl": caller.place.url(meta.name)}

    def get_queue_url(self, caller: Caller, params: dict) -> dict:
        name = params.get("QueueName")
        if name is None:
            raise missing("QueueName")
        owner = params.get("QueueOwnerAWSAccountId")
        if owner is not None and owner != caller.place.account_id:
            raise qs.no_such_queue()
        if not isinstance(name, str):
            raise qs.no_such_queue()
        meta = self._named(caller, name)
        return {"QueueUrl": caller.place.url(meta.name)}

    def list_queues(self, caller: Caller, params: dict) -> dict:
        prefix = params.get("QueueNamePrefix") or ""
        if not isinstance(prefix, str) or len(prefix) > 80:
            raise invalid("QueueNamePrefix must be at most 80 characters.")
        limit = inputs.integer(params, "MaxResults", 1, 1000)
        after = inputs.read_token(params.get("NextToken"))
        if not qs.NAME_PREFIX.match(prefix):
            return {}  # no queue name starts with a character a name cannot hold
        if after is None and prefix:
            # Just below every name that starts with the prefix (names are ASCII).
            after = prefix[:-1] + chr(ord(prefix[-1]) - 1) + "\x7f"
        wanted = limit or 1000
        found = self.storage.list_queues(caller.application.name, limit=wanted, after=after)
        names = [q.name for q in found if q.name.startswith(prefix)]
        result: dict[str, Any] = {}
        if names:
            result["QueueUrls"] = [caller.place.url(n) for n in names]
        more = len(found) == wanted and len(names) == len(found)
        if limit and more:
            result["NextToken"] = inputs.make_token(names[-1])
        return result

    def delete_queue(self, caller: Caller, params: dict) -> dict:
        self.work.delete_queue(self._queue(caller, params))
        return {}

    def purge_queue(self, caller: Caller, params: dict) -> dict:
        self.work.purge_queue(self._queue(caller, params))
        return {}

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
            self._check_dead_letter_target(caller, meta.name, meta.fifo, target)
        if "dead_letter_queue" in changes and target is None:
            del changes["dead_letter_queue"]  # max_attempts 0 turns dead-lettering off
        self._update(meta, **changes)
        return {}

    def tag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        if params.get("Tags") is None:
            raise missing("Tags")
        tags = qs.check_tags(params["Tags"])
        self._update(meta, attributes_set=qs.tag_attributes(meta.attributes, tags))
        return {}

    def untag_queue(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        keys = params.get("TagKeys")
        if keys is None:
            raise missing("TagKeys")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise invalid("TagKeys must be a list of tag keys.")
        self._update(meta, attributes_removed=[qs.TAG_PREFIX + k for k in keys])
        return {}

    def list_queue_tags(self, caller: Caller, params: dict) -> dict:
        tags = qs.tags_of(self._queue(caller, params))
        return {"Tags": tags} if tags else {}

    def list_dead_letter_source_queues(self, caller: Caller, params: dict) -> dict:
        dead = self._queue(caller, params)
        limit = inputs.integer(params, "MaxResults", 1, 1000)
        after = inputs.read_token(params.get("NextToken"))
        scanned = self.storage.list_queues(caller.application.name, limit=SCAN, after=after)
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

    # -- sending --------------------------------------------------------------
    def _store(self, meta: QueueMeta, batch: Sequence[NewMessage], replies: list[dict]) -> None:
        stored = self.work.post(meta, batch)
        for message, reply in zip(stored, replies, strict=True):
            reply["MessageId"] = str(message.id)
            if meta.fifo:
                reply["SequenceNumber"] = msgs.sequence_number(message)

    def send_message(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        message, reply, _ = new_message(meta, params, self.limits, self.clock.now_micros())
        self._store(meta, [message], [reply])
        return reply

    def send_message_batch(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        entries = inputs.entries(params)
        good: list[NewMessage] = []
        replies: list[dict] = []
        failed: list[dict] = []
        total = 0
        now = self.clock.now_micros()
        for entry in entries:
            try:
                message, reply, size = new_message(meta, entry, self.limits, now)
            except SQSError as exc:
                failed.append(batch_failure(entry["Id"], exc))
                continue
            total += size
            reply["Id"] = entry["Id"]
            good.append(message)
            replies.append(reply)
        limit = qs.max_message_size(meta, self.limits)
        if total > limit:
            raise SQSError(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes.",
            )
        if good:
            self._store(meta, good, replies)
        return {"Successful": replies, "Failed": failed}

    # -- receiving ------------------------------------------------------------
    def receive_message(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        limit = inputs.integer(params, "MaxNumberOfMessages", 1, 10) or 1
        visibility = inputs.integer(params, "VisibilityTimeout", 0, 43200)
        wait = inputs.integer(params, "WaitTimeSeconds", 0, 20)
        if wait is None:
            wait = qs.receive_wait(meta)
        wanted = set(inputs.names(params, "AttributeNames")) | set(
            inputs.names(params, "MessageSystemAttributeNames")
        )
        attribute_names = inputs.names(params, "MessageAttributeNames")

        def attempt():
            return self.work.reserve(meta, SUBSCRIPTION, limit=limit, visibility_timeout=visibility)

        reservation = self.long_polls.wait_for(
            meta.application, meta.name, attempt, lambda r: bool(r.deliveries), wait
        )
        self.on_received(len(reservation.deliveries))
        out = [
            self._received(caller, meta, d, wanted, attribute_names) for d in reservation.deliveries
        ]
        return {"Messages": out} if out else {}

    def _received(
        self,
        caller: Caller,
        meta: QueueMeta,
        delivery: Delivery,
        wanted: set[str],
        attribute_names: list[str],
    ) -> dict:
        message = delivery.message
        body = msgs.decode_body(message.body)
        out: dict[str, Any] = {
            "MessageId": str(message.id),
            "ReceiptHandle": delivery.receipt,
            "MD5OfBody": msgs.md5_hex(body.encode("utf-8")),
            "Body": body,
        }
        if wanted:
            values = self._system_values(caller, meta, delivery)
            chosen = values if "All" in wanted else {k: v for k, v in values.items() if k in wanted}
            if chosen:
                out["Attributes"] = chosen
        selected = msgs.select_attributes(msgs.message_attributes(message), attribute_names)
        if selected:
            out["MessageAttributes"] = {name: a.to_api() for name, a in selected.items()}
            out["MD5OfMessageAttributes"] = msgs.md5_of_attributes(selected)
        return out

    def _system_values(self, caller: Caller, meta: QueueMeta, delivery: Delivery) -> dict:
        message = delivery.message
        stored = message.attributes or {}
        first = delivery.first_delivered or self.clock.now_micros()
        values = {
            "SenderId": caller.application.name,
            "SentTimestamp": str(msgs.sent_millis(message)),
            "ApproximateReceiveCount": str(delivery.attempts),
            "ApproximateFirstReceiveTimestamp": str(first // 1000),
        }
        if meta.fifo:
            values["SequenceNumber"] = msgs.sequence_number(message)
        for name, key in (
            ("MessageGroupId", "sqs.group"),
            ("MessageDeduplicationId", "sqs.dedup"),
            ("AWSTraceHeader", "sqs.trace"),
        ):
            if key in stored:
                values[name] = stored[key]
        if "source_queue" in stored and "source_message_id" in stored:
            values["DeadLetterQueueSourceArn"] = caller.place.arn(stored["source_queue"])
        return values

    # -- settling -------------------------------------------------------------
    def _settle(
        self, meta: QueueMeta, receipts: list[str], visibility: int | None
    ) -> dict[str, str]:
        """Ack (``visibility`` None), release (0) or extend the leases."""
        if visibility is None:
            return dict(self.work.ack(meta, SUBSCRIPTION, receipts))
        if visibility == 0:
            return dict(self.work.release(meta, SUBSCRIPTION, receipts).statuses)
        return dict(self.work.extend(meta, SUBSCRIPTION, receipts, visibility))

    def _settle_error(self, meta: QueueMeta, receipt: str, status: str, deleting: bool):
        """The error for a receipt that did not work, or None (SQS answers success)."""
        if status == "acked":
            return None
        if status == "unknown":
            return SQSError(
                "ReceiptHandleIsInvalid",
                f'The input receipt handle "{receipt[:200]}" is not a valid receipt handle.',
            )
        if deleting:
            # SQS: a standard queue accepts a stale handle (the message stays);
            # a FIFO queue refuses it.
            if not meta.fifo:
                return None
            return invalid(
                f"Value {receipt[:200]} for parameter ReceiptHandle is invalid. Reason: The "
                "receipt handle has expired."
            )
        return SQSError(
            "MessageNotInflight",
            "Message does not exist or is not available for visibility timeout change.",
        )

    def delete_message(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        receipt = inputs.receipt(params)
        status = self._settle(meta, [receipt], None)[receipt]
        error = self._settle_error(meta, receipt, status, True)
        if error:
            raise error
        return {}

    def change_message_visibility(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        receipt = inputs.receipt(params)
        visibility = inputs.integer(params, "VisibilityTimeout", 0, 43200)
        if visibility is None:
            raise missing("VisibilityTimeout")
        status = self._settle(meta, [receipt], visibility)[receipt]
        error = self._settle_error(meta, receipt, status, False)
        if error:
            raise error
        return {}

    def delete_message_batch(self, caller: Caller, params: dict) -> dict:
        return self._settle_batch(caller, params, deleting=True)

    def change_message_visibility_batch(self, caller: Caller, params: dict) -> dict:
        return self._settle_batch(caller, params, deleting=False)

    def _settle_batch(self, caller: Caller, params: dict, deleting: bool) -> dict:
        meta = self._queue(caller, params)
        entries = inputs.entries(params)
        groups: dict[int | None, list[tuple[str, str]]] = {}
        failed: list[dict] = []
        for entry in entries:
            try:
                receipt = inputs.receipt(entry)
                visibility = None
                if not deleting:
                    visibility = inputs.integer(entry, "VisibilityTimeout", 0, 43200)
                    if visibility is None:
                        raise missing("VisibilityTimeout")
            except SQSError as exc:
                failed.append(batch_failure(entry["Id"], exc))
                continue
            groups.setdefault(visibility, []).append((entry["Id"], receipt))
        succeeded: list[dict] = []
        for visibility, items in groups.items():
            statuses = self._settle(meta, list(dict.fromkeys(r for _, r in items)), visibility)
            for entry_id, receipt in items:
                error = self._settle_error(meta, receipt, statuses[receipt], deleting)
                if error:
                    failed.append(batch_failure(entry_id, error))
                else:
                    succeeded.append({"Id": entry_id})
        return {"Successful": succeeded, "Failed": failed}

    # -- message move tasks ---------------------------------------------------
    def start_message_move_task(self, caller: Caller, params: dict) -> dict:
        source = self._named(
            caller, caller.place.name_from_arn(params.get("SourceArn"), "SourceArn")
        )
        destination = None
        if params.get("DestinationArn") is not None:
            name = caller.place.name_from_arn(params["DestinationArn"], "DestinationArn")
            destination = self._named(caller, name)
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

    def _every_queue(self, caller: Caller) -> Iterator[QueueMeta]:
        """The application's queues, a page at a time (at most 100 pages)."""
        after = None
        for _ in range(100):
            page = self.storage.list_queues(caller.application.name, limit=SCAN, after=after)
            yield from page
            if len(page) < SCAN:
                return
            after = page[-1].name

    def list_message_move_tasks(self, caller: Caller, params: dict) -> dict:
        name = caller.place.name_from_arn(params.get("SourceArn"), "SourceArn")
        source = self._named(caller, name)
        limit = inputs.integer(params, "MaxResults", 1, 10) or 1
        return {"Results": self.moves.list(caller.place, source)[:limit]}

    def cancel_message_move_task(self, caller: Caller, params: dict) -> dict:
        handle = params.get("TaskHandle")
        if handle is None:
            raise missing("TaskHandle")
        moved = self.moves.cancel(caller.application.name, handle)
        return {"ApproximateNumberOfMessagesMoved": moved}

    # -- permissions ----------------------------------------------------------
    def add_permission(self, caller: Caller, params: dict) -> dict:
        raise SQSError(
            "UnsupportedOperation",
            "Queuey has no other accounts to share a queue with: access is per application.",
        )

    remove_permission = add_permission


ACTIONS = (
    "CreateQueue",
    "GetQueueUrl",
    "ListQueues",
    "DeleteQueue",
    "PurgeQueue",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "TagQueue",
    "UntagQueue",
    "ListQueueTags",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "ListDeadLetterSourceQueues",
    "StartMessageMoveTask",
    "ListMessageMoveTasks",
    "CancelMessageMoveTask",
    "AddPermission",
    "RemovePermission",
)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()

"""The SQS actions on messages: send, receive, delete, change visibility.

A send entry becomes a message by the core's rules (:mod:`queuey.sqs.sending`)
and is stored by the core's one post
(:meth:`queuey.core.workqueues.WorkQueues.post`: counted, long polls woken); a
receive is a work-queue reservation of :data:`~queuey.sqs.caller.SUBSCRIPTION`,
long-polled like the REST API's; receipt handles are work-queue receipts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queuey import ids, tracing
from queuey.model import Delivery, NewMessage, QueueMeta
from queuey.sqs import attributes as qa
from queuey.sqs import handles, inputs
from queuey.sqs import messages as msgs
from queuey.sqs.caller import SUBSCRIPTION, Actions, Caller
from queuey.sqs.errors import SQSError, batch_failure, invalid, missing
from queuey.sqs.sending import check_batch_length, check_fifo_entry, new_message
from queuey.tracing import TRACEPARENT, to_xray


class MessageActions(Actions):
    """SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
    ChangeMessageVisibility(Batch)."""

    def _store(self, meta: QueueMeta, batch: Sequence[NewMessage], replies: list[dict]) -> None:
        stored = self.work.post(meta, batch)
        for message, reply in zip(stored, replies, strict=True):
            reply["MessageId"] = str(message.id)
            if meta.fifo:
                reply["SequenceNumber"] = msgs.sequence_number(message)

    def _sender(self, caller: Caller, meta: QueueMeta) -> str | None:
        """Who sends, kept with the message when it is not the queue's owner."""
        name = caller.application.name
        return name if name != meta.application else None

    def send_message(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        message, reply, _ = new_message(
            meta, params, self.limits, self.clock.now_micros(), self._sender(caller, meta)
        )
        self._store(meta, [message], [reply])
        return reply

    def send_message_batch(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        entries = inputs.entries(params, "SendMessageBatch")
        if meta.fifo:
            for entry in entries:
                check_fifo_entry(meta, entry, batch=True)
        # As SQS: the whole batch's length before any entry's own checks.
        check_batch_length(entries, self.limits.max_message_size)
        good: list[NewMessage] = []
        replies: list[dict] = []
        failed: list[dict] = []
        now = self.clock.now_micros()
        sender = self._sender(caller, meta)
        for entry in entries:
            try:
                message, reply, _ = new_message(meta, entry, self.limits, now, sender)
            except SQSError as exc:
                failed.append(batch_failure(entry["Id"], exc))
                continue
            reply["Id"] = entry["Id"]
            good.append(message)
            replies.append(reply)
        if good:
            self._store(meta, good, replies)
        return {"Successful": replies, "Failed": failed}

    def receive_message(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        limit = inputs.integer(params, "MaxNumberOfMessages", 1, 10) or 1
        visibility = inputs.integer(
            params, "VisibilityTimeout", 0, 43200, reason="Must be >= 0 and <= 43200, if provided."
        )
        wait = inputs.integer(
            params, "WaitTimeSeconds", 0, 20, reason="Must be >= 0 and <= 20, if provided."
        )
        if wait is None:
            wait = qa.receive_wait(meta)
        wanted = set(inputs.names(params, "AttributeNames")) | set(
            inputs.names(params, "MessageSystemAttributeNames")
        )
        attribute_names = inputs.names(params, "MessageAttributeNames")

        def attempt():
            return self.work.reserve(meta, SUBSCRIPTION, limit=limit, visibility_timeout=visibility)

        reservation = self.services.long_polls.wait_for(
            meta.application,
            meta.name,
            attempt,
            lambda r: bool(r.deliveries),
            wait,
            waiter=caller.application.name,  # a shared queue's poll waits on the caller's slots
        )
        self.services.metrics.messages_reserved(len(reservation.deliveries))
        if reservation.deliveries and tracing.enabled():
            tracing.received(
                "queuey sqs receive",
                [d.message.attributes for d in reservation.deliveries],
                **{"messaging.destination.name": meta.name},
            )
        received = self.clock.now_micros() // ids.MICROS
        out = [
            self._received(caller, meta, d, wanted, attribute_names, received)
            for d in reservation.deliveries
        ]
        return {"Messages": out} if out else {}

    def _received(
        self,
        caller: Caller,
        meta: QueueMeta,
        delivery: Delivery,
        wanted: set[str],
        attribute_names: list[str],
        received: int,
    ) -> dict:
        message = delivery.message
        body = msgs.decode_body(message.body)
        out: dict[str, Any] = {
            "MessageId": str(message.id),
            "ReceiptHandle": handles.make(delivery.receipt, received),
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
            "SenderId": stored.get("sqs.sender", meta.application),
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
        if "AWSTraceHeader" not in values and (xray := to_xray(stored.get(TRACEPARENT))):
            values["AWSTraceHeader"] = xray  # a native producer's context, in X-Ray's words
        if "source_queue" in stored and "source_message_id" in stored:
            values["DeadLetterQueueSourceArn"] = caller.place.arn(stored["source_queue"])
        return values

    def _settle(
        self, meta: QueueMeta, receipts: list[str], visibility: int | None
    ) -> dict[str, str]:
        """Ack (``visibility`` None), release (0) or extend the leases."""
        if visibility is None:
            return dict(self.work.ack(meta, SUBSCRIPTION, receipts))
        if visibility == 0:
            return dict(self.work.release(meta, SUBSCRIPTION, receipts).statuses)
        return dict(self.work.extend(meta, SUBSCRIPTION, receipts, visibility))

    def _settle_error(self, meta: QueueMeta, handle: str, status: str, deleting: bool):
        """The error for a receipt handle that did not work, or None (SQS answers success)."""
        if status == "acked":
            return None
        if status == "unknown":
            return handles.invalid(handle)
        if deleting:
            # SQS: a standard queue accepts a stale handle (the message stays);
            # a FIFO queue refuses it.
            if not meta.fifo:
                return None
            return invalid(
                f"Value {handle[:1024]} for parameter ReceiptHandle is invalid. Reason: The "
                "receipt handle has expired."
            )
        return invalid(
            f"Value {handle[:1024]} for parameter ReceiptHandle is invalid. Reason: Message "
            "does not exist or is not available for visibility timeout change."
        )

    def delete_message(self, caller: Caller, params: dict) -> dict:
        return self._settle_one(caller, params, deleting=True)

    def _settle_one(self, caller: Caller, params: dict, deleting: bool) -> dict:
        """DeleteMessage or ChangeMessageVisibility: one receipt handle settled."""
        meta = self._queue(caller, params)
        handle, receipt, visibility = self._receipt(params, deleting)
        status = self._settle(meta, [receipt], visibility)[receipt]
        error = self._settle_error(meta, handle, status, deleting)
        if error:
            raise error
        return {}

    def _receipt(self, params: dict, deleting: bool) -> tuple[str, str, int | None]:
        """A DeleteMessage or ChangeMessageVisibility entry's handle, receipt and
        timeout (None: delete): at most 12 hours counted from the receive that
        gave the handle, as SQS counts them."""
        handle = inputs.receipt(params)
        receipt, received = handles.read(handle)
        if deleting:
            return handle, receipt, None
        visibility = inputs.integer(params, "VisibilityTimeout", 0, handles.MAX_VISIBILITY)
        if visibility is None:
            raise missing("VisibilityTimeout")
        now = self.clock.now_micros() // ids.MICROS
        if received is not None and now - received + visibility > handles.MAX_VISIBILITY:
            raise invalid(
                f"Value {visibility} for parameter VisibilityTimeout is invalid. Reason: Total "
                f"VisibilityTimeout for the message is beyond the limit "
                f"[{handles.MAX_VISIBILITY} seconds]"
            )
        return handle, receipt, visibility

    def change_message_visibility(self, caller: Caller, params: dict) -> dict:
        return self._settle_one(caller, params, deleting=False)

    def delete_message_batch(self, caller: Caller, params: dict) -> dict:
        return self._settle_batch(caller, params, deleting=True)

    def change_message_visibility_batch(self, caller: Caller, params: dict) -> dict:
        return self._settle_batch(caller, params, deleting=False)

    def _settle_batch(self, caller: Caller, params: dict, deleting: bool) -> dict:
        meta = self._queue(caller, params)
        entries = inputs.entries(
            params, "DeleteMessageBatch" if deleting else "ChangeMessageVisibilityBatch"
        )
        groups: dict[int | None, list[tuple[str, str, str]]] = {}
        failed: list[dict] = []
        for entry in entries:
            try:
                handle, receipt, visibility = self._receipt(entry, deleting)
            except SQSError as exc:
                failed.append(batch_failure(entry["Id"], exc))
                continue
            groups.setdefault(visibility, []).append((entry["Id"], handle, receipt))
        succeeded: list[dict] = []
        for visibility, items in groups.items():
            statuses = self._settle(meta, list(dict.fromkeys(r for *_, r in items)), visibility)
            for entry_id, handle, receipt in items:
                error = self._settle_error(meta, handle, statuses[receipt], deleting)
                if error:
                    failed.append(batch_failure(entry_id, error))
                else:
                    succeeded.append({"Id": entry_id})
        return {"Successful": succeeded, "Failed": failed}

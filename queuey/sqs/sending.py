"""SendMessage's entries as Queuey messages: an entry parsed, the SQS rules
(FIFO group and deduplication ids, DelaySeconds' range) checked, the message
built by the core's rules (:mod:`queuey.core.messages`: size, ttl, delay),
worded as SQS words them, before anything is stored; a batch's total length,
checked before any of its entries; and the digests a client verifies in the
reply."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from queuey.core.messages import InvalidMessage, MessageRules
from queuey.model import NewMessage, QueueMeta
from queuey.placement import partition_for_key, random_partition
from queuey.sqs import attributes as qa
from queuey.sqs import inputs
from queuey.sqs import messages as msgs
from queuey.sqs.errors import SQSError, invalid, missing


def check_fifo_entry(meta: QueueMeta, entry: Mapping, batch: bool) -> None:
    """A FIFO send names its group, and its deduplication id unless the queue
    derives it from the body; refused in SQS's words (in a batch, as SQS does,
    the whole request is refused)."""
    if entry.get("MessageGroupId") is None:
        error = missing("MessageGroupId")
        raise invalid(error.message) if batch else error
    if entry.get("MessageDeduplicationId") is None and not qa.content_dedup(meta):
        raise invalid(
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly"
        )


def entry_length(entry: Mapping) -> int:
    """What a SendMessageBatch entry counts toward the batch's total, read
    before any entry is checked: as a message's size counts (the body, and
    name + type + value of each message and system attribute, a Binary value
    decoded), with the parts a later check will refuse counted as they came
    (a BinaryValue that is not base64 by its text)."""
    total = _length(entry.get("MessageBody"))
    for key in ("MessageAttributes", "MessageSystemAttributes"):
        given = entry.get(key)
        if not isinstance(given, Mapping):
            continue
        for name, spec in given.items():
            total += _length(name)
            if not isinstance(spec, Mapping):
                continue
            total += _length(spec.get("DataType"))
            binary = spec.get("BinaryValue")
            if isinstance(binary, str):
                try:
                    total += len(base64.b64decode(binary, validate=True))
                except (binascii.Error, ValueError):
                    total += _length(binary)
            elif isinstance(binary, bytes):
                total += len(binary)
            else:
                total += _length(spec.get("StringValue"))
    return total


def _length(text: object) -> int:
    """UTF-8 bytes of ``text`` (lone surrogates counted as their 3 bytes), 0 if not text."""
    return len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else 0


def check_batch_length(entries: Sequence[Mapping], limit: int) -> None:
    """SQS's first check of a SendMessageBatch's entries as a whole: the sum of
    their lengths (:func:`entry_length`) is at most ``limit`` (the service's
    largest message, whatever the queue's MaximumMessageSize), or the whole
    request is refused with ``BatchRequestTooLong``, before any entry's own
    checks (an entry alone over the message size included)."""
    total = sum(entry_length(entry) for entry in entries)
    if total > limit:
        raise SQSError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes.",
        )


def new_message(
    meta: QueueMeta,
    entry: Mapping,
    rules: MessageRules,
    now_micros: int,
    sender: str | None = None,
) -> tuple[NewMessage, dict, int]:
    """One message to store, the reply fields known before storing, and its
    size; ``sender``: the application that sent it, when not the queue's own."""
    body = entry.get("MessageBody")
    if body is None or body == "":
        raise missing("MessageBody")
    msgs.check_text(body)
    attributes = msgs.parse_attributes(entry.get("MessageAttributes"))
    system = msgs.parse_attributes(entry.get("MessageSystemAttributes"), system=True)
    # Every part counts: the body, and name + type + value of each message
    # attribute and system attribute (an AWSTraceHeader is stored too).
    size = (
        len(body.encode("utf-8")) + msgs.attributes_size(attributes) + msgs.attributes_size(system)
    )
    limit = qa.max_message_size(meta, rules)
    try:
        rules.check_size(size, limit)
    except InvalidMessage:
        raise _too_long(limit) from None
    delay = inputs.integer(
        entry, "DelaySeconds", 0, 900, reason="DelaySeconds must be >= 0 and <= 900."
    )
    if delay and meta.fifo:
        raise invalid(
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
            "include parameter that is not valid for this queue type."
        )
    if meta.fifo:
        delay = None  # 0, which a FIFO queue takes as no per-message delay
    group = inputs.text_token(entry, "MessageGroupId")
    dedup = inputs.text_token(entry, "MessageDeduplicationId")
    if meta.fifo:
        check_fifo_entry(meta, entry, batch=False)
        if dedup is None:
            dedup = hashlib.sha256(body.encode("utf-8")).hexdigest()
    elif dedup is not None:
        raise invalid(
            f"Value {dedup} for parameter MessageDeduplicationId is invalid. Reason: The "
            "request includes a parameter that is not valid for this queue type."
        )
    dedup_id = dedup
    if dedup is not None and qa.dedup_per_group(meta):
        dedup_id = hashlib.sha256(f"{group}\x1f{dedup}".encode()).hexdigest()
    trace = system.get("AWSTraceHeader")
    delays = delay if delay is not None else meta.delay
    try:
        message = rules.build(
            meta,
            msgs.encode_body(body),
            (
                partition_for_key(group, meta.partitions)
                if group is not None
                else random_partition(meta.partitions)
            ),
            delay=delay,
            dedup_id=dedup_id,
            attributes=msgs.store_attributes(
                attributes,
                trace=trace.value if trace is not None else None,  # type: ignore[arg-type]
                group=group,
                dedup=dedup,
                sent_millis=now_micros // 1000 if delays else None,
                sender=sender,
            ),
            size=size,
            max_size=limit,
        )
    except InvalidMessage as exc:
        if exc.rule == "size":
            raise _too_long(limit) from None
        if exc.rule in ("delay", "queue_delay"):
            raise invalid(
                f"DelaySeconds ({delays}) is longer than the queue's MessageRetentionPeriod "
                f"({rules.ttl_of(meta)})."
            ) from None
        raise invalid(f"One or more parameters are invalid. Reason: {exc.field} {exc}.") from None
    reply: dict[str, Any] = {"MD5OfMessageBody": msgs.md5_hex(body.encode("utf-8"))}
    digest = msgs.md5_of_attributes(attributes)
    if digest:
        reply["MD5OfMessageAttributes"] = digest
    digest = msgs.md5_of_attributes(system)
    if digest:
        reply["MD5OfMessageSystemAttributes"] = digest
    return message, reply, size


def _too_long(limit: int) -> SQSError:
    return invalid(
        f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
    )

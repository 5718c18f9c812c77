"""SQS queue attributes on Queuey queues: what each is, how a given value is
checked and stored, and what GetQueueAttributes answers.

What SQS calls a queue attribute is a :class:`~queuey.model.QueueMeta` field
where Queuey has one (``VisibilityTimeout`` is ``visibility_timeout``,
``DelaySeconds`` is ``delay``, ``MessageRetentionPeriod`` is ``ttl``,
``RedrivePolicy`` is ``max_attempts`` with ``dead_letter_queue``, ``FifoQueue``
is ``fifo``) and an ``sqs.<Name>`` entry of the queue's ``attributes``
otherwise. A queue made through the native API answers SQS with its own
settings and SQS's defaults for the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from queuey import ids
from queuey.core.messages import MessageRules
from queuey.model import QueueMeta
from queuey.sqs import policy
from queuey.sqs.errors import SQSError, invalid
from queuey.sqs.queues import ARN, Place

#: Attributes only GetQueueAttributes answers.
READ_ONLY = (
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
)
#: Attributes kept in ``QueueMeta.attributes`` as ``sqs.<Name>``, with their checks.
STORED = (
    "MaximumMessageSize",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)
SETTABLE = (
    "DelaySeconds",
    "MessageRetentionPeriod",
    "VisibilityTimeout",
    "RedrivePolicy",
    *STORED,
)
#: Stored attributes an empty value removes.
EMPTY_REMOVES = ("Policy", "RedriveAllowPolicy", "KmsMasterKeyId")
FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
ALL_NAMES = frozenset((*READ_ONLY, *SETTABLE, "FifoQueue"))
#: The attributes whose values count messages (they cost a stats call).
COUNTS = READ_ONLY[1:4]


def _integer(name: str, value: str, low: int, high: int) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 10) or not (
        low <= int(value) <= high
    ):
        raise invalid_attribute(name)
    return int(value)


def invalid_attribute(name: str, value: Any = None, reason: str = "") -> SQSError:
    """SQS's answer to an attribute value it refuses: its name, and a reason
    only where SQS gives one (``value`` is not shown, as SQS does not)."""
    return SQSError(
        "InvalidAttributeValue",
        f"Invalid value for the parameter {name}." + (f" Reason: {reason}." if reason else ""),
    )


def _boolean(name: str, value: str) -> str:
    if value.lower() not in ("true", "false"):
        raise invalid_attribute(name)
    return value.lower()


def attribute_changes(
    given: Mapping[str, Any],
    meta: QueueMeta | None,
    *,
    fifo: bool,
    place: Place,
    limits: MessageRules,
    now_micros: int,
) -> dict[str, Any]:
    """``update_queue`` changes for the SQS ``Attributes`` of a CreateQueue
    (``meta`` None) or SetQueueAttributes: queue fields, and ``attributes_set``
    with only the ``sqs.`` keys given (the store merges them into the queue's
    map, so a concurrent change of other keys is kept).

    The dead-letter target of a ``RedrivePolicy`` is returned as
    ``dead_letter_queue``; the caller checks that it exists and allows it.
    """
    if not isinstance(given, Mapping):
        raise invalid("Attributes must be a map of names to values.")
    changes: dict[str, Any] = {}
    attributes: dict[str, str] = {}
    removed: list[str] = []
    for name, value in given.items():
        if not isinstance(value, str):
            raise invalid_attribute(str(name), value, "must be a string")
        if name in EMPTY_REMOVES and value == "":
            removed.append("sqs." + name)  # as SQS: an empty policy is no policy
            continue
        if name == "FifoQueue":
            if not fifo:
                raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
            if meta is not None and _boolean(name, value) != "true":
                raise invalid_attribute(name, reason="Modifying queue type is not supported")
            continue
        if name not in SETTABLE:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in FIFO_ONLY and not fifo:
            raise SQSError(
                "InvalidAttributeName",
                f"You can specify the {name} only when FifoQueue is set to true.",
            )
        if name == "DelaySeconds":
            changes["delay"] = _integer(name, value, 0, 900)
        elif name == "VisibilityTimeout":
            changes["visibility_timeout"] = _integer(name, value, 0, 43200)
        elif name == "MessageRetentionPeriod":
            changes["ttl"] = _integer(name, value, 60, limits.clamp_ttl(1209600))
        elif name == "RedrivePolicy":
            changes.update(_redrive_policy(value, place))
        else:
            attributes["sqs." + name] = _stored_value(name, value, place, limits)
    attributes["sqs.LastModifiedTimestamp"] = str(now_micros // ids.MICROS)
    changes["attributes_set"] = attributes
    if removed and meta is not None:
        changes["attributes_removed"] = removed
    return changes


def _stored_value(name: str, value: str, place: Place, limits: MessageRules) -> str:
    if name == "MaximumMessageSize":
        return str(_integer(name, value, 1024, limits.max_message_size))
    if name == "ReceiveMessageWaitTimeSeconds":
        return str(_integer(name, value, 0, 20))
    if name == "KmsDataKeyReusePeriodSeconds":
        return str(_integer(name, value, 60, 86400))
    if name in ("SqsManagedSseEnabled", "ContentBasedDeduplication"):
        return _boolean(name, value)
    if name == "DeduplicationScope":
        if value not in ("messageGroup", "queue"):
            raise invalid_attribute(name)
        return value
    if name == "FifoThroughputLimit":
        if value not in ("perQueue", "perMessageGroupId"):
            raise invalid_attribute(name)
        return value
    if name == "RedriveAllowPolicy":
        return _redrive_allow_policy(value, place)
    if name == "Policy":
        return policy.checked(value, place)
    if len(value) > 20480:
        raise invalid_attribute(name)
    return value


def invalid_redrive_policy(value: str, reason: str) -> SQSError:
    return invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: {reason}")


def _redrive_policy(value: str, place: Place) -> dict[str, Any]:
    if value == "":
        return {"max_attempts": 0, "dead_letter_queue": None}
    redrive = policy.document(value)
    if redrive is None:
        raise invalid_redrive_policy(value, "Redrive policy is not a valid JSON map.")
    unknown = set(redrive) - {"deadLetterTargetArn", "maxReceiveCount"}
    if unknown:
        raise invalid_redrive_policy(
            value,
            f"Only following attributes are supported: [deadLetterTargetArn, "
            f"maxReceiveCount]. Found: {sorted(unknown)[0]}.",
        )
    for needed in ("deadLetterTargetArn", "maxReceiveCount"):
        if needed not in redrive:
            raise invalid_redrive_policy(value, f"Redrive policy must contain {needed}.")
    count = redrive["maxReceiveCount"]
    text = str(count)
    if (
        isinstance(count, bool)
        or not isinstance(count, int | str)
        or not (text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= 1000)
    ):
        raise invalid_redrive_policy(
            value,
            f"Invalid value for maxReceiveCount: {text[:40]}, valid values are from 1 to 1000 "
            "both inclusive.",
        )
    arn = redrive["deadLetterTargetArn"]
    match = ARN.match(arn) if isinstance(arn, str) else None
    if match is None:
        raise invalid_redrive_policy(value, "Invalid value for deadLetterTargetArn.")
    if match.group(2) != place.account_id or match.group(1) != place.region:
        raise invalid_redrive_policy(value, "Dead letter target does not exist.")
    return {"max_attempts": int(text), "dead_letter_queue": place.stored(match.group(3))}


def _redrive_allow_policy(value: str, place: Place) -> str:
    allowed = policy.document(value) or {}  # not a JSON object: refused as no permission
    permission = allowed.get("redrivePermission")
    sources = allowed.get("sourceQueueArns")
    if permission not in ("allowAll", "denyAll", "byQueue"):
        raise invalid_attribute("RedriveAllowPolicy")
    if permission == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= 10:
            raise invalid_attribute("RedriveAllowPolicy")
        for arn in sources:
            place.name_from_arn(arn, "RedriveAllowPolicy")
    elif sources is not None:
        raise invalid_attribute("RedriveAllowPolicy")
    return value


def redrive_allowed(dead: QueueMeta, source_name: str, place: Place) -> bool:
    """Whether ``dead``'s RedriveAllowPolicy lets ``source_name`` use it."""
    text = dead.attributes.get("sqs.RedriveAllowPolicy")
    if not text:
        return True
    policy = json.loads(text)
    permission = policy.get("redrivePermission")
    if permission == "denyAll":
        return False
    if permission == "byQueue":
        return place.arn(source_name) in policy.get("sourceQueueArns", [])
    return True


def max_message_size(meta: QueueMeta, limits: MessageRules) -> int:
    stored = meta.attributes.get("sqs.MaximumMessageSize")
    return min(int(stored), limits.max_message_size) if stored else limits.max_message_size


def receive_wait(meta: QueueMeta) -> int:
    return int(meta.attributes.get("sqs.ReceiveMessageWaitTimeSeconds", "0"))


def content_dedup(meta: QueueMeta) -> bool:
    return meta.attributes.get("sqs.ContentBasedDeduplication") == "true"


def dedup_per_group(meta: QueueMeta) -> bool:
    return meta.attributes.get("sqs.DeduplicationScope") == "messageGroup"


def attribute_values(
    meta: QueueMeta, names: set[str], place: Place, limits: MessageRules, counts: Mapping[str, int]
) -> dict[str, str]:
    """GetQueueAttributes' answer for ``names`` (already checked); ``counts``
    holds the three message counts when one of them was asked for."""
    created = meta.created // ids.MICROS
    values: dict[str, str] = {
        "QueueArn": place.arn(meta.name),
        "CreatedTimestamp": str(created),
        "LastModifiedTimestamp": meta.attributes.get("sqs.LastModifiedTimestamp", str(created)),
        "VisibilityTimeout": str(meta.visibility_timeout),
        "DelaySeconds": str(meta.delay),
        "MessageRetentionPeriod": str(meta.ttl),
        "MaximumMessageSize": str(max_message_size(meta, limits)),
        "ReceiveMessageWaitTimeSeconds": str(receive_wait(meta)),
        "SqsManagedSseEnabled": meta.attributes.get("sqs.SqsManagedSseEnabled", "false"),
        **counts,
    }
    if meta.max_attempts:
        values["RedrivePolicy"] = json.dumps(
            {
                "deadLetterTargetArn": place.arn(meta.dead_letter_name),
                "maxReceiveCount": meta.max_attempts,
            },
            separators=(",", ":"),
        )
    for name in ("RedriveAllowPolicy", "Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"):
        if "sqs." + name in meta.attributes:
            values[name] = meta.attributes["sqs." + name]
    if meta.fifo:
        values["FifoQueue"] = "true"
        values["ContentBasedDeduplication"] = "true" if content_dedup(meta) else "false"
        values["DeduplicationScope"] = meta.attributes.get("sqs.DeduplicationScope", "queue")
        values["FifoThroughputLimit"] = meta.attributes.get("sqs.FifoThroughputLimit", "perQueue")
    if "All" in names:
        return values
    return {name: values[name] for name in names if name in values}


def differing_attribute(
    meta: QueueMeta, given: Mapping, place: Place, limits: MessageRules
) -> str | None:
    """The first CreateQueue attribute in ``given`` whose value is not what the
    existing queue ``meta`` has, compared by meaning (numbers as numbers,
    booleans in any case, JSON documents parsed, an empty value as an absent
    one); None when every one is the same."""
    values = attribute_values(meta, {"All"}, place, limits, {})
    values["FifoQueue"] = "true" if meta.fifo else "false"
    for name, value in given.items():
        if name not in ALL_NAMES or name in READ_ONLY:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if not (isinstance(value, str) and _same(name, value, values.get(name, ""))):
            return name
    return None


def _same(name: str, value: str, current: str) -> bool:
    if name in ("RedrivePolicy", "Policy", "RedriveAllowPolicy"):
        return _document(value) == _document(current)
    if current.isdigit() and value.isascii() and value.isdigit():
        return int(current) == int(value)
    return current.lower() == value.lower()


def _document(text: str) -> object:
    """A JSON attribute's meaning: its parsed value, numbers in strings as numbers."""
    if not text:
        return None
    value = policy.document(text)
    if value is None:
        return text
    if isinstance(value.get("maxReceiveCount"), str):
        count = value["maxReceiveCount"]
        value["maxReceiveCount"] = int(count) if count.isdigit() else count
    return value


def check_attribute_names(names: object) -> set[str]:
    if names is None:
        return set()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise invalid("AttributeNames must be a list of names.")
    for name in names:
        if name != "All" and name not in ALL_NAMES:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
    return set(names)

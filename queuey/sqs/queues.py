"""SQS queues on Queuey queues: names, URLs, ARNs and queue attributes.

An SQS queue is a Queuey queue; what SQS calls a queue attribute is a
:class:`~queuey.model.QueueMeta` field where Queuey has one
(``VisibilityTimeout`` is ``visibility_timeout``, ``DelaySeconds`` is
``delay``, ``MessageRetentionPeriod`` is ``ttl``, ``RedrivePolicy`` is
``max_attempts`` with ``dead_letter_queue``, ``FifoQueue`` is ``fifo``) and an
``sqs.<Name>`` entry of the queue's ``attributes`` otherwise; tags are
``sqs.tag.<key>`` entries. A queue made through the native API answers SQS
with its own settings and SQS's defaults for the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from queuey import ids
from queuey.core.messages import MessageRules
from queuey.model import QueueMeta
from queuey.sqs.errors import SQSError

STANDARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
FIFO_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}\.fifo$")
#: What a queue name can start with (a ListQueues prefix that cannot matches nothing).
NAME_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,80}\Z")
ARN = re.compile(r"^arn:aws:sqs:([a-z0-9-]+):([0-9]{12}):([A-Za-z0-9_.-]{1,80})$")
TAG_PREFIX = "sqs.tag."
MAX_TAGS = 50
#: SQS's default retention (4 days), capped by ``queuey.max_ttl``.
DEFAULT_RETENTION = 345600

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
FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
ALL_NAMES = frozenset((*READ_ONLY, *SETTABLE, "FifoQueue"))
#: The attributes whose values count messages (they cost a stats call).
COUNTS = READ_ONLY[1:4]


def check_name(name: object) -> str:
    if not isinstance(name, str) or not (STANDARD_NAME.match(name) or FIFO_NAME.match(name)):
        raise SQSError(
            "InvalidParameterValue",
            "Can only include alphanumeric characters, hyphens, or underscores. "
            "1 to 80 in length (a FIFO queue's name ends in .fifo, counted in the 80).",
        )
    return name


@dataclass(frozen=True)
class Place:
    """Where this endpoint's queues live for one application and request."""

    base_url: str  # scheme://host[:port], from the request
    account_id: str
    region: str

    def url(self, name: str) -> str:
        return f"{self.base_url}/{self.account_id}/{name}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def name_from_url(self, url: object) -> str:
        """The queue a ``QueueUrl`` names, if it is one of this account's."""
        if not isinstance(url, str) or len(url) > 2048:
            raise no_such_queue()
        path = urlsplit(url).path if "://" in url else url
        parts = [p for p in path.split("/") if p]
        if len(parts) != 2 or parts[0] != self.account_id:
            raise no_such_queue()
        name = parts[1]
        if not (STANDARD_NAME.match(name) or FIFO_NAME.match(name)):
            raise no_such_queue()
        return name

    def name_from_arn(self, arn: object, what: str) -> str:
        match = ARN.match(arn) if isinstance(arn, str) else None
        if match is None or match.group(2) != self.account_id:
            raise SQSError(
                "InvalidParameterValue",
                f"Value {arn} for parameter {what} is invalid. Reason: not an ARN of a queue "
                "of this account.",
            )
        return match.group(3)


def no_such_queue() -> SQSError:
    return SQSError("QueueDoesNotExist", "The specified queue does not exist.")


def _integer(name: str, value: str, low: int, high: int) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 10) or not (
        low <= int(value) <= high
    ):
        raise invalid_attribute(name, value, f"must be an integer from {low} to {high}")
    return int(value)


def invalid_attribute(name: str, value: Any, reason: str) -> SQSError:
    shown = value if len(str(value)) <= 256 else str(value)[:256] + "..."
    return SQSError(
        "InvalidAttributeValue", f"Invalid value for the parameter {name} ({shown!r}): {reason}."
    )


def _boolean(name: str, value: str) -> str:
    if value.lower() not in ("true", "false"):
        raise invalid_attribute(name, value, "must be true or false")
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
        raise SQSError("InvalidParameterValue", "Attributes must be a map of names to values.")
    changes: dict[str, Any] = {}
    attributes: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(value, str):
            raise invalid_attribute(str(name), value, "must be a string")
        if name == "FifoQueue":
            if meta is not None or _boolean(name, value) != ("true" if fifo else "false"):
                raise invalid_attribute(
                    name, value, "set at creation only, true exactly for a name ending in .fifo"
                )
            continue
        if name not in SETTABLE:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in FIFO_ONLY and not fifo:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
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
            raise invalid_attribute(name, value, "must be messageGroup or queue")
        return value
    if name == "FifoThroughputLimit":
        if value not in ("perQueue", "perMessageGroupId"):
            raise invalid_attribute(name, value, "must be perQueue or perMessageGroupId")
        return value
    if name == "RedriveAllowPolicy":
        return _redrive_allow_policy(value, place)
    if len(value) > 20480:
        raise invalid_attribute(name, value, "is longer than 20,480 characters")
    return value


def _json_object(name: str, value: str) -> dict:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise invalid_attribute(name, value, "must be a JSON object") from exc
    if not isinstance(parsed, dict):
        raise invalid_attribute(name, value, "must be a JSON object")
    return parsed


def _redrive_policy(value: str, place: Place) -> dict[str, Any]:
    if value == "":
        return {"max_attempts": 0, "dead_letter_queue": None}
    policy = _json_object("RedrivePolicy", value)
    unknown = set(policy) - {"deadLetterTargetArn", "maxReceiveCount"}
    if unknown or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise invalid_attribute(
            "RedrivePolicy", value, "must hold exactly deadLetterTargetArn and maxReceiveCount"
        )
    count = policy["maxReceiveCount"]
    if isinstance(count, bool) or not isinstance(count, int | str):
        raise invalid_attribute("RedrivePolicy", value, "maxReceiveCount must be 1 to 1000")
    count = _integer("RedrivePolicy", str(count), 1, 1000)
    target = place.name_from_arn(policy["deadLetterTargetArn"], "RedrivePolicy")
    return {"max_attempts": count, "dead_letter_queue": target}


def _redrive_allow_policy(value: str, place: Place) -> str:
    policy = _json_object("RedriveAllowPolicy", value)
    permission = policy.get("redrivePermission")
    sources = policy.get("sourceQueueArns")
    if permission not in ("allowAll", "denyAll", "byQueue"):
        raise invalid_attribute(
            "RedriveAllowPolicy", value, "redrivePermission must be allowAll, denyAll or byQueue"
        )
    if permission == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= 10:
            raise invalid_attribute(
                "RedriveAllowPolicy", value, "byQueue needs 1 to 10 sourceQueueArns"
            )
        for arn in sources:
            place.name_from_arn(arn, "RedriveAllowPolicy")
    elif sources is not None:
        raise invalid_attribute("RedriveAllowPolicy", value, "sourceQueueArns is only for byQueue")
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


def tags_of(meta: QueueMeta) -> dict[str, str]:
    return {
        key[len(TAG_PREFIX) :]: value
        for key, value in meta.attributes.items()
        if key.startswith(TAG_PREFIX)
    }


def check_tags(tags: object) -> dict[str, str]:
    if not isinstance(tags, Mapping):
        raise SQSError("InvalidParameterValue", "Tags must be a map of keys to values.")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128:
            raise SQSError("InvalidParameterValue", "Tag keys must be 1 to 128 characters.")
        if not isinstance(value, str) or len(value) > 256:
            raise SQSError("InvalidParameterValue", "Tag values must be 0 to 256 characters.")
    return dict(tags)


def tag_attributes(attributes: Mapping[str, str], tags: Mapping[str, str]) -> dict[str, str]:
    """The attribute keys that hold ``tags``, checked against ``attributes``
    (the queue's map as read) for the tag limit."""
    added = {TAG_PREFIX + key: value for key, value in tags.items()}
    if len({k for k in attributes if k.startswith(TAG_PREFIX)} | added.keys()) > MAX_TAGS:
        raise SQSError("InvalidParameterValue", f"A queue holds at most {MAX_TAGS} tags.")
    return added


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


def check_attribute_names(names: object) -> set[str]:
    if names is None:
        return set()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SQSError("InvalidParameterValue", "AttributeNames must be a list of names.")
    for name in names:
        if name != "All" and name not in ALL_NAMES:
            raise SQSError("InvalidAttributeName", f"Unknown Attribute {name}.")
    return set(names)

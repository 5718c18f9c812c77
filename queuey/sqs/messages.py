"""SQS messages on Queuey storage: bodies, message attributes, digests.

Queuey stores a body as JSON text. An SQS body is any string, stored as a JSON
string (a native reader sees a string ``body``); a natively posted message (a
JSON object) reaches an SQS consumer as its JSON text. SQS's own fields ride in
the stored message's ``attributes`` under ``sqs.`` keys:

=============== =============================================================
``sqs.attrs``   the message attributes, JSON ``{name: [data type, value]}``
                (a Binary value in base64)
``sqs.trace``   the ``AWSTraceHeader`` system attribute
``sqs.group``   ``MessageGroupId``
``sqs.dedup``   ``MessageDeduplicationId`` (FIFO queues)
``sqs.sent``    when it was sent, epoch milliseconds, for a delayed message
                (its id, hence its timestamp, is minted at its due time)
``sqs.sender``  the application that sent it, when not the queue's owner
                (its ``SenderId``)
=============== =============================================================

Other stored attributes (a native post's, or a dead letter's ``source_*``)
reach SQS consumers as String message attributes, unless ``sqs.attrs`` is set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from queuey import ids
from queuey.model import Message
from queuey.sqs.errors import SQSError, invalid
from queuey.tracing import TRACEPARENT, from_xray

#: Characters SQS refuses in a body or string attribute and XML 1.0 cannot carry.
INVALID_TEXT = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_DATA_TYPE = re.compile(r"^(String|Number|Binary)(\.[A-Za-z0-9_.-]{1,249})?$")
#: Most message attributes on one message (SQS's limit).
MAX_ATTRIBUTES = 10
#: The system attributes a sender may set.
SYSTEM_ATTRIBUTES = ("AWSTraceHeader",)


def check_text(value: str, body: bool = True) -> None:
    """Only the characters SQS accepts: in a body ``InvalidMessageContents``,
    in an attribute value ``InvalidParameterValue``, with SQS's text."""
    if INVALID_TEXT.search(value):
        raise SQSError(
            "InvalidMessageContents" if body else "InvalidParameterValue",
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | "
            "#x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )


def encode_body(body: str) -> str:
    return json.dumps(body, ensure_ascii=False)


def decode_body(text: str) -> str:
    """The SQS body of a stored message (see the module docstring)."""
    if text[:1] == '"':
        value = json.loads(text)
        if isinstance(value, str):
            return value
    return text


@dataclass(frozen=True)
class Attribute:
    """One message attribute: ``value`` is text, or bytes for a Binary type."""

    data_type: str
    value: str | bytes

    @property
    def binary(self) -> bool:
        return isinstance(self.value, bytes)

    def size(self, name: str) -> int:
        raw = self.value if isinstance(self.value, bytes) else self.value.encode("utf-8")
        return len(name.encode("utf-8")) + len(self.data_type.encode("utf-8")) + len(raw)

    def to_api(self) -> dict:
        if isinstance(self.value, bytes):
            return {
                "DataType": self.data_type,
                "BinaryValue": base64.b64encode(self.value).decode(),
            }
        return {"DataType": self.data_type, "StringValue": self.value}


def parse_attributes(given: object, *, system: bool = False) -> dict[str, Attribute]:
    """``MessageAttributes`` (or ``MessageSystemAttributes``) of a send, checked as SQS does."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise invalid("MessageAttributes must be a map.")
    kind = "system" if system else "(user)"
    if not system and len(given) > MAX_ATTRIBUTES:
        raise invalid(
            f"Number of message attributes [{len(given)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}]."
        )
    found: dict[str, Attribute] = {}
    for name, spec in given.items():
        if system:
            if name not in SYSTEM_ATTRIBUTES:
                raise invalid(f"Message system attribute name '{name}' is invalid.")
        else:
            _check_name(name)
        if not isinstance(spec, Mapping):
            raise invalid(f"Message {kind} attribute '{name}' must have a single value.")
        data_type = spec.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise invalid(f"Message {kind} attribute '{name}' must contain a non-empty type.")
        if not _DATA_TYPE.match(data_type) or (system and data_type != "String"):
            raise invalid(
                f"The type of message {kind} attribute '{name}' is invalid. You must use only "
                "the following supported type prefixes: Binary, Number, String."
            )
        if spec.get("StringListValues") or spec.get("BinaryListValues"):
            raise invalid(f"Message {kind} attribute list values in '{name}' are not supported.")
        found[name] = _value(name, data_type, spec, kind)
    return found


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise invalid("Message (user) attribute name must not be empty.")
    if len(name.encode("utf-8")) > 256:
        raise invalid("Message (user) attribute name must be shorter than 256 bytes.")
    bad = re.search(r"[^A-Za-z0-9_.-]", name)
    if bad:
        raise invalid(
            f"Invalid non-alphanumeric character '#x{ord(bad.group()):X}' was found in the "
            "message attribute name. Can only include alphanumeric characters, hyphens, "
            "underscores, or dots."
        )
    if name.lower().startswith(("aws.", "amazon.")):
        raise invalid(
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. "
            "These strings are reserved for internal use."
        )
    if name.startswith("."):
        raise invalid("Message (user) attribute name must not begin with character '.'.")
    if name.endswith("."):
        raise invalid("Message (user) attribute name must not end with character '.'.")
    if ".." in name:
        raise invalid("Message (user) attribute name must not have successive '.' characters.")


def _value(name: str, data_type: str, spec: Mapping, kind: str) -> Attribute:
    base = data_type.split(".", 1)[0]
    empty = f"Message {kind} attribute '{name}' must contain a non-empty value of type '{base}'."
    if base == "Binary":
        raw = spec.get("BinaryValue")
        if not isinstance(raw, str | bytes) or not raw:
            raise invalid(empty)
        if isinstance(raw, str):
            try:
                raw = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise invalid(
                    f"The Binary value of message {kind} attribute '{name}' is not base64."
                ) from exc
        return Attribute(data_type, bytes(raw))
    text = spec.get("StringValue")
    if not isinstance(text, str) or not text:
        raise invalid(empty)
    check_text(text, body=False)
    if base == "Number":
        _check_number(name, text)
    return Attribute(data_type, text)


def _check_number(name: str, text: str) -> None:
    cast = f"Can't cast the value of message (user) attribute '{name}' to a number."
    if len(text) > 200:
        raise invalid(cast)
    try:
        number = Decimal(text)
    except InvalidOperation as exc:
        raise invalid(cast) from exc
    if not number.is_finite():
        raise invalid(cast)
    digits = len(number.as_tuple().digits)
    if digits > 38 or not (Decimal("-1e128") <= number <= Decimal("1e126")):
        raise invalid(
            f"Value of message attribute '{name}' is outside the Number range "
            "(38 digits, -10^128 to 10^126)."
        )


def attributes_size(attributes: Mapping[str, Attribute]) -> int:
    return sum(a.size(name) for name, a in attributes.items())


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Mapping[str, Attribute]) -> str | None:
    """SQS's digest of message attributes (what clients verify), ``None`` when empty.

    Sorted by name, each: name, data type (both length-prefixed, 4 bytes big
    endian), a transport byte (1 text, 2 binary), the length-prefixed value.
    """
    if not attributes:
        return None
    out = bytearray()
    for name in sorted(attributes):
        attribute = attributes[name]
        for text in (name, attribute.data_type):
            raw = text.encode("utf-8")
            out += struct.pack(">I", len(raw)) + raw
        value = attribute.value
        if isinstance(value, bytes):
            out += b"\x02" + struct.pack(">I", len(value)) + value
        else:
            raw = value.encode("utf-8")
            out += b"\x01" + struct.pack(">I", len(raw)) + raw
    return md5_hex(bytes(out))


def store_attributes(
    attributes: Mapping[str, Attribute],
    *,
    trace: str | None = None,
    group: str | None = None,
    dedup: str | None = None,
    sent_millis: int | None = None,
    sender: str | None = None,
) -> dict[str, str] | None:
    """The stored message's ``attributes`` for these SQS fields."""
    stored: dict[str, str] = {}
    if attributes:
        stored["sqs.attrs"] = json.dumps(
            {
                name: [
                    a.data_type,
                    base64.b64encode(a.value).decode() if isinstance(a.value, bytes) else a.value,
                ]
                for name, a in attributes.items()
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
    # An X-Ray trace header is a trace context the native side reads too.
    traceparent = from_xray(trace)
    if traceparent is not None:
        stored[TRACEPARENT] = traceparent
    for key, value in (
        ("sqs.trace", trace),
        ("sqs.group", group),
        ("sqs.dedup", dedup),
        ("sqs.sender", sender),
    ):
        if value is not None:
            stored[key] = value
    if sent_millis is not None:
        stored["sqs.sent"] = str(sent_millis)
    return stored or None


def message_attributes(message: Message) -> dict[str, Attribute]:
    """The message attributes an SQS consumer sees (see the module docstring)."""
    stored = message.attributes or {}
    encoded = stored.get("sqs.attrs")
    if encoded is None:
        return {
            name: Attribute("String", value)
            for name, value in stored.items()
            if not name.startswith("sqs.") and value and _ATTRIBUTE_NAME.match(name)
        }
    found = {}
    for name, (data_type, value) in json.loads(encoded).items():
        if data_type.startswith("Binary"):
            found[name] = Attribute(data_type, base64.b64decode(value))
        else:
            found[name] = Attribute(data_type, value)
    return found


def select_attributes(
    attributes: Mapping[str, Attribute], wanted: Iterable[str]
) -> dict[str, Attribute]:
    """The attributes named by ``MessageAttributeNames``: ``All``, ``*`` and
    ``.*`` name every one; ``<prefix>.*`` those whose name starts with
    ``<prefix>`` (as SQS matches: ``Custom.*`` selects ``Custom1`` and
    ``Custom.a``); any other entry, the attribute of exactly that name."""
    names = list(wanted)
    if not names or not attributes:
        return {}
    if "All" in names or "*" in names or ".*" in names:
        return dict(attributes)
    exact = set(names)
    prefixes = tuple(n[:-2] for n in names if n.endswith(".*"))
    return {
        name: a
        for name, a in attributes.items()
        if name in exact or (prefixes and name.startswith(prefixes))
    }


def sequence_number(message: Message) -> str:
    """A FIFO message's ``SequenceNumber``: increasing in id order, unique per message."""
    time, rest = ids.order_key(message.id)
    return str((time << 64) | int.from_bytes(rest, "big"))


def sent_millis(message: Message) -> int:
    stored = (message.attributes or {}).get("sqs.sent")
    if stored and stored.isdigit():
        return int(stored)
    return message.timestamp // 1000

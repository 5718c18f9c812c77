"""Work-queue values as JSON-safe dicts, for calls between API processes.

A process forwarding a call to a partition's owner (:mod:`.peers`) sends the
queue and the ask, and gets deliveries, dead letters or receipt statuses back;
this module turns each into plain dicts, lists, strings and ints and back,
exactly (ids travel as 32 lowercase hex digits).

Encoders write every field by name; decoders take exactly those names and
check every value's type, raising :class:`ValueError` for anything else. The
transport already authenticates its peer, but two processes of different
versions (a rolling upgrade) must fail loudly on a field one of them does not
know, rather than drop it silently.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, get_args

from queuey.model import (
    Consistency,
    DeadLetter,
    Delivery,
    Message,
    MessageRef,
    QueueMeta,
    QueueType,
    ReceiptStatus,
    Reserved,
)
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk

T = TypeVar("T")
_HEX_ID = re.compile(r"[0-9a-f]{32}")
_QUEUE_TYPES: tuple[str, ...] = get_args(QueueType)
_CONSISTENCIES: tuple[str, ...] = get_args(Consistency)
_STATUSES: tuple[str, ...] = get_args(ReceiptStatus)


# -- checks ---------------------------------------------------------------------------
def _fields(value: Any, what: str, names: frozenset[str]) -> dict[str, Any]:
    """``value`` as an object with exactly the keys ``names``."""
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object, got {type(value).__name__}")
    if value.keys() != names:
        missing = sorted(names - value.keys())
        extra = sorted(str(k) for k in value.keys() - names)
        raise ValueError(f"{what}: missing fields {missing}, unknown fields {extra}")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int:  # bool is an int subclass: not accepted
        raise ValueError(f"{what}: expected an integer, got {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what}: expected true or false, got {type(value).__name__}")
    return value


def _optional(check: Callable[[Any, str], T]) -> Callable[[Any, str], T | None]:
    return lambda value, what: None if value is None else check(value, what)


def _choice(choices: tuple[str, ...]) -> Callable[[Any, str], str]:
    def check(value: Any, what: str) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{what}: expected one of {list(choices)}, got {value!r:.60}")
        return value

    return check


def _list(value: Any, what: str, item: Callable[[Any, str], T]) -> list[T]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list, got {type(value).__name__}")
    return [item(v, f"{what}[{i}]") for i, v in enumerate(value)]


def _str_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object, got {type(value).__name__}")
    return {_str(k, f"{what} key"): _str(v, f"{what}[{k!r:.40}]") for k, v in value.items()}


def _id(value: Any, what: str) -> uuid.UUID:
    if not isinstance(value, str) or not _HEX_ID.fullmatch(value):
        raise ValueError(f"{what}: expected 32 lowercase hex digits, got {value!r:.60}")
    return uuid.UUID(hex=value)


_optional_str = _optional(_str)
_optional_str_map = _optional(_str_map)
_status = _choice(_STATUSES)


def _ints(value: Any, what: str) -> list[int]:
    return _list(value, what, _int)


def _strs(value: Any, what: str) -> list[str]:
    return _list(value, what, _str)


# -- queues ---------------------------------------------------------------------------
_QUEUE: dict[str, Callable[[Any, str], Any]] = {
    "application": _str,
    "name": _str,
    "partitions": _int,
    "ttl": _int,
    "type": _choice(_QUEUE_TYPES),
    "consistency": _choice(_CONSISTENCIES),
    "created": _int,
    "incarnation": _str,
    "visibility_timeout": _int,
    "max_attempts": _int,
    "dead_letter_queue": _optional_str,
    "delay": _int,
    "fifo": _bool,
    "attributes": _str_map,
}
_QUEUE_NAMES = frozenset(_QUEUE)


def encode_queue(queue: QueueMeta) -> dict[str, Any]:
    encoded = {name: getattr(queue, name) for name in _QUEUE}
    encoded["attributes"] = dict(queue.attributes)
    return encoded


def decode_queue(value: Any) -> QueueMeta:
    d = _fields(value, "queue", _QUEUE_NAMES)
    return QueueMeta(**{name: check(d[name], f"queue.{name}") for name, check in _QUEUE.items()})


# -- messages, deliveries, dead letters -----------------------------------------------
_MESSAGE = frozenset(("id", "timestamp", "partition", "body", "expires", "priority", "attributes"))


def encode_message(m: Message) -> dict[str, Any]:
    return {
        "id": m.id.hex,
        "timestamp": m.timestamp,
        "partition": m.partition,
        "body": m.body,
        "expires": m.expires,
        "priority": m.priority,
        "attributes": None if m.attributes is None else dict(m.attributes),
    }


def decode_message(value: Any, what: str = "message") -> Message:
    d = _fields(value, what, _MESSAGE)
    return Message(
        id=_id(d["id"], f"{what}.id"),
        timestamp=_int(d["timestamp"], f"{what}.timestamp"),
        partition=_int(d["partition"], f"{what}.partition"),
        body=_str(d["body"], f"{what}.body"),
        expires=_int(d["expires"], f"{what}.expires"),
        priority=_int(d["priority"], f"{what}.priority"),
        attributes=_optional_str_map(d["attributes"], f"{what}.attributes"),
    )


_DELIVERY = frozenset(("message", "attempts", "receipt", "first_delivered"))
_DEAD_LETTER = frozenset(("message", "attempts", "last_error", "claim", "generation"))


def encode_delivery(d: Delivery) -> dict[str, Any]:
    return {
        "message": encode_message(d.message),
        "attempts": d.attempts,
        "receipt": d.receipt,
        "first_delivered": d.first_delivered,
    }


def decode_delivery(value: Any, what: str = "delivery") -> Delivery:
    d = _fields(value, what, _DELIVERY)
    return Delivery(
        message=decode_message(d["message"], f"{what}.message"),
        attempts=_int(d["attempts"], f"{what}.attempts"),
        receipt=_str(d["receipt"], f"{what}.receipt"),
        first_delivered=_int(d["first_delivered"], f"{what}.first_delivered"),
    )


def encode_dead_letter(d: DeadLetter) -> dict[str, Any]:
    return {
        "message": encode_message(d.message),
        "attempts": d.attempts,
        "last_error": d.last_error,
        "claim": d.claim,
        "generation": d.generation,
    }


def decode_dead_letter(value: Any, what: str = "dead letter") -> DeadLetter:
    d = _fields(value, what, _DEAD_LETTER)
    return DeadLetter(
        message=decode_message(d["message"], f"{what}.message"),
        attempts=_int(d["attempts"], f"{what}.attempts"),
        last_error=_str(d["last_error"], f"{what}.last_error"),
        claim=_str(d["claim"], f"{what}.claim"),
        generation=_str(d["generation"], f"{what}.generation"),
    )


def encode_dead_letters(letters: Sequence[DeadLetter]) -> list[dict[str, Any]]:
    return [encode_dead_letter(d) for d in letters]


def decode_dead_letters(value: Any) -> list[DeadLetter]:
    return _list(value, "dead_letters", decode_dead_letter)


def encode_reserved(r: Reserved) -> dict[str, Any]:
    return {
        "deliveries": [encode_delivery(d) for d in r.deliveries],
        "dead_letters": encode_dead_letters(r.dead_letters),
    }


def decode_reserved(value: Any) -> Reserved:
    d = _fields(value, "reserved", frozenset(("deliveries", "dead_letters")))
    return Reserved(
        deliveries=_list(d["deliveries"], "deliveries", decode_delivery),
        dead_letters=decode_dead_letters(d["dead_letters"]),
    )


# -- asks -----------------------------------------------------------------------------
_RESERVE = frozenset(
    ("partitions", "limit", "visibility_timeout", "now_micros", "settled_micros", "max_in_flight")
)
_RELEASE = frozenset(("receipts", "now_micros", "delay", "error"))
_EXTEND = frozenset(("receipts", "now_micros", "visibility_timeout"))


def encode_reserve_ask(ask: ReserveAsk) -> dict[str, Any]:
    return {
        "partitions": list(ask.partitions),
        "limit": ask.limit,
        "visibility_timeout": ask.visibility_timeout,
        "now_micros": ask.now_micros,
        "settled_micros": ask.settled_micros,
        "max_in_flight": ask.max_in_flight,
    }


def decode_reserve_ask(value: Any) -> ReserveAsk:
    """A :class:`ReserveAsk` (its ``partitions`` a list)."""
    d = _fields(value, "reserve ask", _RESERVE)
    return ReserveAsk(
        partitions=_ints(d["partitions"], "reserve ask.partitions"),
        limit=_int(d["limit"], "reserve ask.limit"),
        visibility_timeout=_int(d["visibility_timeout"], "reserve ask.visibility_timeout"),
        now_micros=_int(d["now_micros"], "reserve ask.now_micros"),
        settled_micros=_int(d["settled_micros"], "reserve ask.settled_micros"),
        max_in_flight=_int(d["max_in_flight"], "reserve ask.max_in_flight"),
    )


def encode_release_ask(ask: ReleaseAsk) -> dict[str, Any]:
    return {
        "receipts": list(ask.receipts),
        "now_micros": ask.now_micros,
        "delay": ask.delay,
        "error": ask.error,
    }


def decode_release_ask(value: Any) -> ReleaseAsk:
    """A :class:`ReleaseAsk` (its ``receipts`` a list)."""
    d = _fields(value, "release ask", _RELEASE)
    return ReleaseAsk(
        receipts=_strs(d["receipts"], "release ask.receipts"),
        now_micros=_int(d["now_micros"], "release ask.now_micros"),
        delay=_int(d["delay"], "release ask.delay"),
        error=_optional_str(d["error"], "release ask.error"),
    )


def encode_extend_ask(ask: ExtendAsk) -> dict[str, Any]:
    return {
        "receipts": list(ask.receipts),
        "now_micros": ask.now_micros,
        "visibility_timeout": ask.visibility_timeout,
    }


def decode_extend_ask(value: Any) -> ExtendAsk:
    """An :class:`ExtendAsk` (its ``receipts`` a list)."""
    d = _fields(value, "extend ask", _EXTEND)
    return ExtendAsk(
        receipts=_strs(d["receipts"], "extend ask.receipts"),
        now_micros=_int(d["now_micros"], "extend ask.now_micros"),
        visibility_timeout=_int(d["visibility_timeout"], "extend ask.visibility_timeout"),
    )


# -- statuses, receipts and references ------------------------------------------------
def encode_statuses(statuses: Mapping[str, ReceiptStatus]) -> dict[str, str]:
    return dict(statuses)


def decode_statuses(value: Any) -> dict[str, ReceiptStatus]:
    """Receipt to ``acked``, ``expired`` or ``unknown``."""
    statuses = _str_map(value, "statuses")
    return {r: _status(s, f"statuses[{r!r:.40}]") for r, s in statuses.items()}


def encode_receipts(receipts: Sequence[str]) -> list[str]:
    return list(receipts)


def decode_receipts(value: Any) -> list[str]:
    return _strs(value, "receipts")


def encode_refs(refs: Sequence[MessageRef]) -> list[dict[str, Any]]:
    return [{"partition": r.partition, "id": r.id.hex} for r in refs]


def _ref(value: Any, what: str) -> MessageRef:
    d = _fields(value, what, frozenset(("partition", "id")))
    return MessageRef(_int(d["partition"], f"{what}.partition"), _id(d["id"], f"{what}.id"))


def decode_refs(value: Any) -> list[MessageRef]:
    return _list(value, "refs", _ref)

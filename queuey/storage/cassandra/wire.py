"""Work-queue values as JSON-safe dicts, for calls between API processes.

A process forwarding a call to a partition's owner (:mod:`.peers`) sends the
queue and the ask, and gets deliveries, dead letters or receipt statuses back;
this module turns each into plain dicts, lists, strings and ints and back,
exactly (ids travel as 32 lowercase hex digits).

Each record has one table (a :class:`_Codec`): its fields' names, the check
that decodes each and, where needed, its encoder. Encoders write every field
by name; decoders take exactly those names and check every value's type,
raising :class:`ValueError` for anything else. The transport already
authenticates its peer, but two processes of different versions (a rolling
upgrade) must fail loudly on a field one of them does not know, rather than
drop it silently.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_args

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


# -- the codec: one table of checks per record ------------------------------------------
def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _Codec(Generic[T]):
    """A record's encoder and decoder from one table: each field's check (it
    decodes) and, where the field is not JSON-safe as it is, its encoder."""

    kind: Callable[..., T]
    what: str
    checks: Mapping[str, Callable[[Any, str], Any]]
    encoders: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

    def encode(self, record: T) -> dict[str, Any]:
        return {n: self.encoders.get(n, _same)(getattr(record, n)) for n in self.checks}

    def decode(self, value: Any, what: str = "") -> T:
        what = what or self.what
        d = _fields(value, what, frozenset(self.checks))
        return self.kind(**{n: check(d[n], f"{what}.{n}") for n, check in self.checks.items()})

    def many(self, value: Any, what: str) -> list[T]:
        return _list(value, what, self.decode)


def _hex(value: uuid.UUID) -> str:
    return value.hex


def _optional_dict(value: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if value is None else dict(value)


# -- queues, messages, deliveries, dead letters ---------------------------------------
QUEUE = _Codec(
    QueueMeta,
    "queue",
    {
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
    },
    {"attributes": dict},
)
MESSAGE = _Codec(
    Message,
    "message",
    {
        "id": _id,
        "timestamp": _int,
        "partition": _int,
        "body": _str,
        "expires": _int,
        "priority": _int,
        "attributes": _optional_str_map,
    },
    {"id": _hex, "attributes": _optional_dict},
)
DELIVERY = _Codec(
    Delivery,
    "delivery",
    {"message": MESSAGE.decode, "attempts": _int, "receipt": _str, "first_delivered": _int},
    {"message": MESSAGE.encode},
)
DEAD_LETTER = _Codec(
    DeadLetter,
    "dead letter",
    {
        "message": MESSAGE.decode,
        "attempts": _int,
        "last_error": _str,
        "claim": _str,
        "generation": _str,
    },
    {"message": MESSAGE.encode},
)


def encode_dead_letters(letters: Sequence[DeadLetter]) -> list[dict[str, Any]]:
    return [DEAD_LETTER.encode(d) for d in letters]


def decode_dead_letters(value: Any, what: str = "dead_letters") -> list[DeadLetter]:
    return DEAD_LETTER.many(value, what)


RESERVED = _Codec(
    Reserved,
    "reserved",
    {"deliveries": DELIVERY.many, "dead_letters": decode_dead_letters},
    {
        "deliveries": lambda deliveries: [DELIVERY.encode(d) for d in deliveries],
        "dead_letters": encode_dead_letters,
    },
)

# -- asks -----------------------------------------------------------------------------
RESERVE_ASK = _Codec(
    ReserveAsk,
    "reserve ask",
    {
        "partitions": _ints,
        "limit": _int,
        "visibility_timeout": _int,
        "now_micros": _int,
        "settled_micros": _int,
        "max_in_flight": _int,
    },
    {"partitions": list},
)
RELEASE_ASK = _Codec(
    ReleaseAsk,
    "release ask",
    {"receipts": _strs, "now_micros": _int, "delay": _int, "error": _optional_str},
    {"receipts": list},
)
EXTEND_ASK = _Codec(
    ExtendAsk,
    "extend ask",
    {"receipts": _strs, "now_micros": _int, "visibility_timeout": _int},
    {"receipts": list},
)
REF = _Codec(MessageRef, "ref", {"partition": _int, "id": _id}, {"id": _hex})

encode_queue, decode_queue = QUEUE.encode, QUEUE.decode
encode_message, decode_message = MESSAGE.encode, MESSAGE.decode
encode_delivery, decode_delivery = DELIVERY.encode, DELIVERY.decode
encode_dead_letter, decode_dead_letter = DEAD_LETTER.encode, DEAD_LETTER.decode
encode_reserved, decode_reserved = RESERVED.encode, RESERVED.decode
encode_reserve_ask, decode_reserve_ask = RESERVE_ASK.encode, RESERVE_ASK.decode
encode_release_ask, decode_release_ask = RELEASE_ASK.encode, RELEASE_ASK.decode
encode_extend_ask, decode_extend_ask = EXTEND_ASK.encode, EXTEND_ASK.decode


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


def decode_count(value: Any) -> int:
    """A forwarded reopen's answer: how many messages it reopened."""
    return _int(_fields(value, "reopen answer", frozenset(("count",)))["count"], "count")


def encode_refs(refs: Sequence[MessageRef]) -> list[dict[str, Any]]:
    return [REF.encode(r) for r in refs]


def decode_refs(value: Any) -> list[MessageRef]:
    return REF.many(value, "refs")

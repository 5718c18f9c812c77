"""Message ids and timestamps.

A message id is a version-1 (time-based) UUID whose 60-bit time field holds the
message's timestamp at microsecond precision, so the timestamp can always be
recovered from the id and orders the same way. Timestamps travel as integer
microseconds inside the service; on the wire they are seconds with six decimals.
Every conversion between microseconds and seconds or datetimes lives here.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch.
UUID_EPOCH_OFFSET = 0x01B21DD213814000
#: The largest timestamp an id can carry (its 60-bit time field), with room for
#: :func:`max_uuid`'s exclusive bound.
MAX_MICROS = ((1 << 60) - 1 - UUID_EPOCH_OFFSET) // 10 - 2
MICROS = 1_000_000
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


#: A message id as the API spells it: 32 hex digits of a version-1, RFC 4122 UUID.
MESSAGE_ID_PATTERN = r"^[0-9a-fA-F]{12}1[0-9a-fA-F]{3}[89abAB][0-9a-fA-F]{15}$"
#: Seconds since the epoch as the API accepts them: plain decimal, bounded digits,
#: so parsing costs the same whatever is sent (no exponent, no sign).
SECONDS_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,12})?$"
_MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)
_SECONDS = re.compile(SECONDS_PATTERN)


class InvalidId(ValueError):
    """A string that is not a message id."""


class IdGenerator:
    """Makes version-1 UUIDs, strictly increasing in time within this process.

    The node field is random per generator (with the multicast bit set, as RFC
    4122 asks for random nodes), so two API processes never mint the same id.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        node_and_seq = int.from_bytes(os.urandom(8), "big")
        self._node = (node_and_seq & 0xFFFFFFFFFFFF) | 0x010000000000
        self._clock_seq = (node_and_seq >> 48) & 0x3FFF

    def next_micros(self, now_micros: int) -> int:
        """A timestamp >= now and greater than any this generator gave before."""
        with self._lock:
            ts = now_micros if now_micros > self._last else self._last + 1
            self._last = ts
            return ts

    def make(self, micros: int) -> uuid.UUID:
        return make_uuid(micros, self._node, self._clock_seq)


def make_uuid(micros: int, node: int, clock_seq: int) -> uuid.UUID:
    t = micros * 10 + UUID_EPOCH_OFFSET
    time_low = t & 0xFFFFFFFF
    time_mid = (t >> 32) & 0xFFFF
    time_hi_version = ((t >> 48) & 0x0FFF) | 0x1000
    seq_hi_variant = ((clock_seq >> 8) & 0x3F) | 0x80
    seq_low = clock_seq & 0xFF
    # The 128-bit value the six fields make (what uuid.UUID(fields=...) builds,
    # at a third of the cost: ids are minted per message).
    return uuid.UUID(
        int=(time_low << 96)
        | (time_mid << 80)
        | (time_hi_version << 64)
        | (seq_hi_variant << 56)
        | (seq_low << 48)
        | (node & 0xFFFFFFFFFFFF)
    )


def min_uuid(micros: int) -> uuid.UUID:
    """The smallest id (in Cassandra's timeuuid order) at this microsecond."""
    return make_uuid(micros, 0x808080808080, 0x0080)


def max_uuid(micros: int) -> uuid.UUID:
    """The largest id (in Cassandra's timeuuid order) at this microsecond."""
    return make_uuid(micros + 1, 0x808080808080, 0x0080)  # exclusive upper bound


def micros_of(message_id: uuid.UUID) -> int:
    """The timestamp (microseconds since the epoch) a version-1 id carries."""
    return (message_id.time - UUID_EPOCH_OFFSET) // 10


def parse_id(text: str) -> uuid.UUID:
    """A message id from its 32-hex (or dashed) form; only version-1 ids."""
    try:
        value = uuid.UUID(text)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidId(text) from exc
    if value.version != 1:
        raise InvalidId(text)
    return value


def parse_message_id(text: str) -> uuid.UUID:
    """A message id in the API's one spelling (:data:`MESSAGE_ID_PATTERN`) only.

    Unlike :func:`parse_id`, which takes anything :class:`uuid.UUID` does, this
    is exactly what the OpenAPI description promises, nothing more.
    """
    if not isinstance(text, str) or not _MESSAGE_ID.fullmatch(text):
        raise InvalidId(str(text)[:40])
    return uuid.UUID(hex=text)


def parse_seconds(text: str) -> int:
    """Microseconds from decimal seconds matching :data:`SECONDS_PATTERN`, clamped
    to :data:`MAX_MICROS` (nothing is newer than that anyway).

    The pattern is checked before any conversion, so a huge exponent or a
    thousand digits is refused at once instead of costing CPU.
    """
    if not isinstance(text, str) or not _SECONDS.fullmatch(text):
        raise ValueError("must be seconds since the epoch, a plain decimal number")
    return min(seconds_to_micros(text), MAX_MICROS)


def micros_to_seconds(micros: int) -> float:
    """Seconds with microsecond precision, for JSON.

    The float's shortest repr is exactly the 6-decimal value (timestamps of this
    era need 16 significant digits, which a double holds), so a client that
    sends it back as ``since_timestamp`` hits the same microsecond.
    """
    return micros / MICROS


def seconds_to_micros(text: str | float | int) -> int:
    """Parse seconds since the epoch (decimal) into microseconds, flooring.

    Flooring keeps "strictly newer than" exact: ``ts > floor(x * 1e6)`` holds
    for an integer ``ts`` exactly when ``ts > x * 1e6``.
    """
    try:
        value = Decimal(str(text))
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(f"not a number: {text!r}") from exc
    if not value.is_finite():
        raise ValueError(f"not a finite number: {text!r}")
    return int((value * MICROS).to_integral_value(rounding=ROUND_FLOOR))


def to_micros(value: float | int | str | Decimal | datetime) -> int:
    """Seconds since the epoch (number, decimal text or aware datetime) as micros."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"a datetime bound must carry a time zone: {value!r}")
        delta = value - _UNIX_EPOCH
        return (delta.days * 86400 + delta.seconds) * MICROS + delta.microseconds
    if isinstance(value, float):
        return seconds_to_micros(repr(value))
    return seconds_to_micros(value)


def micros_to_datetime(micros: int) -> datetime:
    """An aware UTC datetime, exact to the microsecond."""
    return _UNIX_EPOCH + timedelta(microseconds=micros)


@functools.lru_cache(maxsize=1 << 16)
def order_key(message_id: uuid.UUID) -> tuple[int, bytes]:
    """Sort key equal to Cassandra's timeuuid order: time, then signed bytes
    (remembered for the most recent ids: a work queue compares the same
    in-flight ids at every call)."""
    return (message_id.time, tiebreak_bytes(message_id))


def tiebreak_bytes(message_id: uuid.UUID) -> bytes:
    """The second half of :func:`order_key`: the low 8 bytes, each as signed."""
    return ((message_id.int & 0xFFFFFFFFFFFFFFFF) ^ 0x8080808080808080).to_bytes(8, "big")

"""Strict JSON in and out (RFC 8259), at a cost linear in the body's size.

In: valid UTF-8, nesting at most :data:`~queuey.limits.MAX_JSON_DEPTH` deep
(checked by one scan before the recursive parser sees the text), no
NaN/Infinity, no number that overflows a double, no lone surrogate in a
string or key. Out: compact UTF-8 JSON.

Both directions go through orjson (a C parser and writer, several times faster
than the standard library's) when it gives the same answer; the standard
library path stays the reference. orjson refuses everything the strict rules
refuse (NaN, overflow, lone surrogates, invalid UTF-8), but it turns integers
beyond 64 bits into floats: a body with a run of 19 or more digits, or one
orjson refuses, is parsed by the standard library, which keeps big integers
exact and words the error a caller sees.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate, repeat
from typing import Any

import orjson

from queuey.errors import ServiceError
from queuey.limits import MAX_JSON_DEPTH, MAX_JSON_INT_DIGITS

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Strict UTF-8 never decodes to a surrogate, so one can only come from a
#: ``\uD800``-``\uDFFF`` escape: without such an escape there is nothing to walk.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
#: A string from its opening quote to its closing one (or to the end of the body).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
#: Opening brackets to 2, closing ones to 0 (steps of +1/-1 once 1 is taken off).
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
#: Digits to ``1``, every other byte to ``0``: a run of 19 ``1`` is a number
#: orjson may not hold exactly (an integer beyond 64 bits), or a long mantissa.
_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN = b"1" * 19


class NotJSON(ServiceError, entry="not_json"):
    """415: the body is not JSON."""


class InvalidJSON(ServiceError, entry="invalid_json"):
    """400: JSON, but outside what the service accepts (too deep, overflowing
    numbers, lone surrogates)."""


def _reject_constant(name: str) -> Any:
    raise NotJSON(f"the body is not valid JSON: {name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise InvalidJSON(f"the number {text[:20]}... is too large")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise InvalidJSON(f"integers have at most {MAX_JSON_INT_DIGITS} digits")
    return int(text)


def check_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Brackets outside strings nest at most ``limit`` deep, at any point of the bytes.

    Linear and without a Python step per byte: strings (up to their closing
    quote, or the end) are cut out by one regex, the brackets left become
    +1/-1 steps, and the deepest running sum is taken in C. A body with no
    more than ``limit`` opening brackets cannot nest deeper and is not scanned.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return
    steps = _STRING.sub(b"", raw).translate(_DEPTH_STEP, _NOT_BRACKET)
    if max(accumulate(map(int.__sub__, steps, repeat(1))), default=0) > limit:
        raise InvalidJSON(f"JSON may nest at most {limit} levels deep")


def _check_strings(value: Any) -> None:
    """No lone surrogates anywhere (recursion is bounded by :func:`check_depth`)."""
    if isinstance(value, str):
        if not value.isascii() and _SURROGATE.search(value):
            raise InvalidJSON("strings must be valid Unicode (a lone surrogate was sent)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def loads(raw: bytes) -> Any:
    """Parse a body: :class:`NotJSON` (415) if it is not JSON, :class:`InvalidJSON`
    (400) if it is JSON the service refuses."""
    if _LONG_RUN not in raw.translate(_DIGIT_MAP):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library says why, in the words callers know
        else:
            if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
                check_value_depth(value)
            return value
    check_depth(raw)  # before the standard library's recursive parser sees it
    return _strict_loads(raw)


def check_value_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """A parsed value nests at most ``limit`` containers deep (what
    :func:`check_depth` says of its text), walked without recursion."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidJSON(f"JSON may nest at most {limit} levels deep")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def _strict_loads(raw: bytes) -> Any:
    """The reference parser: exact big integers, and the error a caller sees."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJSON("the body is not valid JSON: it is not UTF-8") from exc
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except ValueError as exc:
        raise NotJSON(f"the body is not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        _check_strings(value)
    return value


def dumps_bytes(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes.

    Values parsed by :func:`loads` hold no NaN or Infinity; integers beyond
    64 bits (and keys that are not strings) take the standard library's path.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )


def dumps(value: Any) -> str:
    """Compact JSON text (:func:`dumps_bytes` as a string)."""
    return dumps_bytes(value).decode("utf-8")

"""Subscription filters: which messages a work-queue subscription takes.

A filter is an Amazon SNS filter policy over a message's attributes (at most
10 names to text values), with SNS's ``MessageAttributes`` scope. It is a
JSON object ``{"<attribute name>": [condition, ...], ...}``: a message passes
when every named attribute meets at least one of its conditions (AND across
names, OR within a name). A condition is

- a string: the attribute's value is exactly that text;
- a number: the value reads as a number equal to it (``"5"``, ``"5.0"`` and
  ``"5e0"`` all match ``5``);
- ``true`` / ``false``: the value is the text ``true`` / ``false``
  (attribute values are text, see :data:`~queuey.model.filter_conditions.KEYWORD_TEXT`);
- ``null``: accepted, as SNS does, and met by no attribute (none is null);
- ``{"prefix": "abc"}`` / ``{"suffix": "abc"}``: the value starts / ends with
  that (non-empty) text;
- ``{"numeric": [">", 0, "<=", 5]}``: the value reads as a number within the
  range; one bound (``>``, ``>=``, ``<``, ``<=``), a lower bound followed by an
  upper bound, or ``["=", 3]`` alone;
- ``{"exists": true}`` / ``{"exists": false}``: the attribute is present /
  absent;
- ``{"anything-but": ...}`` with a string, a number, ``true``, ``false``,
  ``null``, a non-empty list of those, or ``{"prefix": "x"}`` /
  ``{"suffix": "x"}``: the attribute is present and is none of those.

An absent attribute meets only ``{"exists": false}``, and a message with no
attributes at all passes no filter (as SNS documents: ``exists: false``
needs at least one attribute present). A value "reads as a number" when it is
decimal notation with an optional exponent (``-12``, ``+0.5``, ``.25``,
``3.015e2``; ASCII digits) of at most
:data:`~queuey.model.filter_conditions.MAX_NUMBER_TEXT` characters; anything
else is text that no numeric condition matches.

Bounds (SNS's, but for the size; every one is checked before the work it limits):

- :data:`MAX_KEYS` (5) attribute names per filter, each 1 to
  :data:`MAX_STRING` (256) characters;
- :data:`MAX_COMBINATIONS` (150): the product of each name's number of
  conditions, counted as SNS counts it (an ``anything-but`` list is one
  condition);
- :data:`MAX_STRING` (256) characters in every string of the filter;
- numbers finite, of magnitude at most :data:`MAX_NUMBER` (1e9), with at most
  :data:`MAX_DECIMALS` (5) decimal places;
- :data:`MAX_FILTER_BYTES` (16 KiB, where SNS allows 256 KB): the canonical
  JSON's size in UTF-8. A filter is kept in its queue's metadata, which every
  API node reads and caches (20 filtered subscriptions per queue), and each
  node keeps the filters it compiled; a running lower bound of the size
  refuses a huge input before it is all read.

:func:`parse_filter` checks a filter as a user sent it and raises
:class:`FilterError` naming the bad part; its work is linear in the input and
bounded by these limits. :attr:`Filter.text` is the canonical JSON (sorted
keys, compact, integral numbers written as integers), which is what is stored;
:func:`load_filter` rebuilds a filter from it, cached, for the hot paths.
Matching (:mod:`queuey.model.filter_conditions`) costs O(conditions) per
message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from queuey.model.filter_conditions import (
    KEYWORD_TEXT,
    MAX_NUMBER_TEXT,
    AnythingBut,
    Key,
    Range,
    matches,
    read_number,
    refusing,
)

__all__ = [
    "MAX_COMBINATIONS",
    "MAX_DECIMALS",
    "MAX_FILTER_BYTES",
    "MAX_KEYS",
    "MAX_NUMBER",
    "MAX_NUMBER_TEXT",
    "MAX_STRING",
    "Filter",
    "FilterError",
    "load_filter",
    "parse_filter",
    "read_number",
]

#: Most attribute names one filter may name.
MAX_KEYS = 5
#: Most combinations of values: the product of each name's number of conditions (SNS's rule).
MAX_COMBINATIONS = 150
#: Longest string anywhere in a filter (names, values, prefixes), in characters.
MAX_STRING = 256
#: Largest canonical JSON of a filter, in UTF-8 bytes: what is stored with the queue.
MAX_FILTER_BYTES = 16 * 1024
#: Largest magnitude of a number in a filter.
MAX_NUMBER = 10**9
#: Most decimal places of a number in a filter.
MAX_DECIMALS = 5

#: Filters up to this size are cached many at a time; larger ones a few, so the
#: compiled filters a process keeps stay within a few MiB whatever is stored.
_SMALL_FILTER = 2048

_LOWER = {">": False, ">=": True}
_UPPER = {"<": False, "<=": True}
_OPERANDS = ("prefix", "suffix", "numeric", "exists", "anything-but")
_CONDITION = (
    "must be a string, a number, true, false, null or an object with one of: "
    f"{', '.join(_OPERANDS)}"
)
_BUT_VALUE = "must be a string, a number, true, false, null, a list of those, or a prefix/suffix"
_SIZE = f"must be at most {MAX_FILTER_BYTES} bytes as compact JSON"
_COMBINATIONS = (
    f"may have at most {MAX_COMBINATIONS} combinations of values "
    "(the product of each attribute's number of conditions)"
)


class FilterError(ValueError):
    """A filter broke a rule; ``part`` names where, e.g. ``"filter.color[2].prefix"``
    or ``"filter"`` (the whole), so a door can answer ``{part: message}``."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part

    def __reduce__(self):
        return type(self), (self.part, str(self))


@dataclass(frozen=True)
class Filter:
    """A checked filter. ``text`` is its canonical JSON: equal filters have equal
    text, and ``Filter(text)`` accepts only canonical text (use
    :func:`parse_filter` for what a user sent, :func:`load_filter` for what was
    stored)."""

    text: str
    _keys: tuple[Key, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or len(self.text) > MAX_FILTER_BYTES:
            raise FilterError("filter", _SIZE)
        try:
            value = json.loads(self.text)
        except (ValueError, RecursionError):
            raise FilterError("filter", "is not JSON") from None
        canonical, keys = _check(value)
        if canonical != self.text:
            raise FilterError("filter", "is not in canonical form")
        object.__setattr__(self, "_keys", keys)

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """Whether a message with ``attributes`` passes; O(conditions)."""
        return matches(self._keys, attributes)

    def refusing(self, attributes: Mapping[str, str]) -> str | None:
        """Which attribute's conditions a message with ``attributes`` fails
        (``""``: it has no attributes), or ``None`` when it passes."""
        return refusing(self._keys, attributes)

    def to_json(self) -> dict[str, Any]:
        """The filter as a JSON value (a fresh copy), for answers."""
        return json.loads(self.text)


def parse_filter(value: object) -> Filter:
    """Check ``value``, a JSON value as a user sent it (what ``json.loads``
    gives), and return its :class:`Filter`. Raises :class:`FilterError`."""
    canonical, _ = _check(value)
    return load_filter(canonical)


def load_filter(text: str) -> Filter:
    """The filter stored as ``text`` (canonical JSON), built once and cached:
    reserves and statistics call this for every read of a queue's settings."""
    if isinstance(text, str) and len(text) <= _SMALL_FILTER:
        return _load_small(text)
    return _load_large(text)


@lru_cache(maxsize=1024)
def _load_small(text: str) -> Filter:
    return Filter(text)


@lru_cache(maxsize=64)
def _load_large(text: str) -> Filter:
    return Filter(text)


# -- checking --------------------------------------------------------------------------


class _Budget:
    """What a filter has spent: its combinations, and a lower bound of its
    canonical JSON's size (each string at least its characters and quotes,
    anything else at least a byte), so a huge input stops early."""

    __slots__ = ("combinations", "size")

    def __init__(self) -> None:
        self.combinations = 1
        self.size = 2  # {}

    def combine(self, n: int) -> None:
        self.combinations *= n
        if self.combinations > MAX_COMBINATIONS:
            raise FilterError("filter", _COMBINATIONS)

    def spend(self, n: int) -> None:
        self.size += n
        if self.size > MAX_FILTER_BYTES:
            raise FilterError("filter", _SIZE)


def _check(value: object) -> tuple[str, tuple[Key, ...]]:
    """Validate ``value``; return its canonical text and its compiled keys."""
    if not isinstance(value, dict):
        raise FilterError("filter", "must be an object of attribute names to lists of conditions")
    if not value:
        raise FilterError("filter", "must name at least one attribute")
    if len(value) > MAX_KEYS:
        raise FilterError("filter", f"may name at most {MAX_KEYS} attributes")
    budget = _Budget()
    canonical: dict[str, list[Any]] = {}
    keys = []
    for name, conditions in value.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_STRING:
            raise FilterError("filter", f"attribute names must be 1 to {MAX_STRING} characters")
        _check_text("filter", name, "an attribute name")
        budget.spend(len(name) + 5)  # "name":[]
        part = f"filter.{name}"
        key = Key(name)
        canonical[name] = _check_conditions(part, conditions, key, budget)
        keys.append(key)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_FILTER_BYTES:
        raise FilterError("filter", _SIZE)
    return text, tuple(keys)


def _keyword(value: object) -> bool:
    return value is None or isinstance(value, bool)


def _check_conditions(part: str, conditions: object, key: Key, budget: _Budget) -> list[Any]:
    if not isinstance(conditions, list) or not conditions:
        raise FilterError(part, "must be a non-empty list of conditions")
    budget.combine(len(conditions))
    prefixes, suffixes, out = [], [], []
    for i, condition in enumerate(conditions):
        at = f"{part}[{i}]"
        if isinstance(condition, str):
            budget.spend(len(condition) + 2)
            key.texts.add(_check_text(at, condition))
            out.append(condition)
            continue
        if _keyword(condition):
            budget.spend(4)
            if condition is not None:
                key.texts.add(KEYWORD_TEXT[condition])
            out.append(condition)
            continue
        number = _number(at, condition)
        if number is not None:
            budget.spend(1)
            key.numbers.add(number[1])
            out.append(number[0])
            continue
        if not isinstance(condition, dict) or len(condition) != 1:
            raise FilterError(at, _CONDITION)
        ((operator, operand),) = condition.items()
        if operator not in _OPERANDS:
            raise FilterError(at, _CONDITION)
        budget.spend(len(operator) + 5)  # {"operator":}
        at = f"{at}.{operator}"
        if operator == "prefix":
            prefixes.append(_check_text(at, operand, nonempty=True))
            budget.spend(len(operand) + 2)
        elif operator == "suffix":
            suffixes.append(_check_text(at, operand, nonempty=True))
            budget.spend(len(operand) + 2)
        elif operator == "exists":
            if not isinstance(operand, bool):
                raise FilterError(at, "must be true or false")
            if operand:
                key.present = True
            else:
                key.absent = True
        elif operator == "numeric":
            operand = _check_numeric(at, operand, key)
        else:
            operand = _check_anything_but(at, operand, key, budget)
        out.append({operator: operand})
    key.prefixes, key.suffixes = tuple(prefixes), tuple(suffixes)
    return out


def _check_text(part: str, value: object, what: str = "a string", nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise FilterError(part, f"must be {what}")
    if len(value) > MAX_STRING or (nonempty and not value):
        low = 1 if nonempty else 0
        raise FilterError(part, f"must be {low} to {MAX_STRING} characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise FilterError(part, "must be valid Unicode text") from None
    return value


def _number(part: str, value: object) -> tuple[int | float, Decimal] | None:
    """``value`` as (its canonical JSON number, its exact value), or ``None``
    when it is not a number at all. Raises for a number out of bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        if -MAX_NUMBER <= value <= MAX_NUMBER:
            return value, Decimal(value)
    elif math.isfinite(value) and -MAX_NUMBER <= value <= MAX_NUMBER:
        exact = Decimal(repr(value))  # the shortest text that reads back as ``value``
        if exact.scaleb(MAX_DECIMALS) != exact.scaleb(MAX_DECIMALS).to_integral_value():
            raise FilterError(part, f"may have at most {MAX_DECIMALS} decimal places")
        if exact == exact.to_integral_value():
            return int(exact), exact
        return value, exact
    raise FilterError(part, f"must be a finite number from -{MAX_NUMBER} to {MAX_NUMBER}")


def _check_numeric(part: str, operand: object, key: Key) -> list[Any]:
    if not isinstance(operand, list) or len(operand) not in (2, 4):
        raise FilterError(part, 'must be ["=", n], one bound [">", n] or two [">=", a, "<", b]')
    out: list[Any] = []
    bounds = []
    for i in range(0, len(operand), 2):
        operator = operand[i]
        if operator not in ("=", *_LOWER, *_UPPER) or not isinstance(operator, str):
            raise FilterError(f"{part}[{i}]", "must be one of =, >, >=, <, <=")
        number = _number(f"{part}[{i + 1}]", operand[i + 1])
        if number is None:
            raise FilterError(f"{part}[{i + 1}]", "must be a number")
        out += [operator, number[0]]
        bounds.append((operator, number[1]))
    if len(bounds) == 1:
        ((operator, n),) = bounds
        if operator == "=":
            key.numbers.add(n)
        elif operator in _LOWER:
            key.ranges.append(Range(n, _LOWER[operator], None, False))
        else:
            key.ranges.append(Range(None, False, n, _UPPER[operator]))
        return out
    (low_op, low), (high_op, high) = bounds
    if "=" in (low_op, high_op):
        raise FilterError(part, '"=" stands alone: ["=", n]')
    if low_op not in _LOWER or high_op not in _UPPER:
        raise FilterError(
            part, "two comparisons must be a lower bound (>, >=) then an upper (<, <=)"
        )
    low_in, high_in = _LOWER[low_op], _UPPER[high_op]
    if low > high or (low == high and not (low_in and high_in)):
        raise FilterError(part, "the lower bound must be below the upper bound")
    key.ranges.append(Range(low, low_in, high, high_in))
    return out


def _check_anything_but(part: str, operand: object, key: Key, budget: _Budget) -> Any:
    but = AnythingBut()
    if isinstance(operand, dict):
        if len(operand) != 1 or next(iter(operand)) not in ("prefix", "suffix"):
            raise FilterError(part, 'an object here must be {"prefix": text} or {"suffix": text}')
        ((operator, text),) = operand.items()
        text = _check_text(f"{part}.{operator}", text, nonempty=True)
        budget.spend(len(operator) + len(text) + 7)
        if operator == "prefix":
            but.prefix = text
        else:
            but.suffix = text
        key.but.append(but)
        return {operator: text}
    values = operand if isinstance(operand, list) else [operand]
    if not values:
        raise FilterError(part, "must list at least one value")
    out: list[Any] = []
    for i, value in enumerate(values):
        at = f"{part}[{i}]" if isinstance(operand, list) else part
        if isinstance(value, str):
            budget.spend(len(value) + 2)
            but.texts.add(_check_text(at, value))
            out.append(value)
            continue
        budget.spend(1)
        if _keyword(value):
            if value is not None:
                but.texts.add(KEYWORD_TEXT[value])
            out.append(value)
            continue
        number = _number(at, value)
        if number is None:
            raise FilterError(at, _BUT_VALUE)
        but.numbers.add(number[1])
        out.append(number[0])
    key.but.append(but)
    return out if isinstance(operand, list) else out[0]

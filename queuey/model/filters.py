"""Subscription filters: which messages a work-queue subscription takes.

A filter is the part of Amazon SNS filter policies that users rely on, over a
message's attributes (at most 10 names to text values). It is a JSON object
``{"<attribute name>": [condition, ...], ...}``: a message passes when every
named attribute meets at least one of its conditions (AND across names, OR
within a name). A condition is

- a string: the attribute's value is exactly that text;
- a number: the value reads as a decimal number equal to it (``"5"`` and
  ``"5.0"`` both match ``5``);
- ``{"prefix": "abc"}`` / ``{"suffix": "abc"}``: the value starts / ends with
  that (non-empty) text;
- ``{"numeric": [">", 0, "<=", 5]}``: the value reads as a number within the
  range; one bound (``>``, ``>=``, ``<``, ``<=``), a lower bound followed by an
  upper bound, or ``["=", 3]`` alone;
- ``{"exists": true}`` / ``{"exists": false}``: the attribute is present /
  absent;
- ``{"anything-but": ...}`` with a string, a number, a non-empty list of
  those, or ``{"prefix": "x"}`` / ``{"suffix": "x"}``: the attribute is present
  and is none of those.

An absent attribute meets only ``{"exists": false}``. A value "reads as a
number" when it is plain decimal notation (``-12``, ``+0.5``, ``3.``, ``.25``;
no exponent, ASCII digits) of at most :data:`MAX_NUMBER_TEXT` characters;
anything else is text that no numeric condition matches.

Bounds (as SNS; every one is checked before the work it limits):

- :data:`MAX_KEYS` (5) attribute names per filter, each 1 to
  :data:`MAX_STRING` (256) characters;
- :data:`MAX_CONDITIONS` (150) conditions in all, where each value of an
  ``anything-but`` list counts as one;
- :data:`MAX_STRING` (256) characters in every string of the filter;
- numbers finite, of magnitude at most :data:`MAX_NUMBER` (1e9), with at most
  :data:`MAX_DECIMALS` (5) decimal places;
- :data:`MAX_FILTER_BYTES` (2 KiB): the canonical JSON's size in UTF-8.

:func:`parse_filter` checks a filter as a user sent it and raises
:class:`FilterError` naming the bad part; its work is linear in the input and
bounded by these limits. :attr:`Filter.text` is the canonical JSON (sorted
keys, compact, integral numbers written as integers), which is what is stored;
:func:`load_filter` rebuilds a filter from it, cached, for the hot paths.
Matching costs O(conditions) per message: exact values are set look-ups,
prefixes and suffixes one ``str.startswith`` / ``str.endswith`` call, and no
pattern is ever built from user input.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

#: Most attribute names one filter may name.
MAX_KEYS = 5
#: Most conditions in one filter, over all its names (``anything-but`` values each count).
MAX_CONDITIONS = 150
#: Longest string anywhere in a filter (names, values, prefixes), in characters.
MAX_STRING = 256
#: Largest canonical JSON of a filter, in UTF-8 bytes: what is stored with the queue.
MAX_FILTER_BYTES = 2048
#: Largest magnitude of a number in a filter.
MAX_NUMBER = 10**9
#: Most decimal places of a number in a filter.
MAX_DECIMALS = 5
#: Longest attribute value that is read as a number (longer ones are text).
MAX_NUMBER_TEXT = 40

_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_LOWER = {">": False, ">=": True}
_UPPER = {"<": False, "<=": True}
_OPERANDS = ("prefix", "suffix", "numeric", "exists", "anything-but")
_CONDITION = f"must be a string, a number or an object with one of: {', '.join(_OPERANDS)}"


class FilterError(ValueError):
    """A filter broke a rule; ``part`` names where, e.g. ``"filter.color[2].prefix"``
    or ``"filter"`` (the whole), so a door can answer ``{part: message}``."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part

    def __reduce__(self):
        return type(self), (self.part, str(self))


def read_number(value: str) -> Decimal | None:
    """``value`` as an exact number when it is plain decimal notation of at most
    :data:`MAX_NUMBER_TEXT` characters, else ``None``. The length is checked
    before anything else reads the text, and the fixed pattern before
    ``Decimal`` does (which would also take ``1e999999``, ``NaN`` or ``1_0``)."""
    if len(value) > MAX_NUMBER_TEXT or not _PLAIN_NUMBER.fullmatch(value):
        return None
    return Decimal(value)


class _Range:
    """One ``numeric`` condition; a missing bound is ``None``."""

    __slots__ = ("low", "low_in", "high", "high_in")

    def __init__(self, low: Decimal | None, low_in: bool, high: Decimal | None, high_in: bool):
        self.low, self.low_in, self.high, self.high_in = low, low_in, high, high_in

    def holds(self, n: Decimal) -> bool:
        low, high = self.low, self.high
        if low is not None and (n < low or (n == low and not self.low_in)):
            return False
        return high is None or n < high or (n == high and self.high_in)


class _AnythingBut:
    """One ``anything-but`` condition: the value is none of these."""

    __slots__ = ("texts", "numbers", "prefix", "suffix")

    def __init__(self) -> None:
        self.texts: set[str] = set()
        self.numbers: set[Decimal] = set()
        self.prefix: str | None = None
        self.suffix: str | None = None

    def holds(self, value: str) -> bool:
        if value in self.texts:
            return False
        if self.prefix is not None and value.startswith(self.prefix):
            return False
        if self.suffix is not None and value.endswith(self.suffix):
            return False
        if self.numbers:
            n = read_number(value)
            if n is not None and n in self.numbers:
                return False
        return True


class _Key:
    """The conditions on one attribute name, grouped by kind for matching."""

    __slots__ = (
        "name",
        "present",
        "absent",
        "texts",
        "numbers",
        "prefixes",
        "suffixes",
        "ranges",
        "but",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.present = False  # exists: true
        self.absent = False  # exists: false
        self.texts: set[str] = set()
        self.numbers: set[Decimal] = set()
        self.prefixes: tuple[str, ...] = ()
        self.suffixes: tuple[str, ...] = ()
        self.ranges: list[_Range] = []
        self.but: list[_AnythingBut] = []

    def holds(self, value: str) -> bool:
        """Whether a present attribute with ``value`` meets any condition."""
        if self.present or value in self.texts:
            return True
        if self.prefixes and value.startswith(self.prefixes):
            return True
        if self.suffixes and value.endswith(self.suffixes):
            return True
        if self.numbers or self.ranges:
            n = read_number(value)
            if n is not None:
                if n in self.numbers:
                    return True
                for numeric in self.ranges:
                    if numeric.holds(n):
                        return True
        for but in self.but:
            if but.holds(value):
                return True
        return False


@dataclass(frozen=True)
class Filter:
    """A checked filter. ``text`` is its canonical JSON: equal filters have equal
    text, and ``Filter(text)`` accepts only canonical text (use
    :func:`parse_filter` for what a user sent, :func:`load_filter` for what was
    stored)."""

    text: str
    _keys: tuple[_Key, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or len(self.text) > MAX_FILTER_BYTES:
            raise FilterError("filter", f"must be at most {MAX_FILTER_BYTES} bytes of JSON")
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
        for key in self._keys:
            value = attributes.get(key.name)
            if value is None or not isinstance(value, str):
                if not key.absent:
                    return False
            elif not key.holds(value):
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """The filter as a JSON value (a fresh copy), for answers."""
        return json.loads(self.text)


def parse_filter(value: object) -> Filter:
    """Check ``value``, a JSON value as a user sent it (what ``json.loads``
    gives), and return its :class:`Filter`. Raises :class:`FilterError`."""
    canonical, _ = _check(value)
    return load_filter(canonical)


@lru_cache(maxsize=1024)
def load_filter(text: str) -> Filter:
    """The filter stored as ``text`` (canonical JSON), built once and cached:
    reserves and statistics call this for every read of a queue's settings."""
    return Filter(text)


# -- checking --------------------------------------------------------------------------


def _check(value: object) -> tuple[str, tuple[_Key, ...]]:
    """Validate ``value``; return its canonical text and its compiled keys."""
    if not isinstance(value, dict):
        raise FilterError("filter", "must be an object of attribute names to lists of conditions")
    if not value:
        raise FilterError("filter", "must name at least one attribute")
    if len(value) > MAX_KEYS:
        raise FilterError("filter", f"may name at most {MAX_KEYS} attributes")
    budget = [MAX_CONDITIONS]
    canonical: dict[str, list[Any]] = {}
    keys = []
    for name, conditions in value.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_STRING:
            raise FilterError("filter", f"attribute names must be 1 to {MAX_STRING} characters")
        _check_text("filter", name, "an attribute name")
        part = f"filter.{name}"
        key = _Key(name)
        canonical[name] = _check_conditions(part, conditions, key, budget)
        keys.append(key)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_FILTER_BYTES:
        raise FilterError("filter", f"must be at most {MAX_FILTER_BYTES} bytes as compact JSON")
    return text, tuple(keys)


def _spend(budget: list[int], n: int) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise FilterError("filter", f"may have at most {MAX_CONDITIONS} conditions in all")


def _check_conditions(part: str, conditions: object, key: _Key, budget: list[int]) -> list[Any]:
    if not isinstance(conditions, list) or not conditions:
        raise FilterError(part, "must be a non-empty list of conditions")
    _spend(budget, len(conditions))
    prefixes, suffixes, out = [], [], []
    for i, condition in enumerate(conditions):
        at = f"{part}[{i}]"
        if isinstance(condition, str):
            key.texts.add(_check_text(at, condition))
            out.append(condition)
            continue
        number = _number(at, condition)
        if number is not None:
            key.numbers.add(number[1])
            out.append(number[0])
            continue
        if not isinstance(condition, dict) or len(condition) != 1:
            raise FilterError(at, _CONDITION)
        ((operator, operand),) = condition.items()
        if operator not in _OPERANDS:
            raise FilterError(at, _CONDITION)
        at = f"{at}.{operator}"
        if operator == "prefix":
            prefixes.append(_check_text(at, operand, nonempty=True))
        elif operator == "suffix":
            suffixes.append(_check_text(at, operand, nonempty=True))
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


def _check_numeric(part: str, operand: object, key: _Key) -> list[Any]:
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
            key.ranges.append(_Range(n, _LOWER[operator], None, False))
        else:
            key.ranges.append(_Range(None, False, n, _UPPER[operator]))
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
    key.ranges.append(_Range(low, low_in, high, high_in))
    return out


def _check_anything_but(part: str, operand: object, key: _Key, budget: list[int]) -> Any:
    but = _AnythingBut()
    if isinstance(operand, dict):
        if len(operand) != 1 or next(iter(operand)) not in ("prefix", "suffix"):
            raise FilterError(part, 'an object here must be {"prefix": text} or {"suffix": text}')
        ((operator, text),) = operand.items()
        text = _check_text(f"{part}.{operator}", text, nonempty=True)
        if operator == "prefix":
            but.prefix = text
        else:
            but.suffix = text
        key.but.append(but)
        return {operator: text}
    values = operand if isinstance(operand, list) else [operand]
    if not values:
        raise FilterError(part, "must list at least one value")
    _spend(budget, len(values) - 1)  # the condition itself was counted
    out: list[Any] = []
    for i, value in enumerate(values):
        at = f"{part}[{i}]" if isinstance(operand, list) else part
        if isinstance(value, str):
            but.texts.add(_check_text(at, value))
            out.append(value)
            continue
        number = _number(at, value)
        if number is None:
            raise FilterError(at, "must be a string, a number, a list of those, or a prefix/suffix")
        but.numbers.add(number[1])
        out.append(number[0])
    key.but.append(but)
    return out if isinstance(operand, list) else out[0]

"""A subscription filter's conditions, compiled for matching (:mod:`queuey.model.filters`
checks what a user sent and builds these).

Matching one message costs O(conditions): exact values are set look-ups,
prefixes and suffixes one ``str.startswith`` / ``str.endswith`` call, a value
is read as a number at most once per attribute, and no pattern is ever built
from user input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal

#: Longest attribute value that is read as a number (longer ones are text).
MAX_NUMBER_TEXT = 40

#: Decimal notation, ASCII digits only (the common case, read at once).
_PLAIN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
#: The same with an exponent.
_SCIENTIFIC = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))[eE]([+-]?[0-9]+)")
#: Exponents are read within +-this: the digits before one are at most 40, so a
#: larger exponent leaves a value beyond every filter number (at most 1e9, 5
#: decimal places) on the same side, and a smaller one as a non-zero value
#: closer to zero than any of them, exactly as the exponent written would.
_EXPONENT = 1000

#: How the keywords ``true`` and ``false`` are matched: attribute values are
#: text, so a keyword meets the text that spells it in JSON.
KEYWORD_TEXT = {True: "true", False: "false"}


def read_number(value: str) -> Decimal | None:
    """``value`` as a number when it is decimal notation, with an optional
    exponent (``3.015e2``), of at most :data:`MAX_NUMBER_TEXT` characters,
    else ``None``; exact, but for an exponent beyond +-1000, which compares
    with every filter number as the one written. The length is checked before
    anything else reads the text, and the fixed pattern before ``Decimal``
    does (which would also take ``NaN``, ``Infinity`` or ``1_0``)."""
    if len(value) > MAX_NUMBER_TEXT:
        return None
    if _PLAIN.fullmatch(value):
        return Decimal(value)
    found = _SCIENTIFIC.fullmatch(value)
    if found is None:
        return None
    digits, exponent = found.groups()
    power = max(-_EXPONENT, min(_EXPONENT, int(exponent)))
    return Decimal(f"{digits}e{power}")


class Range:
    """One ``numeric`` condition; a missing bound is ``None``."""

    __slots__ = ("low", "low_in", "high", "high_in")

    def __init__(self, low: Decimal | None, low_in: bool, high: Decimal | None, high_in: bool):
        self.low, self.low_in, self.high, self.high_in = low, low_in, high, high_in

    def holds(self, n: Decimal) -> bool:
        low, high = self.low, self.high
        if low is not None and (n < low or (n == low and not self.low_in)):
            return False
        return high is None or n < high or (n == high and self.high_in)


class AnythingBut:
    """One ``anything-but`` condition: the value is present and none of these
    (``null`` among them excludes nothing: no attribute value is null)."""

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


class Key:
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
        self.ranges: list[Range] = []
        self.but: list[AnythingBut] = []

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


def matches(keys: Sequence[Key], attributes: Mapping[str, str]) -> bool:
    """Whether a message with ``attributes`` passes every key (AND across
    names, OR within one). A message with no attributes passes no filter:
    as SNS documents, ``{"exists": false}`` matches only when at least one
    attribute is present."""
    return refusing(keys, attributes) is None


def refusing(keys: Sequence[Key], attributes: Mapping[str, str]) -> str | None:
    """The name of the first attribute whose conditions a message with
    ``attributes`` fails (see :func:`matches`), ``""`` when it has no
    attributes at all, or ``None`` when it passes."""
    if not attributes:
        return ""
    for key in keys:
        value = attributes.get(key.name)
        if value is None or not isinstance(value, str):
            if not key.absent:
                return key.name
        elif not key.holds(value):
            return key.name
    return None

"""Subscription filters under random input (:mod:`queuey.model.filters`):
anything a user may send is either a filter or a :class:`FilterError`, quickly;
a stored filter behaves as the one parsed; and matching agrees with a plain
reading of the language, written here independently, on any attributes."""

from __future__ import annotations

import json
import math
import operator
import time
from datetime import timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey.model.filters import (
    MAX_COMBINATIONS,
    MAX_FILTER_BYTES,
    MAX_NUMBER_TEXT,
    FilterError,
    load_filter,
    parse_filter,
)

pytestmark = pytest.mark.unit

#: Few examples each: the whole suite has a time budget, and these grammars are small.
QUICK = settings(max_examples=100, deadline=timedelta(milliseconds=500))

# -- a plain reading of the language (the oracle) -----------------------------------------

COMPARE = {
    "=": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _as_number(text: str) -> Fraction | None:
    """Decimal notation with an optional exponent, ASCII digits, bounded length.
    An exponent beyond +-60 is taken as +-60: against a filter's numbers (at
    most 1e9, 5 decimal places) such a value compares the same."""
    if len(text) > MAX_NUMBER_TEXT:
        return None
    body = text[1:] if text[:1] in ("+", "-") else text
    digits = "0123456789"
    mantissa, marker, exponent = body.lower().partition("e")
    if marker:
        unsigned = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if not unsigned or any(ch not in digits for ch in unsigned):
            return None
        power = max(-60, min(60, int(exponent)))
    else:
        power = 0
    whole, _, fraction = mantissa.partition(".")
    if not (whole or fraction) or any(ch not in digits for ch in whole + fraction):
        return None
    if mantissa.count(".") > 1:
        return None
    value = Fraction(int(whole or "0")) + Fraction(int(fraction or "0"), 10 ** len(fraction))
    value *= Fraction(10) ** power
    return -value if text.startswith("-") else value


def _exact(number: int | float) -> Fraction:
    return Fraction(repr(number))  # the decimal a user wrote, not the binary float


def _same(value: str, wanted: str | int | float | bool | None) -> bool:
    if wanted is None:
        return False  # no attribute value is null
    if isinstance(wanted, bool):
        return value == ("true" if wanted else "false")
    if isinstance(wanted, str):
        return value == wanted
    n = _as_number(value)
    return n is not None and n == _exact(wanted)


def _meets(condition, value: str | None) -> bool:
    if isinstance(condition, dict):
        ((op, arg),) = condition.items()
        if op == "exists":
            return (value is not None) == arg
    if value is None:
        return False
    if not isinstance(condition, dict):
        return _same(value, condition)
    if op == "prefix":
        return value.startswith(arg)
    if op == "suffix":
        return value.endswith(arg)
    if op == "numeric":
        n = _as_number(value)
        pairs = zip(arg[::2], arg[1::2], strict=True)
        return n is not None and all(COMPARE[o](n, _exact(x)) for o, x in pairs)
    assert op == "anything-but"
    if isinstance(arg, dict):
        ((kind, text),) = arg.items()
        return not (value.startswith(text) if kind == "prefix" else value.endswith(text))
    return not any(_same(value, x) for x in (arg if isinstance(arg, list) else [arg]))


def oracle(policy: dict, attributes: dict[str, str]) -> bool:
    if not attributes:
        return False  # as SNS: even exists:false needs an attribute present
    return all(any(_meets(c, attributes.get(name)) for c in cs) for name, cs in policy.items())


# -- strategies -----------------------------------------------------------------------------

NAMES = st.sampled_from(["colour", "size", "n", "région", "a.b"])
WORDS = st.sampled_from(
    ["", "red", "re", "blue", "bl", "5", "05", "-1.5", "ed", "é", "x.tmp", "true", "false"]
)
KEYWORDS = st.sampled_from([True, False, None])
NUMBERS = st.one_of(
    st.integers(-12, 12),
    st.integers(-48, 48).map(lambda k: k / 4),
    st.sampled_from([0.1, -0.3, 0.00001, 123456.12345, 10**9, -(10**9), 1e9]),
)


@st.composite
def numeric_ranges(draw) -> list:
    kind = draw(st.sampled_from(["=", "one", "two"]))
    if kind == "=":
        return ["=", draw(NUMBERS)]
    if kind == "one":
        return [draw(st.sampled_from([">", ">=", "<", "<="])), draw(NUMBERS)]
    low, high = sorted([draw(NUMBERS), draw(NUMBERS)])
    low_op, high_op = draw(st.sampled_from([">", ">="])), draw(st.sampled_from(["<", "<="]))
    if low == high:
        low_op, high_op = ">=", "<="
    return [low_op, low, high_op, high]


CONDITIONS = st.one_of(
    WORDS,
    NUMBERS,
    KEYWORDS,
    st.builds(lambda w: {"prefix": w}, WORDS.filter(bool)),
    st.builds(lambda w: {"suffix": w}, WORDS.filter(bool)),
    st.builds(lambda r: {"numeric": r}, numeric_ranges()),
    st.builds(lambda b: {"exists": b}, st.booleans()),
    st.builds(lambda v: {"anything-but": v}, st.one_of(WORDS, NUMBERS, KEYWORDS)),
    st.builds(
        lambda v: {"anything-but": v}, st.lists(st.one_of(WORDS, NUMBERS, KEYWORDS), min_size=1)
    ),
    st.builds(
        lambda k, w: {"anything-but": {k: w}}, st.sampled_from(["prefix", "suffix"]), WORDS
    ).filter(lambda c: all(c["anything-but"].values())),
)
POLICIES = st.dictionaries(NAMES, st.lists(CONDITIONS, min_size=1, max_size=6), min_size=1)

NUMBER_TEXTS = st.one_of(
    st.decimals(-100, 100, places=6, allow_nan=False).map(str),
    NUMBERS.map(str),
    st.sampled_from(["+5", "5.", ".25", "-0", "1e3", "1_0", "٥", " 5", "NaN", "-", "."]),
    st.sampled_from(["5e0", "2.5E+1", "25e-1", "-1e-9", "1e99", "-3e-99", "1e", "e1", "1e+"]),
    st.sampled_from(["1e999999999999999999", "12e999999999999999999", "0e5", "Infinity"]),
    st.sampled_from(["-1e-9999999999999999999", "0.000001e1", "1234567890.123456e-1"]),
)
VALUES = st.one_of(WORDS, NUMBER_TEXTS, st.text(max_size=8))
ATTRIBUTES = st.dictionaries(st.one_of(NAMES, st.text(max_size=4)), VALUES, max_size=10)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
OPERATORS = st.sampled_from(["prefix", "suffix", "numeric", "exists", "anything-but", "regex"])
#: Shapes close to a filter, so the checks past the first are reached too.
NEAR = st.dictionaries(
    st.one_of(NAMES, st.text(min_size=1, max_size=3)),
    st.one_of(
        JSON,
        st.lists(
            st.one_of(CONDITIONS, JSON, st.dictionaries(OPERATORS, JSON, min_size=1)),
            max_size=5,
        ),
        st.lists(st.builds(lambda o, x: {o: x}, OPERATORS, JSON), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=5,
)


# -- properties -----------------------------------------------------------------------------


@QUICK
@given(st.one_of(JSON, NEAR, NEAR))
def test_any_json_is_a_filter_or_a_filter_error(value):
    try:
        found = parse_filter(value)
    except FilterError as exc:
        assert exc.part == "filter" or exc.part.startswith("filter.")
        return
    assert parse_filter(found.to_json()) == found
    assert found.matches({}) in (True, False)


@QUICK
@given(POLICIES, st.lists(ATTRIBUTES, min_size=1, max_size=5))
def test_a_stored_filter_behaves_as_the_one_sent_and_as_the_language_says(policy, messages):
    try:
        found = parse_filter(policy)
    except FilterError as exc:  # only the combinations or the size can refuse these
        combinations = math.prod(len(conditions) for conditions in policy.values())
        size = len(json.dumps(policy, ensure_ascii=False).encode())
        assert exc.part == "filter" and (combinations > MAX_COMBINATIONS or size > MAX_FILTER_BYTES)
        return
    stored = load_filter(found.text)
    assert parse_filter(json.loads(found.text)).text == found.text
    for attributes in messages:
        assert stored.matches(attributes) is found.matches(attributes) is oracle(policy, attributes)


@QUICK
@given(POLICIES, st.dictionaries(st.text(), st.text(), max_size=10))
def test_matching_never_raises_on_any_text(policy, attributes):
    try:
        found = parse_filter(policy)
    except FilterError:
        return
    named = {name: attributes.get(name, "") for name in policy} | attributes
    for message in (attributes, named):
        assert found.matches(message) is oracle(policy, message)


#: Built when the test runs, not when the module is collected.
HUGE = {
    "conditions": lambda: {"c": ["v"] * 10**6},
    "string": lambda: {"c": ["x" * 10**7]},
    "name": lambda: {"x" * 10**7: ["v"]},
    "names": lambda: {f"k{i}": ["v"] for i in range(10**5)},
    "integer": lambda: {"c": [10 ** (10**4)]},
    "bound": lambda: {"c": [{"numeric": [">", 10 ** (10**4)]}]},
    "but": lambda: {"c": [{"anything-but": ["v"] * 10**6}]},
    "range": lambda: {"c": [{"numeric": [">", 1] * 10**5}]},
    "object": lambda: {"c": [{"prefix": "a"} | {f"k{i}": 1 for i in range(10**5)}]},
}


@pytest.mark.parametrize("kind", sorted(HUGE))
def test_huge_input_is_refused_without_reading_it_all(kind):
    value = HUGE[kind]()
    started = time.process_time()  # CPU time: other processes on the machine do not count
    with pytest.raises(FilterError):
        parse_filter(value)
    assert time.process_time() - started < 0.05


def test_huge_attribute_values_are_matched_quickly():
    found = parse_filter({"n": [{"numeric": [">", 0]}, 5, {"anything-but": [1]}]})
    huge = {"n": "9" * 10**6}
    started = time.process_time()
    assert found.matches(huge)  # too long to be a number: only anything-but takes it
    assert time.process_time() - started < 0.05

"""The filter's JSON Schema in ``/openapi.json`` (:mod:`queuey.web.filter_schema`)
says what the parser (:mod:`queuey.model.filters`) does: a filter the schema
allows is accepted, or refused only by a rule the schema cannot state
(``FILTER_RULES_UNSTATED``), and a filter the parser accepts is one the
schema allows. The filters are SNS's examples and random near-filters."""

from __future__ import annotations

import re
from datetime import timedelta

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey.model.filters import FilterError, parse_filter
from queuey.web.filter_schema import FILTER_RULES_UNSTATED, filter_schema

pytestmark = pytest.mark.unit

SCHEMA = jsonschema_rs.Draft202012Validator(filter_schema())
UNSTATED = [re.compile(pattern) for pattern in FILTER_RULES_UNSTATED]

#: SNS's documented filter policies (message-attribute scope).
SNS_POLICIES = [
    {
        "store": ["example_corp"],
        "event": [{"anything-but": "order_cancelled"}],
        "customer_interests": ["rugby", "football", "baseball"],
        "price_usd": [{"numeric": [">=", 100]}],
    },
    {
        "store": ["example_corp"],
        "event": ["order_cancelled"],
        "encrypted": [False],
        "customer_interests": ["basketball", "baseball"],
    },
    {"price_usd": [{"numeric": ["=", 301.5]}]},
    {"price_usd": [{"numeric": [">", 0, "<=", 150]}]},
    {"price": [{"anything-but": [100, 500]}]},
    {"event": [{"anything-but": {"prefix": "order-"}}]},
    {"store": [{"exists": True}]},
    {"store": [{"exists": False}]},
    {"customer_interests": [{"prefix": "bas"}]},
    {"error": [None], "flag": [True]},
]


def _agree(value) -> None:
    allowed = SCHEMA.is_valid(value)
    try:
        parse_filter(value)
    except FilterError as exc:
        assert not allowed or any(p.fullmatch(str(exc)) for p in UNSTATED), (value, str(exc))
    else:
        assert allowed, value


@pytest.mark.parametrize("policy", SNS_POLICIES)
def test_sns_example_policies_are_allowed_and_accepted(policy):
    assert SCHEMA.is_valid(policy)
    parse_filter(policy)


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**10), 10**10),
    st.floats(-2e9, 2e9, allow_nan=False),
    st.sampled_from([0.5, 0.00001, 0.000001, 1e9, -1e9, 1e10]),
    TEXT,
    st.sampled_from(["", "x" * 256, "x" * 257, "=", ">", ">=", "<", "<="]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
OPERATORS = st.sampled_from(
    ["prefix", "suffix", "numeric", "exists", "anything-but", "equals-ignore-case", "cidr"]
)
NUMERIC = st.lists(st.one_of(st.sampled_from(["=", ">", ">=", "<", "<="]), SCALARS), max_size=5)
CONDITION = st.one_of(
    SCALARS,
    st.builds(lambda op, x: {op: x}, OPERATORS, st.one_of(SCALARS, NUMERIC, JSON)),
    st.builds(lambda x: {"numeric": x}, NUMERIC),
    st.builds(lambda x: {"anything-but": x}, st.lists(SCALARS, max_size=4)),
    st.builds(
        lambda op, x: {"anything-but": {op: x}}, st.sampled_from(["prefix", "suffix"]), SCALARS
    ),
    JSON,
)
WORD = TEXT.filter(bool)
NUMBER = st.one_of(st.integers(-(10**9), 10**9), st.sampled_from([0.5, -2.25, 0.00001, 301.5]))
RANGE = st.one_of(
    st.tuples(st.sampled_from(["=", ">", ">=", "<", "<="]), NUMBER).map(list),
    st.tuples(NUMBER, NUMBER).map(sorted).map(lambda b: [">=", b[0], "<", b[1] + 1]),
)
KEYWORD = st.sampled_from([True, False, None])
GOOD = st.one_of(
    TEXT,
    NUMBER,
    KEYWORD,
    st.builds(lambda w: {"prefix": w}, WORD),
    st.builds(lambda w: {"suffix": w}, WORD),
    st.builds(lambda r: {"numeric": r}, RANGE),
    st.builds(lambda b: {"exists": b}, st.booleans()),
    st.builds(lambda v: {"anything-but": v}, st.one_of(TEXT, NUMBER, KEYWORD)),
    st.builds(
        lambda v: {"anything-but": v}, st.lists(st.one_of(TEXT, NUMBER, KEYWORD), min_size=1)
    ),
    st.builds(lambda w: {"anything-but": {"prefix": w}}, WORD),
)
POLICY = st.dictionaries(WORD, st.lists(GOOD, min_size=1, max_size=4), min_size=1, max_size=5)
NEAR = st.dictionaries(
    st.one_of(st.sampled_from(["a", "b", "c", "d", "e", "f"]), TEXT),
    st.one_of(st.lists(CONDITION, max_size=13), CONDITION),
    max_size=6,
)


@settings(max_examples=300, deadline=timedelta(seconds=1))
@given(st.one_of(POLICY, NEAR, JSON))
def test_the_schema_and_the_parser_agree(value):
    _agree(value)

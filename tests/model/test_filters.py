"""Subscription filters (:mod:`queuey.model.filters`): what each condition
takes and refuses, the part a bad filter is blamed on, the stored form, and
what matching a message costs."""

from __future__ import annotations

import json
import pickle
import timeit

import pytest

from queuey.model.filters import (
    MAX_COMBINATIONS,
    MAX_FILTER_BYTES,
    MAX_KEYS,
    MAX_STRING,
    Filter,
    FilterError,
    load_filter,
    parse_filter,
)

pytestmark = pytest.mark.unit

# (filter, attributes, passes): at least one match and one refusal per kind of condition.
CASES = [
    # exact strings; an absent attribute meets nothing but exists:false
    ({"c": ["red"]}, {"c": "red"}, True),
    ({"c": ["red"]}, {"c": "Red"}, False),
    ({"c": ["red"]}, {"c": "red "}, False),
    ({"c": ["red"]}, {}, False),
    ({"c": ["red"]}, {"d": "red"}, False),
    ({"c": [""]}, {"c": ""}, True),
    ({"c": ["red", "blue"]}, {"c": "blue"}, True),
    ({"c": ["5"]}, {"c": "5.0"}, False),  # a string condition compares text
    # numbers compare numerically
    ({"n": [5]}, {"n": "5"}, True),
    ({"n": [5]}, {"n": "5.0"}, True),
    ({"n": [5]}, {"n": "+5.000"}, True),
    ({"n": [5]}, {"n": "05"}, True),
    ({"n": [5]}, {"n": "5.00001"}, False),
    ({"n": [5]}, {"n": "five"}, False),
    ({"n": [5]}, {"n": "5e0"}, True),  # an exponent, as SNS reads 3.015e2
    ({"n": [5]}, {"n": "0.5E+1"}, True),
    ({"n": [5]}, {"n": "5e"}, False),
    ({"n": [5]}, {"n": "e5"}, False),
    ({"n": [5]}, {"n": "5e0.5"}, False),
    ({"n": [{"numeric": [">", 10**9]}]}, {"n": "1e999999999999999999"}, True),
    ({"n": [{"numeric": [">", 0]}]}, {"n": "1e9999999999999999999"}, True),  # beyond Decimal
    ({"n": [{"numeric": ["<", -(10**9)]}]}, {"n": "-1e99999999999999999999999999999"}, True),
    ({"n": [0]}, {"n": "1e-99999999999999999999999999999"}, False),
    ({"n": [{"numeric": [">", 0, "<", 0.00001]}]}, {"n": "1e-99999999999999999999"}, True),
    ({"n": [0]}, {"n": "0e99999999999999999999999999999"}, True),
    ({"n": [{"numeric": ["<", 0.00001]}]}, {"n": "1e-999999999999999999"}, True),
    ({"n": [5]}, {"n": " 5"}, False),
    ({"n": [5]}, {"n": "٥"}, False),  # ASCII digits only
    ({"n": [0.25]}, {"n": ".25"}, True),
    ({"n": [-3.5]}, {"n": "-3.50"}, True),
    ({"n": [0]}, {"n": "-0"}, True),
    ({"n": [0.1]}, {"n": "0.1"}, True),  # exact decimals, not binary floats
    ({"n": [5]}, {"n": "5" + "0" * 60}, False),  # too long to read as a number
    # prefix and suffix
    ({"c": [{"prefix": "bl"}]}, {"c": "blue"}, True),
    ({"c": [{"prefix": "bl"}]}, {"c": "bl"}, True),
    ({"c": [{"prefix": "bl"}]}, {"c": "able"}, False),
    ({"c": [{"prefix": "bl"}, {"prefix": "gr"}]}, {"c": "green"}, True),
    ({"c": [{"prefix": ".*"}]}, {"c": "anything"}, False),  # no patterns
    ({"c": [{"suffix": "ue"}]}, {"c": "blue"}, True),
    ({"c": [{"suffix": "ue"}]}, {"c": "bluer"}, False),
    # numeric ranges
    ({"n": [{"numeric": [">", 0, "<=", 5]}]}, {"n": "5"}, True),
    ({"n": [{"numeric": [">", 0, "<=", 5]}]}, {"n": "0.00001"}, True),
    ({"n": [{"numeric": [">", 0, "<=", 5]}]}, {"n": "0"}, False),
    ({"n": [{"numeric": [">", 0, "<=", 5]}]}, {"n": "5.0000000001"}, False),
    ({"n": [{"numeric": [">=", 10, "<", 40]}]}, {"n": "10"}, True),
    ({"n": [{"numeric": [">=", 10, "<", 40]}]}, {"n": "40"}, False),
    ({"n": [{"numeric": [">=", 10, "<", 40]}]}, {"n": "39.99999999"}, True),
    ({"n": [{"numeric": [">=", 10, "<", 40]}]}, {"n": "ten"}, False),
    ({"n": [{"numeric": ["=", 3]}]}, {"n": "3.0"}, True),
    ({"n": [{"numeric": ["=", 3]}]}, {"n": "3.1"}, False),
    ({"n": [{"numeric": [">", -1.5]}]}, {"n": "-1.49999"}, True),
    ({"n": [{"numeric": [">", -1.5]}]}, {"n": "-1.5"}, False),
    ({"n": [{"numeric": ["<", 0]}]}, {"n": "-0.000000001"}, True),
    ({"n": [{"numeric": ["<", 0]}]}, {"n": "99999999999999999999"}, False),
    ({"n": [{"numeric": [">=", 1e9]}]}, {"n": "99999999999999999999"}, True),
    ({"n": [{"numeric": ["<=", 2]}]}, {"n": "2."}, True),
    ({"n": [{"numeric": ["<=", 2]}]}, {}, False),
    # exists
    ({"r": [{"exists": True}]}, {"r": ""}, True),
    ({"r": [{"exists": True}]}, {}, False),
    ({"r": [{"exists": False}]}, {"other": "x"}, True),
    ({"r": [{"exists": False}]}, {}, False),  # no attributes at all: as SNS, no match
    ({"r": [{"exists": False}]}, {"r": "eu"}, False),
    ({"r": [{"exists": False}, "eu"]}, {"r": "eu"}, True),
    ({"r": [{"exists": False}, "eu"]}, {"r": "us"}, False),
    # true, false and null: attribute values are text
    ({"e": [False]}, {"e": "false"}, True),
    ({"e": [False]}, {"e": "False"}, False),
    ({"e": [False]}, {"e": "0"}, False),
    ({"e": [True]}, {"e": "true"}, True),
    ({"e": [True]}, {}, False),
    ({"e": [None]}, {"e": ""}, False),
    ({"e": [None]}, {"e": "null"}, False),
    ({"e": [None]}, {"x": "y"}, False),
    ({"e": [None, "a"]}, {"e": "a"}, True),
    ({"e": [{"anything-but": False}]}, {"e": "false"}, False),
    ({"e": [{"anything-but": False}]}, {"e": "true"}, True),
    ({"e": [{"anything-but": None}]}, {"e": "anything"}, True),
    ({"e": [{"anything-but": None}]}, {"x": "y"}, False),
    ({"e": [{"anything-but": [True, "x", None]}]}, {"e": "true"}, False),
    # anything-but
    ({"c": [{"anything-but": "green"}]}, {"c": "red"}, True),
    ({"c": [{"anything-but": "green"}]}, {"c": "green"}, False),
    ({"c": [{"anything-but": "green"}]}, {}, False),  # present and not green
    ({"c": [{"anything-but": ["a", "b"]}]}, {"c": "b"}, False),
    ({"c": [{"anything-but": ["a", "b"]}]}, {"c": "c"}, True),
    ({"c": [{"anything-but": [1, "x"]}]}, {"c": "1.0"}, False),
    ({"c": [{"anything-but": [1, "x"]}]}, {"c": "2"}, True),
    ({"c": [{"anything-but": 7}]}, {"c": "seven"}, True),
    ({"c": [{"anything-but": {"prefix": "test-"}}]}, {"c": "test-1"}, False),
    ({"c": [{"anything-but": {"prefix": "test-"}}]}, {"c": "prod-1"}, True),
    ({"c": [{"anything-but": {"suffix": ".tmp"}}]}, {"c": "a.tmp"}, False),
    ({"c": [{"anything-but": {"suffix": ".tmp"}}]}, {"c": "a.txt"}, True),
    # every name must pass (AND); any condition of a name may (OR)
    ({"c": ["red"], "s": [{"numeric": [">", 1]}]}, {"c": "red", "s": "2"}, True),
    ({"c": ["red"], "s": [{"numeric": [">", 1]}]}, {"c": "red", "s": "1"}, False),
    ({"c": ["red"], "s": [{"numeric": [">", 1]}]}, {"c": "red"}, False),
    ({"c": ["red", {"numeric": [">", 1]}]}, {"c": "3"}, True),
]


@pytest.mark.parametrize(("policy", "attributes", "passes"), CASES)
def test_each_condition_takes_and_refuses(policy, attributes, passes):
    found = parse_filter(policy)
    assert found.matches(attributes) is passes
    assert load_filter(found.text).matches(attributes) is passes


LONG = "x" * (MAX_STRING + 1)

# (filter, the part blamed)
BAD = [
    ("colour=red", "filter"),
    (None, "filter"),
    (["red"], "filter"),
    ({}, "filter"),
    ({f"k{i}": ["v"] for i in range(MAX_KEYS + 1)}, "filter"),
    ({"": ["v"]}, "filter"),
    ({LONG: ["v"]}, "filter"),
    ({"\udc80": ["v"]}, "filter"),  # not UTF-8: no part may carry it
    ({5: ["v"]}, "filter"),
    ({"c": ["v"] * (MAX_COMBINATIONS + 1)}, "filter"),
    ({"a": ["v"] * 16, "b": ["w"] * 10}, "filter"),  # 160 combinations
    ({"a": ["v"] * 2, "b": ["w"] * 3, "c": ["x"] * 5, "d": ["y"] * 6}, "filter"),  # 180
    ({"c": [LONG[:250]] * 66}, "filter"),  # over MAX_FILTER_BYTES
    ({"c": [{"anything-but": ["v"] * 6000}]}, "filter"),  # over MAX_FILTER_BYTES
    ({"c": "red"}, "filter.c"),
    ({"c": []}, "filter.c"),
    ({"c": {"prefix": "a"}}, "filter.c"),
    ({"c": ["red", {"exists": None}]}, "filter.c[1].exists"),
    ({"c": [["red"]]}, "filter.c[0]"),
    ({"c": [LONG]}, "filter.c[0]"),
    ({"c": ["\ud800"]}, "filter.c[0]"),
    ({"c": [float("nan")]}, "filter.c[0]"),
    ({"c": [float("inf")]}, "filter.c[0]"),
    ({"c": [10**9 + 1]}, "filter.c[0]"),
    ({"c": [10**400]}, "filter.c[0]"),
    ({"c": [0.000001]}, "filter.c[0]"),
    ({"c": [{}]}, "filter.c[0]"),
    ({"c": [{"regex": ".*"}]}, "filter.c[0]"),
    ({"c": [{"prefix": "a", "suffix": "b"}]}, "filter.c[0]"),
    ({"c": [{"prefix": ""}]}, "filter.c[0].prefix"),
    ({"c": [{"prefix": 5}]}, "filter.c[0].prefix"),
    ({"c": [{"suffix": LONG}]}, "filter.c[0].suffix"),
    ({"c": [{"exists": "yes"}]}, "filter.c[0].exists"),
    ({"c": [{"exists": 1}]}, "filter.c[0].exists"),
    ({"c": [{"numeric": 5}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": [">"]}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": [">", 1, "<", 2, "=", 3]}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": [">", 5, "<", 1]}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": [">", 1, "<", 1]}]}, "filter.c[0].numeric"),  # empty range
    ({"c": [{"numeric": [">", 1, ">=", 2]}]}, "filter.c[0].numeric"),  # two lower bounds
    ({"c": [{"numeric": ["<", 5, ">", 1]}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": ["=", 1, "<", 2]}]}, "filter.c[0].numeric"),
    ({"c": [{"numeric": ["!=", 1]}]}, "filter.c[0].numeric[0]"),
    ({"c": [{"numeric": [">", "1"]}]}, "filter.c[0].numeric[1]"),
    ({"c": [{"numeric": [">", 1, "<", 2e9]}]}, "filter.c[0].numeric[3]"),
    ({"c": [{"numeric": [">", True]}]}, "filter.c[0].numeric[1]"),
    ({"c": [{"anything-but": []}]}, "filter.c[0].anything-but"),
    ({"c": [{"anything-but": {}}]}, "filter.c[0].anything-but"),
    ({"c": [{"anything-but": {"exists": True}}]}, "filter.c[0].anything-but"),
    ({"c": [{"anything-but": {"prefix": ""}}]}, "filter.c[0].anything-but.prefix"),
    ({"c": [{"anything-but": ["a", {"prefix": "b"}]}]}, "filter.c[0].anything-but[1]"),
    ({"c": [{"anything-but": ["a", ["b"]]}]}, "filter.c[0].anything-but[1]"),
    ({"c": [{"anything-but": 1e10}]}, "filter.c[0].anything-but"),
]


@pytest.mark.parametrize(("policy", "part"), BAD)
def test_a_bad_filter_names_the_part(policy, part):
    with pytest.raises(FilterError) as caught:
        parse_filter(policy)
    assert caught.value.part == part, str(caught.value)
    assert isinstance(caught.value, ValueError) and str(caught.value)
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.part, str(again)) == (part, str(caught.value))


def test_the_limits_themselves_are_allowed():
    names = {f"k{i}": ["v"] for i in range(MAX_KEYS)}
    assert parse_filter(names).matches({name: "v" for name in names})
    parse_filter({"c": [str(i) for i in range(MAX_COMBINATIONS)]})
    parse_filter({"a": [str(i) for i in range(15)], "b": [str(i) for i in range(10)]})
    parse_filter({"c": [LONG[:250]] * 64})  # 16,207 bytes
    parse_filter({"c": ["x" * MAX_STRING], "y" * MAX_STRING: [1]})
    parse_filter({"c": [{"numeric": [">=", -(10**9), "<=", 1e9]}, 0.00001, 123456789.12345]})


def test_the_canonical_text_is_what_is_stored_and_shown():
    sent = {"size": [{"numeric": [">=", 10.0, "<", 40]}], "colour": ["red", {"prefix": "bl"}]}
    found = parse_filter(sent)
    assert found.text == (
        '{"colour":["red",{"prefix":"bl"}],"size":[{"numeric":[">=",10,"<",40]}]}'
    )
    assert found == parse_filter(json.loads(json.dumps(sent)))  # key order does not matter
    assert found.to_json() == {
        "colour": ["red", {"prefix": "bl"}],
        "size": [{"numeric": [">=", 10, "<", 40]}],
    }
    found.to_json()["colour"].clear()  # a copy: the filter is unchanged
    assert found.to_json()["colour"] == ["red", {"prefix": "bl"}]
    assert len(found.text.encode()) <= MAX_FILTER_BYTES
    assert parse_filter({"c": ["é"]}).text == '{"c":["é"]}'  # UTF-8, not \\u escapes


def test_stored_text_is_loaded_once_and_must_be_canonical():
    text = parse_filter({"a": ["b"]}).text
    assert load_filter(text) is load_filter(text)
    assert Filter(text) == load_filter(text)
    odd = ('{"a": ["b"]}', '{"b":["x"],"a":["y"]}', '{"a":["x"],"a":["x"]}', '{"a":[NaN]}')
    for stored in (*odd, "not json", '{"a":[]}', "x" * 5000, "[" * 1020 + "]" * 1020):
        with pytest.raises(FilterError):
            load_filter(stored)


def test_matching_ignores_attributes_the_filter_does_not_name():
    found = parse_filter({"c": ["red"]})
    assert found.matches({"c": "red", **{f"other{i}": "x" for i in range(9)}})


def test_matching_cost_per_message():
    """A typical filter of five names against a message with ten attributes:
    prints the cost (the docs quote it) and fails only on a gross regression."""
    found = parse_filter(
        {
            "colour": ["red", "green", {"prefix": "bl"}],
            "size": [{"numeric": [">=", 10, "<", 40]}],
            "region": [{"exists": True}],
            "kind": [{"anything-but": ["test", "debug"]}],
            "tier": ["gold", "silver", 3],
        }
    )
    passing = {"colour": "blue", "size": "12.5", "region": "eu", "kind": "order", "tier": "gold"}
    passing.update({f"extra{i}": "x" for i in range(5)})
    refused = dict(passing, tier="bronze")  # refused by the last name tested
    assert found.matches(passing) and not found.matches(refused)
    rounds = 5000
    for name, attributes in (("passing", passing), ("refused", refused)):
        seconds = min(timeit.repeat(lambda a=attributes: found.matches(a), number=rounds, repeat=5))
        cost = seconds / rounds * 1e9
        print(f"filter of 5 names, {name} message: {cost:.0f} ns/message")
        assert cost < 100_000


# -- as Amazon SNS: its example policies, its complexity rule, its size, exists:false ---------

#: SNS's example message (docs "Amazon SNS example filter policies"), its
#: String and Number attributes as Queuey keeps them (text).
SNS_MESSAGE = {
    "customer_interests": "rugby",
    "store": "example_corp",
    "event": "order_placed",
    "price_usd": "210.75",
}


def test_the_sns_example_policies_are_accepted_and_decide_as_sns_does():
    accepting = parse_filter(
        {
            "store": ["example_corp"],
            "event": [{"anything-but": "order_cancelled"}],
            "customer_interests": ["rugby", "football", "baseball"],
            "price_usd": [{"numeric": [">=", 100]}],
        }
    )
    assert accepting.matches(SNS_MESSAGE)
    # "A policy that rejects messages": `encrypted` is not among the attributes.
    rejecting = parse_filter(
        {
            "store": ["example_corp"],
            "event": ["order_cancelled"],
            "encrypted": [False],
            "customer_interests": ["basketball", "baseball"],
        }
    )
    assert rejecting.to_json()["encrypted"] == [False]
    assert not rejecting.matches(SNS_MESSAGE)
    cancelled = dict(SNS_MESSAGE, event="order_cancelled", customer_interests="baseball")
    assert not rejecting.matches(cancelled)
    assert rejecting.matches(dict(cancelled, encrypted="false"))
    assert not rejecting.matches(dict(cancelled, encrypted="true"))


def test_combinations_are_counted_as_sns_counts_them():
    # SNS's own example: 3 x 1 x 2 = 6.
    parse_filter(
        {
            "key_a": ["value_one", "value_two", "value_three"],
            "key_b": ["value_one"],
            "key_c": ["value_one", "value_two"],
        }
    )
    # 102 conditions in all, but 100 x 2 = 200 combinations.
    with pytest.raises(FilterError) as caught:
        parse_filter({"a": [str(i) for i in range(100)], "b": ["x", "y"]})
    assert "150 combinations" in str(caught.value)
    # An anything-but list is one value of its array.
    found = parse_filter({"a": [{"anything-but": [str(i) for i in range(1000)]}], "b": ["x"]})
    assert found.matches({"a": "1000", "b": "x"}) and not found.matches({"a": "999", "b": "x"})


def test_a_filter_may_be_larger_than_two_kibibytes():
    values = [f"customer-{i:04d}-" + "x" * 80 for i in range(60)]
    found = parse_filter({"customer": values})
    assert len(found.text.encode()) > 4 * 1024
    assert found.matches({"customer": values[59]})
    assert load_filter(found.text) is load_filter(found.text)


def test_exists_false_needs_an_attribute_present():
    found = parse_filter({"store": [{"exists": False}]})
    assert not found.matches({})
    assert found.matches({"customer_interests": "rugby"})
    assert not found.matches({"store": "fans"})


def test_numbers_with_an_exponent_are_numbers():
    # SNS: ["=", 301.5] matches the Number attribute 3.015e2.
    assert parse_filter({"price_usd": [{"numeric": ["=", 301.5]}]}).matches(
        {"price_usd": "3.015e2"}
    )
    assert parse_filter({"price_usd": [301.5]}).matches({"price_usd": "30150E-2"})
    assert parse_filter({"p": [{"anything-but": [100]}]}).matches({"p": "1.001e2"})
    assert not parse_filter({"p": [{"anything-but": [100]}]}).matches({"p": "1e2"})
    # A policy's own numbers may be written with an exponent (JSON reads them).
    assert parse_filter(json.loads('{"p": [{"numeric": [">", 1e2]}]}')).text == (
        '{"p":[{"numeric":[">",100]}]}'
    )

"""A subscription filter's shape as JSON Schema, for ``/openapi.json``.

The filter language is :mod:`queuey.model.filters`, which checks every filter
a door is given; this is what the REST API's description says of it
(:class:`queuey.web.schemas.SubscriptionSettings`), and
:data:`FILTER_RULES_UNSTATED` what a JSON Schema cannot say.
"""

from __future__ import annotations

from typing import Any

from queuey.model import filters


def filter_schema() -> dict[str, Any]:
    """The shape of a subscription filter (:mod:`queuey.model.filters`) as JSON
    Schema; the rules across its parts are :data:`FILTER_RULES_UNSTATED`."""
    text = {"type": "string", "maxLength": filters.MAX_STRING}
    word = {"type": "string", "minLength": 1, "maxLength": filters.MAX_STRING}
    number = {"type": "number", "minimum": -filters.MAX_NUMBER, "maximum": filters.MAX_NUMBER}

    def one(key: str, value: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {key: value},
            "required": [key],
            "additionalProperties": False,
        }

    def pair(ops: list[str]) -> list[dict[str, Any]]:
        return [{"enum": ops}, number]

    numeric = {
        "type": "array",
        "oneOf": [
            {"prefixItems": pair(["=", ">", ">=", "<", "<="]), "minItems": 2, "maxItems": 2},
            {"prefixItems": pair([">", ">="]) + pair(["<", "<="]), "minItems": 4, "maxItems": 4},
        ],
    }
    keyword = {"type": ["boolean", "null"]}
    values = {"type": "array", "items": {"oneOf": [text, number, keyword]}, "minItems": 1}
    anything_but = {
        "oneOf": [text, number, keyword, values, one("prefix", word), one("suffix", word)]
    }
    condition = {
        "oneOf": [
            text,
            number,
            keyword,
            one("prefix", word),
            one("suffix", word),
            one("numeric", numeric),
            one("exists", {"type": "boolean"}),
            one("anything-but", anything_but),
        ]
    }
    return {
        "type": "object",
        "minProperties": 1,
        "maxProperties": filters.MAX_KEYS,
        "propertyNames": word,
        "additionalProperties": {
            "type": "array",
            "items": condition,
            "minItems": 1,
            "maxItems": filters.MAX_COMBINATIONS,
        },
        "description": "a filter on message attributes (docs/api.rst, Filters)",
    }


#: The filter rules its JSON Schema (:func:`filter_schema`) cannot state:
#: sizes and combinations across its parts, decimal places, a range's bounds
#: in order.
FILTER_RULES_UNSTATED = (
    r"must be at most \d+ bytes as compact JSON",
    r"may have at most \d+ combinations of values "
    r"\(the product of each attribute's number of conditions\)",
    r"may have at most \d+ decimal places",
    r"the lower bound must be below the upper bound",
    r"must be valid Unicode text",
)

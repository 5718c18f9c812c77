"""orjson's fast path in :mod:`queuey.jsonio` answers as the reference parser.

For any JSON text (and any bytes at all), :func:`jsonio.loads` returns what the
standard library path (:func:`jsonio._strict_loads` after
:func:`jsonio.check_depth`) returns, or raises the same error: big integers stay
exact, depth, NaN, overflow and lone surrogates are refused alike.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey import jsonio
from queuey.errors import ServiceError
from queuey.limits import MAX_JSON_DEPTH

pytestmark = pytest.mark.unit

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


def reference(raw: bytes):
    try:
        jsonio.check_depth(raw)
        return ("ok", jsonio._strict_loads(raw))
    except ServiceError as exc:
        return ("error", type(exc))


def fast(raw: bytes):
    try:
        return ("ok", jsonio.loads(raw))
    except ServiceError as exc:
        return ("error", type(exc))


@settings(max_examples=400, deadline=None)
@given(values)
def test_json_text_parses_alike(value):
    raw = json.dumps(value, ensure_ascii=False).encode()
    assert fast(raw) == reference(raw)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_answer_alike(raw):
    assert fast(raw) == reference(raw)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=MAX_JSON_DEPTH - 3, max_value=MAX_JSON_DEPTH + 3), st.booleans())
def test_depth_is_refused_alike(depth, objects):
    opening, closing = ('{"k":', "}") if objects else ("[", "]")
    raw = (opening * depth + "0" + closing * depth).encode()
    assert fast(raw) == reference(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"n": 123456789012345678901234567890}',
        b"[18446744073709551616, -9223372036854775809]",
        b"[1e400]",
        b"NaN",
        b'"\\ud800"',
        b'"\\udc00x"',
        b'{"a": "\xff"}',
        b"\xef\xbb\xbf{}",
    ],
)
def test_edge_cases_answer_alike(raw):
    assert fast(raw) == reference(raw)

"""Property tests of request parsing (pure logic, no app): whatever arrives, the
parser returns a valid value or raises the service's 400/413/415, never another
exception, and in bounded time."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuey import ids, jsonio
from queuey.limits import MAX_READ
from queuey.web.params import InvalidParameters, parse_pairs, validate
from queuey.web.schemas import build_models

pytestmark = pytest.mark.unit

MODELS = build_models(max_partitions=200, max_ttl=2592000, default_ttl=259200)
QUERY_MODELS = [MODELS.read, MODELS.placement, MODELS.list_queues, MODELS.delete_queue]
BODY_MODELS = [MODELS.create_queue, MODELS.update_queue, MODELS.batch, MODELS.checkpoints]
NAMES = [
    "since",
    "since_timestamp",
    "limit",
    "order",
    "partitions",
    "ttl",
    "partition",
    "partition_key",
    "offset",
    "details",
    "delete",
    "queue_name",
    "type",
    "consistency",
]
#: Each call must cost far less than this, whatever the input.
BOUND = 1.0
PROPERTY = settings(
    max_examples=300,
    deadline=timedelta(seconds=5),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

numbers = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.from_regex(r"\A-?[0-9]{1,4}(\.[0-9]{0,20})?[eE][+-]?[0-9]{1,12}\Z"),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.decimals(allow_nan=True).map(str),
)
values = st.one_of(
    numbers,
    st.text(max_size=40),
    st.binary(max_size=40).map(lambda b: quote_from_bytes(b)),
    st.sampled_from(["true", "false", "ascending", "descending", "", "1,2,3", "%ff", "%ed%b2%80"]),
    st.uuids(version=1).map(lambda u: u.hex),
)
pairs = st.lists(st.tuples(st.sampled_from(NAMES) | st.text(max_size=8), values), max_size=6)


def query_string(items: list[tuple[str, str]]) -> str:
    """As a WSGI server hands it over: percent-encoded where needed, latin-1 text."""
    encoded = [
        f"{quote_from_bytes(name.encode('utf-8', 'surrogatepass'))}="
        + (value if "%" in value else quote_from_bytes(value.encode("utf-8", "surrogatepass")))
        for name, value in items
    ]
    return "&".join(encoded)


def timed(call):
    started = time.perf_counter()
    try:
        return call()
    finally:
        assert time.perf_counter() - started < BOUND


@PROPERTY
@given(items=pairs, model=st.sampled_from(QUERY_MODELS), partitions=st.integers(1, 200))
def test_query_parameters_parse_or_are_a_400(items, model, partitions):
    raw = query_string(items)
    try:
        params = timed(lambda: validate(model, parse_pairs(raw), partitions))
    except InvalidParameters as exc:
        assert exc.errors and all(isinstance(v, str) for v in exc.errors.values())
        return
    # What passed validation converts without error (the views rely on it).
    if model is MODELS.read:
        assert 1 <= params.limit <= MAX_READ
        if params.since is not None:
            assert ids.parse_message_id(params.since).version == 1
        if params.since_timestamp is not None:
            assert 0 <= timed(lambda: ids.parse_seconds(params.since_timestamp)) <= ids.MAX_MICROS
        if params.partitions is not None:
            assert all(1 <= int(p) <= partitions for p in params.partitions.split(","))
    if model is MODELS.placement:
        assert params.partition is None or 1 <= params.partition <= partitions
        assert params.ttl is None or 1 <= params.ttl <= 2592000


@PROPERTY
@given(text=st.text(max_size=30) | numbers)
def test_seconds_and_ids_parse_or_raise_value_error(text):
    for parse in (ids.parse_seconds, ids.parse_message_id):
        try:
            timed(lambda parse=parse: parse(text))
        except ValueError:
            pass


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
entries = st.fixed_dictionaries(
    {},
    optional={
        "body": json_values,
        "partition": json_values | st.integers(-5, 300),
        "partition_key": json_values,
        "ttl": json_values | st.integers(-5, 10**7),
    },
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"messages": st.lists(entries | json_values, max_size=5)}),
    st.fixed_dictionaries(
        {"checkpoints": st.dictionaries(st.text(max_size=4) | numbers, values, max_size=4)}
    ),
    st.dictionaries(st.sampled_from(NAMES), json_values | values, max_size=5),
)


@PROPERTY
@given(body=bodies, model=st.sampled_from(BODY_MODELS), partitions=st.integers(1, 200))
def test_json_bodies_parse_or_are_a_400(body, model, partitions):
    try:
        params = timed(lambda: validate(model, body, partitions))
    except InvalidParameters as exc:
        assert exc.errors
        return
    if model is MODELS.batch:
        assert params.messages and all(isinstance(e.body, dict) for e in params.messages)
        for entry in params.messages:
            assert entry.partition is None or 1 <= entry.partition <= partitions
    if model is MODELS.checkpoints:
        for key, value in params.checkpoints.items():
            assert 1 <= int(key) <= partitions
            ids.parse_message_id(value)


raw_json = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda opener, n, tail: opener * n + tail,
        st.sampled_from([b"[", b'{"a":', b'"', b"\\"]),
        st.integers(0, 5000),
        st.binary(max_size=10),
    ),
    st.from_regex(rb"\A\{\"a\": ?-?[0-9]{1,3}(\.[0-9]+)?[eE][+-]?[0-9]{1,6}\}\Z"),
    st.from_regex(rb'\A\{"a": "(\\u[dD][89a-fA-F][0-9a-fA-F]{2}){1,2}"\}\Z'),
)


@PROPERTY
@given(raw=raw_json)
def test_json_text_parses_strictly_or_is_a_400_or_415(raw):
    try:
        value = timed(lambda: jsonio.loads(raw))
    except (jsonio.NotJSON, jsonio.InvalidJSON):
        return
    # What is accepted goes out again as strict JSON (no NaN/Infinity, valid UTF-8).
    text = jsonio.dumps(value)
    text.encode("utf-8")
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in output"))


def deepest(raw: bytes) -> int:
    """The nesting depth as a reader of the bytes sees it, one byte at a time:
    brackets outside strings, a backslash in a string escaping the next byte."""
    depth = deepest_seen = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest_seen = max(deepest_seen, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest_seen


@PROPERTY
@given(raw=st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"a"])).map(b"".join))
@pytest.mark.parametrize("limit", [0, 1, 3])
def test_the_depth_check_refuses_exactly_what_nests_too_deep(raw, limit):
    """Also for bytes that are not JSON: the check runs before the parser."""
    too_deep = deepest(raw) > limit
    try:
        jsonio.check_depth(raw, limit)
    except jsonio.InvalidJSON:
        assert too_deep, raw
    else:
        assert not too_deep, raw

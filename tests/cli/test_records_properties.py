"""Hypothesis on what the CLI and the service parse from outside: import lines,
and the member and checkpoint nodes other processes write into ZooKeeper."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from queuey.cli.records import BadLine, decode
from queuey.core.consumergroups import _json, _member

pytestmark = pytest.mark.unit

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
LINES = st.one_of(
    st.binary(max_size=300),
    JSON.map(lambda v: json.dumps({"body": v}).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            "body": JSON,
            "id": st.text(max_size=40),
            "partition": JSON,
            "priority": JSON,
            "attributes": JSON,
        },
    ).map(lambda d: json.dumps(d).encode()),
    st.integers(1, 200_000).map(lambda n: b'{"body":' + b"[" * n + b"]" * n + b"}"),
    st.integers(1, 50_000).map(lambda n: b'{"body":{"n":' + b"9" * n + b"}}"),
)


@settings(max_examples=300, deadline=None)
@given(LINES)
def test_an_import_line_is_a_record_or_a_bad_line(line):
    try:
        record = decode(line)
    except BadLine as exc:
        assert str(exc)
        return
    assert isinstance(record.body, dict)
    assert record.partition is None or 1 <= record.partition <= 999
    assert record.priority is None or 0 <= record.priority <= 9


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        JSON.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries(
            {}, optional={k: JSON for k in ("member", "host", "pid", "started", "application")}
        ).map(lambda d: json.dumps(d).encode()),
    )
)
@example(b'{"pid": Infinity, "started": -Infinity}')
@example(b'{"pid": 1e999, "application": 7}')
def test_whatever_a_member_node_holds_is_read_without_raising(data):
    assert isinstance(_json(data), dict)
    member = _member(data, "fallback")
    assert isinstance(member.member, str) and isinstance(member.pid, int)
    assert member.application is None or isinstance(member.application, str)

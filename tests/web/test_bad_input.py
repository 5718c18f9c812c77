"""Hostile input is a 400/413/415 at a bounded cost, never a 500 (docs/api.rst, "Errors").

No key is needed for any of these on a public queue, so each is something an
anonymous caller could send. The rules do not depend on the backend, so these
run on the embedded store only.
"""

from __future__ import annotations

import json
import time

import pytest

from queuey.limits import MAX_JSON_DEPTH
from tests.web.calls import create

#: What "bounded work" means here: far below the seconds an unbounded parse took.
FAST = 2.0


def timed(call):
    started = time.perf_counter()
    res = call()
    return res, time.perf_counter() - started


def assert_error(res, status, field):
    assert res.status_int == status, res.text
    assert res.json["status"] == "error"
    assert field in res.json["error_msg"], res.json


@pytest.mark.parametrize(
    "query, field",
    [
        ("since_timestamp=1e999999", "since_timestamp"),
        ("since_timestamp=1e99999999999", "since_timestamp"),
        ("since_timestamp=-1e-99999999999", "since_timestamp"),
        ("since_timestamp=" + "9" * 5000, "since_timestamp"),
        ("limit=1e999999", "limit"),
        ("limit=" + "9" * 5000, "limit"),
        ("partitions=1e999999", "partitions"),
        ("partitions=" + "1" * 5000, "partitions"),
    ],
)
def test_huge_numbers_in_a_read_are_400_at_once(sqlite_app, query, field):
    create(sqlite_app, "pub", partitions=2)
    res, seconds = timed(
        lambda: sqlite_app.get(f"/queue/pub?{query}", headers=sqlite_app.reader, status="*")
    )
    assert_error(res, 400, field)
    assert seconds < FAST, f"{query[:40]} took {seconds:.1f}s"


@pytest.mark.parametrize(
    "query, field",
    [
        ("ttl=1e999999", "ttl"),
        ("partition=1e99999999999", "partition"),
        ("ttl=" + "9" * 5000, "ttl"),
    ],
)
def test_huge_numbers_in_a_post_are_400_at_once(sqlite_app, query, field):
    create(sqlite_app, "pub", partitions=2)
    res, seconds = timed(
        lambda: sqlite_app.post_json(
            f"/queue/pub?{query}", {"a": 1}, headers=sqlite_app.auth, status="*"
        )
    )
    assert_error(res, 400, field)
    assert seconds < FAST


@pytest.mark.parametrize(
    "query, field",
    [
        ("limit=%ff", "limit"),
        ("partitions=%c3%28", "partitions"),
        ("order=%ed%b2%80", "order"),  # a UTF-8-encoded lone surrogate
        ("since=%80", "since"),
    ],
)
def test_invalid_utf8_in_the_query_is_400(sqlite_app, query, field):
    create(sqlite_app, "pub")
    res = sqlite_app.get(f"/queue/pub?{query}", headers=sqlite_app.reader, status="*")
    assert res.status_int == 400, res.text
    assert res.json["status"] == "error"


def test_invalid_utf8_partition_key_is_400(sqlite_app):
    create(sqlite_app, "pub", partitions=3)
    res = sqlite_app.post_json(
        "/queue/pub?partition_key=%ed%b2%80", {"a": 1}, headers=sqlite_app.auth, status="*"
    )
    assert res.status_int == 400, res.text


@pytest.mark.parametrize(
    "path, body",
    [
        ("/queue/pub", '{"a": "\\udc80"}'),
        ("/queue/pub", '{"\\ud800": 1}'),
        ("/queue/pub/batch", '{"messages": [{"body": {"a": "x\\udfff"}}]}'),
        ("/queue/pub/batch", '{"messages": [{"body": {}, "partition_key": "\\udc80"}]}'),
    ],
)
def test_lone_surrogates_in_a_body_are_400(sqlite_app, sqlite_settle, path, body):
    create(sqlite_app, "pub", partitions=2)
    headers = {**sqlite_app.auth, "Content-Type": "application/json"}
    res = sqlite_app.post(path, body, headers=headers, status="*")
    assert res.status_int == 400, res.text
    sqlite_settle()
    assert sqlite_app.get("/queue/pub", headers=sqlite_app.reader).json["messages"] == []


def test_a_surrogate_pair_is_fine(sqlite_app, sqlite_settle):
    create(sqlite_app, "pub")
    headers = {**sqlite_app.auth, "Content-Type": "application/json"}
    sqlite_app.post("/queue/pub", '{"a": "\\ud83d\\ude00"}', headers=headers, status=201)
    sqlite_settle()
    got = sqlite_app.get("/queue/pub", headers=sqlite_app.reader).json["messages"]
    assert [m["body"] for m in got] == [{"a": "\U0001f600"}]


@pytest.mark.parametrize("opener", ["[", '{"a":', '{"messages":['])
@pytest.mark.parametrize("path", ["/queue/pub", "/queue/pub/batch", "/queue"])
def test_deeply_nested_json_is_refused_quickly(sqlite_app, path, opener):
    create(sqlite_app, "pub")
    body = opener * (200_000 // len(opener))  # deep, yet under the body size limit
    headers = {**sqlite_app.auth, "Content-Type": "application/json"}
    res, seconds = timed(lambda: sqlite_app.post(path, body, headers=headers, status="*"))
    assert res.status_int in (400, 415), res.text
    assert res.json["status"] == "error"
    assert seconds < FAST


def test_nesting_up_to_the_limit_is_accepted(sqlite_app, sqlite_settle):
    create(sqlite_app, "pub")
    body: dict = {}
    for _ in range(MAX_JSON_DEPTH - 1):
        body = {"a": body}
    sqlite_app.post_json("/queue/pub", body, headers=sqlite_app.auth, status=201)
    res = sqlite_app.post_json("/queue/pub", {"deeper": body}, headers=sqlite_app.auth, status=400)
    assert list(res.json["error_msg"]) == ["body"]
    sqlite_settle()
    assert len(sqlite_app.get("/queue/pub", headers=sqlite_app.reader).json["messages"]) == 1


@pytest.mark.parametrize(
    "path, body",
    [
        ("/queue/pub", '{"a": 1e400}'),
        ("/queue/pub", '{"a": [-1e999]}'),
        ("/queue/pub/batch", '{"messages": [{"body": {"a": 2e308}}]}'),
        ("/queue", '{"queue_name": "inf", "partitions": 1e400}'),
    ],
)
def test_numbers_that_overflow_are_400_and_never_served(sqlite_app, sqlite_settle, path, body):
    create(sqlite_app, "pub")
    headers = {**sqlite_app.auth, "Content-Type": "application/json"}
    res = sqlite_app.post(path, body, headers=headers, status="*")
    assert res.status_int == 400, res.text
    sqlite_settle()
    read = sqlite_app.get("/queue/pub", headers=sqlite_app.reader)
    assert "Infinity" not in read.text
    json.loads(read.text, parse_constant=lambda name: pytest.fail(f"{name} served"))
    assert read.json["messages"] == []


def test_large_but_finite_numbers_round_trip(sqlite_app, sqlite_settle):
    create(sqlite_app, "pub")
    headers = {**sqlite_app.auth, "Content-Type": "application/json"}
    sqlite_app.post(
        "/queue/pub",
        '{"a": 1.5e308, "b": 123456789012345678901234567890}',
        headers=headers,
        status=201,
    )
    sqlite_settle()
    (message,) = sqlite_app.get("/queue/pub", headers=sqlite_app.reader).json["messages"]
    assert message["body"] == {"a": 1.5e308, "b": 123456789012345678901234567890}


def test_invalid_utf8_in_the_path_is_400(sqlite_app):
    for path in ("/queue/%ff/info", "/queue/pub/checkpoints/%c3%28", "/%ed%b2%80"):
        res = sqlite_app.get(path, headers=sqlite_app.auth, status="*")
        assert res.status_int == 400, (path, res.text)
        assert res.json["status"] == "error"


def test_format_errors_say_what_the_value_should_look_like(sqlite_app):
    """A pattern failure names the expected format, not the regular expression."""
    create(sqlite_app, "pub", partitions=2)
    res = sqlite_app.get(
        "/queue/pub?since_timestamp=1e9&since=xyz&partitions=a",
        headers=sqlite_app.reader,
        status=400,
    )
    errors = res.json["error_msg"]
    assert errors["since_timestamp"].startswith("must be seconds since the epoch")
    assert errors["since"].startswith("must be a message id")
    assert errors["partitions"].startswith("must be a comma list of partition numbers")
    assert not any("pattern" in message for message in errors.values()), errors
    res = sqlite_app.post_json(
        "/queue/pub/batch", {"messages": [{"body": 5}]}, headers=sqlite_app.auth, status=400
    )
    assert res.json["error_msg"] == {"messages[0].body": "must be a JSON object"}

"""The fast path (:mod:`queuey.web.fastpath`) answers exactly as Pyramid's router.

Every request below goes once through the app (fast path in front) and once
straight to the router behind it, on two queues of the same store; the answers
must match in status, headers that matter and JSON (ids, timestamps and
receipts replaced by placeholders), and both ways count the request once under
the same route in ``/metrics``.
"""

from __future__ import annotations

import json
import re

import pytest
import webtest

pytestmark = pytest.mark.unit

VOLATILE = re.compile(r'("message_id"|"timestamp"|"receipt"|"created"):("[^"]*"|[0-9.e+-]+)')
RECEIPT = re.compile(r'"[0-9]+-[0-9a-f]{32}-[0-9a-z]+"')


def normal(res: webtest.TestResponse) -> tuple:
    text = RECEIPT.sub('"<receipt>"', VOLATILE.sub(r'\1:"<volatile>"', res.text))
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    if isinstance(body, dict) and isinstance(body.get("failed"), dict):
        body["failed"] = sorted(body["failed"].values())
    return res.status_int, res.headers.get("Content-Type"), res.headers.get("Allow"), body


def requests_for(queue: str, auth: dict, reader: dict) -> list[tuple]:
    path = f"/queue/{queue}"
    return [
        ("POST", path + "?partition=1", {"a": 1}, auth),
        ("POST", path + "?partition=2&ttl=60", {"b": [1, 2.5, "é"]}, auth),
        ("POST", path + "?partition=9", {"a": 1}, auth),  # no such partition
        ("POST", path + "?partition=1&partition_key=k", {"a": 1}, auth),
        ("POST", path, [1, 2], auth),  # not an object
        ("POST", path, b"{nope", auth),
        ("POST", path, b'{"deep":' + b"[" * 100 + b"]" * 100 + b"}", auth),
        ("POST", path, {"a": 1}, reader),  # no key
        ("POST", path, {"a": 1}, {**auth, "ApplicationKey": "wrong"}),
        ("POST", "/queue/nosuchqueue", {"a": 1}, auth),
        ("POST", "/queue/bad.name!", {"a": 1}, auth),
        (
            "POST",
            path + "/batch",
            {"messages": [{"body": {"n": n}, "partition": 1 + n % 2} for n in range(5)]},
            auth,
        ),
        ("POST", path + "/batch", {"messages": [{"body": 1}, {"body": {}, "ttl": -1}]}, auth),
        ("POST", path + "/batch", {"messages": []}, auth),
        ("GET", path + "?limit=3", None, reader),
        ("GET", path + "?limit=0", None, reader),
        ("GET", path + "?order=sideways", None, reader),
        ("GET", path + "?since=notanid", None, auth),
        ("POST", path + "/reserve", {"limit": 2}, auth),
        ("POST", path + "/reserve", {"limit": 0}, auth),
        ("POST", path + "/reserve", b"limit=1&subscription=s2", auth),
        ("POST", path + "/ack", {"receipts": ["1-" + "0" * 32 + "-abc"]}, auth),
        ("POST", path + "/ack", {"receipts": []}, auth),
        ("POST", path + "/ack", {"receipts": ["nonsense"]}, auth),
        ("PUT", path + "/ack", {"receipts": ["x"]}, auth),  # 405 (the router's)
        ("HEAD", path, None, reader),
    ]


def send(app: webtest.TestApp, method: str, path: str, body, headers: dict):
    if isinstance(body, bytes):
        raw = body
    elif body is None:
        raw = b""
    else:
        raw = json.dumps(body).encode()
    content = "application/x-www-form-urlencoded" if raw[:1] not in (b"{", b"[", b"") else None
    headers = {**headers, "Content-Type": content or "application/json"}
    return app.request(path, method=method, body=raw, headers=headers, expect_errors=True)


def test_the_fast_path_answers_as_the_router(make_app, sqlite_storage, wrap_app):
    wsgi = make_app(sqlite_storage)
    fast, router = wrap_app(wsgi), wrap_app(wsgi.router)
    routed_fast_paths = []
    inner = wsgi.router

    def counting_router(environ, start_response):
        routed_fast_paths.append(environ["PATH_INFO"])
        return inner(environ, start_response)

    wsgi.router = counting_router
    for name in ("viafast", "viarouter"):
        fast.post_json("/queue", {"queue_name": name, "partitions": 2}, headers=fast.auth)
    routed_fast_paths.clear()
    answers = {}
    for label, app, queue in (("fast", fast, "viafast"), ("router", router, "viarouter")):
        answers[label] = [
            normal(send(app, method, path, body, headers))
            for method, path, body, headers in requests_for(queue, app.auth, app.reader)
        ]
    assert answers["fast"] == answers["router"]
    statuses = {a[0] for a in answers["fast"]}
    assert {200, 201, 400, 401, 404, 405} <= statuses, statuses
    # Only what the fast path leaves alone reached the router from it.
    assert set(routed_fast_paths) == {"/queue/bad.name!", "/queue/viafast/ack", "/queue/viafast"}


def test_a_reserve_and_ack_round_trip_counts_once_per_request(make_app, sqlite_storage, wrap_app):
    app = wrap_app(make_app(sqlite_storage))
    app.post_json("/queue", {"queue_name": "counted", "partitions": 1}, headers=app.auth)
    app.post_json("/queue/counted/batch", {"messages": [{"body": {"n": 1}}]}, headers=app.auth)
    got = app.post_json("/queue/counted/reserve", {"limit": 5}, headers=app.auth).json
    receipts = [m["receipt"] for m in got["messages"]]
    acked = app.post_json("/queue/counted/ack", {"receipts": receipts}, headers=app.auth).json
    assert acked == {"status": "ok", "acked": 1, "failed": {}}
    text = app.get("/metrics").text

    def count(route: str, status: str) -> float:
        line = f'queuey_requests_total{{method="POST",route="{route}",status="{status}"}}'
        found = [ln for ln in text.splitlines() if ln.startswith(line)]
        return float(found[0].split()[-1]) if found else 0.0

    assert count("queue_batch", "201") == 1
    assert count("queue_reserve", "200") == 1
    assert count("queue_ack", "200") == 1

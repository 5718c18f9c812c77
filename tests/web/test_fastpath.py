"""The fast path (:mod:`queuey.web.fastpath`) answers exactly as Pyramid's router.

Two apps are built alike (same settings, same start time, the same sequence
of "random" bytes), each on a store of its own. The same requests go to one
through :class:`~queuey.web.fastpath.FastPath` and to the other through the
plain router behind it (with the body-size check that comes before both):
every answer must match in status, every header (names, values, order) and
body, byte for byte. Nothing is normalised: ids, timestamps, receipts and the
``Content-Length`` come out the same because everything that makes them does
(no Date header either: the server adds it, after the app). Both apps then
count the same requests under the same routes in ``/metrics``.

The same holds with subscribers to the events after routing, another tween,
response and finished callbacks, a request extension and an execution policy
configured, and with
a route registered before a served one that matches its paths (the router's
then, on both ways). What the fast path cannot reproduce stops the app:
``test_fastpath_checks.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from typing import Any

import pytest
import webtest
from pyramid.config import Configurator
from pyramid.events import BeforeTraversal, ContextFound, NewResponse
from pyramid.response import Response
from webob import Request

from queuey.clock import ManualClock
from queuey.storage.sqlite import SQLiteStorage
from queuey.web.fastpath import SERVED

pytestmark = pytest.mark.unit

#: Small limits, so the oversized bodies are small too.
SMALL = {
    "queuey.max_message_size": "2048",
    "queuey.max_batch_size": "4096",
    "queuey.max_form_size": "2048",
}
WRONG_KEY = "not-the-key"


@pytest.fixture
def replay(monkeypatch) -> Callable[[], None]:
    """Randomness that starts over on each call: ids' nodes, receipts, random
    partitions and queue incarnations come out the same for both apps."""
    state = {"n": 0}
    saved = random.getstate()

    def urandom(size: int) -> bytes:
        state["n"] += 1
        out = b""
        while len(out) < size:
            out += hashlib.sha256(f"{state['n']}:{len(out)}".encode()).digest()
        return out[:size]

    def restart() -> None:
        state["n"] = 0
        random.seed(20240)

    monkeypatch.setattr(os, "urandom", urandom)
    monkeypatch.setattr(random, "_urandom", urandom)  # secrets and SystemRandom
    restart()
    yield restart
    random.setstate(saved)


def bounded_router(wsgi) -> Callable:
    """The plain router behind ``wsgi``, with the body-size check FastPath
    runs first (what the app would be without the fast path)."""

    def app(environ, start_response):
        if "CONTENT_LENGTH" in environ or "HTTP_TRANSFER_ENCODING" in environ:
            refusal = wsgi.bounded(environ)
            if refusal is not None:
                return refusal(environ, start_response)
        return wsgi.router(environ, start_response)

    return app


def build_twins(
    make_app, tmp_path, replay, configure: Callable[[], Any] | None = None
) -> list[tuple[Any, ManualClock]]:
    """Two apps built alike: (wsgi app, its clock) each; ``configure`` makes
    the Configurator each starts from (extra subscribers, tweens...)."""
    start = ManualClock().now_micros()
    twins = []
    for label in ("fast", "plain"):
        replay()
        clock = ManualClock(start)
        storage = SQLiteStorage(tmp_path / f"{label}.sqlite3", clock)
        extra = {"config": configure()} if configure else {}
        wsgi = make_app(storage, **{"queuey.clock": clock, **SMALL, **extra})
        twins.append((wsgi, clock))
    return twins


def send(app: webtest.TestApp, method: str, path: str, body: Any, headers: dict):
    if isinstance(body, bytes):
        raw = body
    elif body is None:
        raw = b""
    else:
        raw = json.dumps(body).encode()
    content = "application/x-www-form-urlencoded" if raw[:1] not in (b"{", b"[", b"") else None
    headers = {**headers, "Content-Type": content or "application/json"}
    return app.request(path, method=method, body=raw, headers=headers, expect_errors=True)


def receipts(answers: list) -> dict:
    """The last reservation's receipts, to ack them."""
    for res in reversed(answers):
        if b'"receipt"' in res.body:
            return {"receipts": [m["receipt"] for m in res.json["messages"]]}
    return {"receipts": []}


def calls(apps) -> list[tuple]:
    """(method, path, body or a function of the answers so far, headers); or
    ("advance", seconds) to move the app's clock."""
    auth, reader = apps.auth, apps.reader
    wrong = {**auth, "ApplicationKey": WRONG_KEY}
    big = {"blob": "x" * 3000}  # over queuey.max_message_size, under max_batch_size
    q, p = "/queue/twin", "/queue/closed"
    return [
        ("POST", "/queue", {"queue_name": "twin", "partitions": 2}, auth),
        ("POST", "/queue", {"queue_name": "closed", "type": "private"}, auth),
        # POST /queue/{name}
        ("POST", q + "?partition=1", {"a": 1}, auth),
        ("POST", q + "?partition=2&ttl=60", {"b": [1, 2.5, "é"]}, auth),
        ("POST", q, {"c": None}, auth),  # a random partition
        ("POST", q + "?partition_key=k", {"a": 1}, auth),
        ("POST", q + "?partition=9", {"a": 1}, auth),
        ("POST", q, [1, 2], auth),
        ("POST", q, b"{nope", auth),
        ("POST", q, b'{"deep":' + b"[" * 100 + b"]" * 100 + b"}", auth),
        ("POST", q, big, auth),
        ("POST", q, {"a": 1}, reader),
        ("POST", q, {"a": 1}, wrong),
        ("POST", q, {"a": 1}, {}),
        ("POST", "/queue/nosuchqueue", {"a": 1}, auth),
        ("POST", "/queue/bad.name!", {"a": 1}, auth),
        ("POST", "/queue/%74win", {"percent": 1}, auth),  # /queue/twin
        ("POST", "/queue/caf%C3%A9", {"a": 1}, auth),
        ("POST", "/queue/%FF", {"a": 1}, auth),  # not UTF-8
        ("POST", q + "/", {"a": 1}, auth),
        ("POST", q + "//", {"a": 1}, auth),
        ("PATCH", q, {"a": 1}, auth),
        ("POST", p, {"private": 1}, auth),
        ("advance", 30),
        # GET /queue/{name}
        ("GET", q + "?limit=3", None, reader),
        ("GET", q + "?partition=2&order=descending", None, auth),
        ("GET", q + "?limit=0", None, reader),
        ("GET", q + "?order=sideways", None, reader),
        ("GET", q + "?since=notanid", None, auth),
        ("GET", q, None, {}),
        ("GET", p, None, reader),  # private: the key is needed
        ("GET", p, None, auth),
        ("GET", p, None, wrong),
        ("GET", "/queue/nosuchqueue", None, reader),
        ("GET", "/queue/%74win?limit=1", None, reader),
        ("GET", q + "/", None, reader),
        ("HEAD", q, None, reader),
        # POST /queue/{name}/batch
        ("POST", q + "/batch", {"messages": [{"body": {"n": n}} for n in range(5)]}, auth),
        ("POST", q + "/batch", {"messages": [{"body": big} for _ in range(2)]}, auth),
        ("POST", q + "/batch", {"messages": [{"body": 1}, {"body": {}, "ttl": -1}]}, auth),
        ("POST", q + "/batch", {"messages": []}, auth),
        ("POST", q + "/batch", {"messages": [{"body": "x" * 4000}] * 2}, auth),  # too large
        ("POST", q + "/batch", {"messages": [{"body": 1}]}, reader),
        ("POST", "/queue/nosuchqueue/batch", {"messages": [{"body": 1}]}, auth),
        ("POST", q + "/batch/", {"messages": [{"body": 1}]}, auth),
        ("GET", q + "/batch", None, auth),
        ("advance", 30),
        # POST /queue/{name}/reserve
        ("POST", q + "/reserve", {"limit": 3}, auth),
        ("POST", q + "/reserve", {"limit": 0}, auth),
        ("POST", q + "/reserve", b"limit=1&subscription=s2", auth),
        ("POST", q + "/reserve", {"limit": 1}, reader),
        ("POST", q + "/reserve", {"limit": 1, "pad": "x" * 3000}, auth),
        ("POST", "/queue/nosuchqueue/reserve", {"limit": 1}, auth),
        ("POST", q + "/reserve/", {"limit": 1}, auth),
        ("GET", q + "/reserve", None, auth),
        ("POST", q + "/reserve", {"limit": 2}, auth),
        # POST /queue/{name}/ack
        ("POST", q + "/ack", receipts, auth),
        ("POST", q + "/ack", receipts, auth),  # acked already
        ("POST", q + "/ack", {"receipts": ["1-" + "0" * 32 + "-abc"]}, auth),
        ("POST", q + "/ack", {"receipts": []}, auth),
        ("POST", q + "/ack", {"receipts": ["nonsense"]}, auth),
        ("POST", q + "/ack", {"receipts": ["x"]}, wrong),
        ("POST", "/queue/nosuchqueue/ack", {"receipts": []}, auth),
        ("POST", q + "/ack/", {"receipts": []}, auth),
        ("PUT", q + "/ack", {"receipts": ["x"]}, auth),
        # neighbours the router keeps
        ("GET", q + "/info", None, auth),
        ("POST", q + "/release", {"receipts": []}, auth),
        ("DELETE", p, None, auth),
    ]


def run(app: webtest.TestApp, clock: ManualClock, sequence: list[tuple]) -> list:
    answers: list = []
    for call in sequence:
        if call[0] == "advance":
            clock.advance(call[1])
            continue
        method, path, body, headers = call
        if callable(body):
            body = body(answers)
        answers.append(send(app, method, path, body, headers))
    return answers


def request_counts(app: webtest.TestApp) -> list[str]:
    text = app.get("/metrics").text
    return sorted(line for line in text.splitlines() if line.startswith("queuey_requests_total"))


def answers_alike(twins, wrap_app, replay, sequence: list[tuple]) -> tuple[list, list]:
    """Send ``sequence`` through the first twin's fast path and the second's
    router; assert every answer matches. Returns the requests and the fast
    path's answers."""
    (fast_wsgi, fast_clock), (plain_wsgi, plain_clock) = twins
    fast, plain = wrap_app(fast_wsgi), wrap_app(bounded_router(plain_wsgi))
    replay()
    got_fast = run(fast, fast_clock, sequence)
    replay()
    got_plain = run(plain, plain_clock, sequence)
    requests = [call[:2] for call in sequence if call[0] != "advance"]
    differ = [
        (request, (f.status, f.headerlist, f.body), (r.status, r.headerlist, r.body))
        for request, f, r in zip(requests, got_fast, got_plain, strict=True)
        if (f.status, f.headerlist, f.body) != (r.status, r.headerlist, r.body)
    ]
    assert not differ, differ
    assert request_counts(fast) == request_counts(plain)
    return requests, got_fast


def test_the_fast_path_answers_as_the_router_byte_for_byte(
    make_app, tmp_path, replay, wrap_app, test_apps
):
    twins = build_twins(make_app, tmp_path, replay)
    requests, got_fast = answers_alike(twins, wrap_app, replay, calls(test_apps))
    fast_wsgi = twins[0][0]

    # Every served (route, method) was exercised through the fast path itself,
    # with answers good and bad.
    statuses: dict[tuple[str, str], set[int]] = {}
    for (method, path), answer in zip(requests, got_fast, strict=True):
        served = fast_wsgi.route_of(Request.blank(path, method=method))
        if served is not None:
            statuses.setdefault((served[0].name, method), set()).add(answer.status_int)
    assert set(statuses) == set(SERVED)
    for call, seen in statuses.items():
        assert any(s < 300 for s in seen) and any(s >= 400 for s in seen), (call, seen)
    assert {200, 201, 400, 401, 404, 405, 413} <= {a.status_int for a in got_fast}


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("POST", "/queue/q", "queue"),
        ("GET", "/queue/q", "queue"),
        ("POST", "/queue/%71", "queue"),  # PATH_INFO is decoded: /queue/q
        ("POST", "/queue/caf%C3%A9", "queue"),  # the route takes it; the context refuses it
        ("POST", "/queue/q/batch", "queue_batch"),
        ("POST", "/queue/q/reserve", "queue_reserve"),
        ("POST", "/queue/q/ack", "queue_ack"),
        ("HEAD", "/queue/q", None),
        ("DELETE", "/queue/q", None),
        ("PUT", "/queue/q/ack", None),
        ("GET", "/queue/q/batch", None),
        ("POST", "/queue/q/", None),
        ("POST", "/queue/q/info", None),
        ("POST", "/queue/q/release", None),
        ("POST", "/queue", None),
        ("POST", "/queue/%FF", None),  # not UTF-8: the router's 400
        ("POST", "/", None),
    ],
)
def test_what_the_fast_path_serves_itself(make_app, sqlite_storage, method, path, route):
    wsgi = make_app(sqlite_storage)
    served = wsgi.route_of(Request.blank(path, method=method))
    assert (served[0].name if served else None) == route


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


#: Finished callbacks run, by path (fast path and router alike).
FINISHED: list[str] = []


def stamp_response(event) -> None:
    route = event.request.matched_route
    event.response.headers["X-Stamp"] = route.name if route else "-"


def before_traversal(event) -> None:
    request = event.request
    request.add_response_callback(
        lambda req, res: res.headers.__setitem__("X-Before", str(sorted(req.matchdict)))
    )


def context_found(event) -> None:
    request = event.request
    request.add_response_callback(
        lambda req, res: res.headers.__setitem__("X-Context", type(req.context).__name__)
    )


def callbacks_tween(handler, registry):
    def tween(request):
        request.add_finished_callback(lambda req: FINISHED.append(req.path_info))
        response = handler(request)
        response.headers["X-Tween"] = request.flavour
        return response

    return tween


def stamping_policy(environ, router):
    """An execution policy of our own: Pyramid's default, plus a header."""
    with router.request_context(environ) as request:
        response = router.invoke_request(request)
    response.headers["X-Policy"] = "stamped"
    return response


def everything() -> Configurator:
    config = Configurator()
    config.set_execution_policy(stamping_policy)
    config.add_subscriber(stamp_response, NewResponse)
    config.add_subscriber(before_traversal, BeforeTraversal)
    config.add_subscriber(context_found, ContextFound)
    config.add_tween("tests.web.test_fastpath.callbacks_tween")
    config.add_request_method(lambda request: "vanilla", "flavour", reify=True)
    return config


def test_subscribers_tweens_callbacks_and_extensions_run_on_the_fast_path(
    make_app, tmp_path, replay, wrap_app, test_apps
):
    twins = build_twins(make_app, tmp_path, replay, configure=everything)
    auth, q = test_apps.auth, "/queue/extras"
    sequence = [
        ("POST", "/queue", {"queue_name": "extras"}, auth),
        ("POST", q, {"a": 1}, auth),
        ("POST", q, {"a": 1}, test_apps.reader),
        ("POST", q + "/batch", {"messages": [{"body": {"n": 1}}]}, auth),
        ("advance", 30),
        ("GET", q, None, auth),
        ("POST", q + "/reserve", {"limit": 5}, auth),
        ("POST", q + "/ack", receipts, auth),
        ("PUT", q + "/ack", None, auth),
    ]
    FINISHED.clear()
    requests, got = answers_alike(twins, wrap_app, replay, sequence)
    fast_wsgi = twins[0][0]
    served = [fast_wsgi.route_of(Request.blank(p, method=m)) for m, p in requests]
    assert [s[0].name if s else None for s in served] == [
        None,
        "queue",
        "queue",
        "queue_batch",
        "queue",
        "queue_reserve",
        "queue_ack",
        None,
    ]
    post = got[1]
    assert post.status_int == 201
    assert post.headers["X-Stamp"] == "queue"
    assert post.headers["X-Before"] == "['name']"
    assert post.headers["X-Context"] == "QueueContext"
    assert post.headers["X-Tween"] == "vanilla"
    assert post.headers["X-Policy"] == "stamped"
    # Each request's finished callback ran once on either path (and /metrics).
    assert len(FINISHED) == 2 * len(requests) + 2


def test_a_route_registered_before_a_served_one_takes_its_paths(
    make_app, tmp_path, replay, wrap_app, test_apps
):
    def shadowing() -> Configurator:
        config = Configurator()
        config.add_route("shadow", "/queue/{name}/ack")
        config.add_view(lambda request: Response("shadowed"), route_name="shadow")
        return config

    twins = build_twins(make_app, tmp_path, replay, configure=shadowing)
    sequence = [("POST", "/queue/any/ack", {"receipts": []}, test_apps.auth)]
    _, got = answers_alike(twins, wrap_app, replay, sequence)
    assert got[0].text == "shadowed"
    assert twins[0][0].route_of(Request.blank("/queue/any/ack", method="POST")) is None

"""What a request without credentials may cost, on every route the app registered.

The routes come from Pyramid's registry (not a hand list), so a route added
later is walked too. Each gets, without credentials: (a) a body over its
limit with ``Content-Length``, (b) one without (chunked), (d) malformed bodies
within the limit (bad UTF-8, bad JSON, bad form encoding). Oversized bodies
come from a stream that makes bytes as they are read, so what the test
measures (time, and memory by ``tracemalloc``) is the server's work alone.
The slow body (c) needs a real server: ``tests/faults/test_body_limits_live.py``.
"""

from __future__ import annotations

import io
import time
import tracemalloc
from urllib.parse import urlsplit

import pytest
from pyramid.interfaces import IRoutesMapper
from webob import Request

from queuey.web.errors import allowed_methods

pytestmark = pytest.mark.unit

#: Small limits, so oversized bodies are small too.
SMALL = {
    "queuey.max_message_size": "2048",
    "queuey.max_batch_size": "4096",
    "queuey.max_form_size": "2048",
    "queuey.stats.interval": "0",
}
#: A refusal within this many seconds of this thread's CPU (the work is
#: microseconds). CPU, not wall time: on a shared 2-core box running parallel
#: test workers a request can wait a second for a core without working.
TIME_BOUND = 0.5
#: Path parameters for any route's pattern.
FILL = {
    "name": "somequeue",
    "ids": "1:" + "0" * 32,
    "message": "1:" + "0" * 32,
    "consumer": "someone",
    "schedule": "someschedule",
    "subscription": "somesubscription",
    "account": "123456789012",
    "queue": "somequeue",
    "rest": ("nothing",),
    "subpath": ("admin.css",),
}
MALFORMED = [
    ("application/json", b'{"queue_name": "\xff\xfe"}'),
    ("application/json", b'{"messages": [{"body": {"a": 1}'),
    ("application/x-www-form-urlencoded", b"csrf_token=%zz&%ff%fe=1&application=%&key=%C3"),
]


class Generated(io.RawIOBase):
    """``size`` bytes of ``x``, made as they are read (nothing held in advance)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        self.left -= n
        return b"x" * n

    def readline(self, limit: int = -1) -> bytes:
        return self.read(limit if limit and limit > 0 else 65536)


def routes_of(wsgi) -> list[tuple[str, str, frozenset[str], int]]:
    """Every registered route: name, a concrete path, its methods, its body limit."""
    registry = wsgi.registry
    methods = allowed_methods(registry)
    default = registry.queuey.settings.max_form_size
    found = []
    for route in registry.queryUtility(IRoutesMapper).get_routes():
        path = route.generate(FILL)
        assert route.match(path) is not None, (route.name, path)
        limit = registry.queuey_web.body_limits.get(route.name, default)
        found.append((route.name, path, methods.get(route.name, frozenset({"GET"})), limit))
    return found


def call(wsgi, method: str, path: str, content_type: str, stream, length: int | None):
    request = Request.blank(path, method=method, remote_addr="127.0.0.1")
    environ = request.environ
    environ["wsgi.input"] = stream
    environ["CONTENT_TYPE"] = content_type
    environ.pop("CONTENT_LENGTH", None)
    if length is None:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = True
    else:
        environ["CONTENT_LENGTH"] = str(length)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    started = time.thread_time()
    response = request.get_response(wsgi)
    elapsed = time.thread_time() - started
    peak = tracemalloc.get_traced_memory()[1] - before
    response.body  # noqa: B018 - read (and closed) as a server would
    return response, elapsed, peak


def door(name: str) -> str:
    if name.startswith("admin."):
        return "admin"
    return "sqs" if name.startswith("sqs") else "api"


def assert_too_large(name: str, response) -> None:
    assert response.status_code == 413, (name, response.status, response.text[:300])
    if door(name) == "admin":
        assert response.content_type == "text/html" and "Form too large" in response.text
    elif door(name) == "sqs":
        assert b"RequestEntityTooLarge" in response.body
    else:
        assert response.json["status"] == "error" and "body" in response.json["error_msg"]


def assert_refused(name: str, response) -> None:
    if name.startswith("__") and response.status_code == 200:  # a static file: the body is ignored
        return
    if door(name) == "admin" and response.status_code == 303:  # to the sign-in page (or /admin/)
        assert urlsplit(response.location).path in ("/admin/signin", "/admin/"), response.location
        return
    assert 400 <= response.status_code < 500, (name, response.status, response.text[:300])


def test_no_route_does_work_for_an_unauthenticated_body_over_its_limit(make_app, sqlite_storage):
    wsgi = make_app(sqlite_storage, **SMALL)
    routes = routes_of(wsgi)
    names = {name for name, *_ in routes}
    assert {"queue", "queue_batch", "sqs", "sqs_queue", "admin.signin", "metrics"} <= names
    worst = {"time": (0.0, ""), "memory": (0, "")}
    tracemalloc.start()
    try:
        for warm_up in (True, False):  # templates compile and caches fill on first use
            for name, path, methods, limit in routes:
                oversized = max(4 * limit, 1 << 20)
                for method in sorted((methods - {"HEAD"}) | {"POST"}):
                    probes = [("a", "application/x-www-form-urlencoded", oversized, oversized)]
                    probes.append(("b", "application/x-www-form-urlencoded", oversized, None))
                    if method not in ("GET", "HEAD"):
                        probes += [("d", kind, len(body), len(body)) for kind, body in MALFORMED]
                    for index, (case, kind, size, length) in enumerate(probes):
                        body = MALFORMED[index - 2][1] if case == "d" else None
                        stream = io.BytesIO(body) if body is not None else Generated(size)
                        response, elapsed, peak = call(wsgi, method, path, kind, stream, length)
                        if warm_up:
                            continue
                        what = f"{case} {method} {path} ({name}, limit {limit})"
                        if case == "d":
                            assert_refused(name, response)
                        else:
                            assert_too_large(name, response)
                            # Refused from its length: not one byte read; else at most limit + 1.
                            assert (
                                stream.left == size if length else size - stream.left <= limit + 1
                            )
                        assert elapsed < TIME_BOUND, (what, elapsed)
                        assert peak < limit + (256 << 10), (what, peak)
                        worst["time"] = max(worst["time"], (elapsed, what))
                        worst["memory"] = max(worst["memory"], (peak, what))
    finally:
        tracemalloc.stop()
    print(
        f"\n[{len(routes)} routes, unauthenticated, bodies to 4x their limit or 1 MiB] "
        f"worst time {worst['time'][0] * 1000:.1f} ms ({worst['time'][1]}); "
        f"worst memory {worst['memory'][0] / 1024:.0f} KiB ({worst['memory'][1]})"
    )


def test_a_body_within_its_limit_still_works_chunked(sqlite_app):
    """The chunked body read up front reaches the view whole."""
    wsgi = sqlite_app.app
    sqlite_app.post_json(
        "/queue", {"queue_name": "chunky", "partitions": 1}, headers=sqlite_app.auth
    )
    body = b'{"hello": "world"}'
    request = Request.blank("/queue/chunky", method="POST", remote_addr="127.0.0.1")
    request.environ.update(
        {
            "wsgi.input": io.BytesIO(body),
            "wsgi.input_terminated": True,
            "HTTP_TRANSFER_ENCODING": "chunked",
            "CONTENT_TYPE": "application/json",
        }
    )
    request.environ.pop("CONTENT_LENGTH", None)
    request.headers.update(sqlite_app.auth)
    response = request.get_response(wsgi)
    assert response.status_code == 201, response.text


def test_the_limits_follow_the_settings(make_app, sqlite_storage):
    registry = make_app(sqlite_storage, **SMALL).registry
    limits = registry.queuey_web.body_limits
    assert limits["queue"] == 2048 and limits["queue_batch"] == 4096
    assert limits["admin.post"] == 3 * 2048 + 2048
    assert limits["sqs"] == limits["sqs_queue"] == 3 * 2048 + 65536
    assert "admin.signin" not in limits  # queuey.max_form_size

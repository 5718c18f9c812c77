"""Hostile input to the admin pages: bad UTF-8, huge numbers, deep JSON, random
text in every form field and query parameter. An HTML page with a 4xx status
(or a redirect), never a 500 or a traceback, and never seconds of work."""

from __future__ import annotations

import time
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webob import Request

from tests.admin.conftest import csrf_of
from tests.web.calls import create

pytestmark = pytest.mark.unit

#: Text a form or query may carry, biased toward what breaks parsers.
NASTY = st.one_of(
    st.text(max_size=200),
    st.sampled_from(
        [
            "1e999999999",
            "9" * 5000,
            "-1",
            "nan",
            "Infinity",
            "0x10",
            "[" * 10000,
            '{"a":' * 200 + "1" + "}" * 200,
            "\ufffd\u202e",
            "\x00",
            "../../etc/passwd",
            "//evil.example/",
        ]
    ),
)
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def raw(app, method: str, path: str, query: bytes = b"", body: bytes = b""):
    """Call the WSGI app with raw bytes in the path, query and body (webtest would
    decode the path itself, before the app sees it)."""
    request = Request.blank("/")
    request.environ.update(
        REQUEST_METHOD=method,
        PATH_INFO=path.encode("latin-1").decode("latin-1"),
        QUERY_STRING=query.decode("latin-1"),
        REMOTE_ADDR="127.0.0.1",
    )
    if body:
        request.environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
        request.body = body
    request.headers["Cookie"] = "; ".join(f"{c.name}={c.value}" for c in app.cookiejar)
    started = time.monotonic()
    response = request.get_response(app.app)
    return response, time.monotonic() - started


def assert_refused_politely(response, elapsed: float) -> None:
    assert response.status_code < 500, response.text[:500]
    assert "Traceback" not in response.text
    assert elapsed < 2.0


@pytest.fixture
def jobs(admin):
    create(admin, "jobs", partitions=2)
    return admin


@pytest.mark.parametrize(
    "path, query",
    [
        ("/admin/queue/\xff", b""),
        ("/admin/queue/jobs/messages", b"before=%FF"),
        ("/admin/queue/jobs/dead", b"before=%C0%AF"),
        ("/admin/", b"after=%FF%FE"),
        ("/admin/signin", b"next=%ED%A0%80"),
        ("/admin/queue/jobs/messages", b"%FF=1"),
    ],
)
def test_bad_utf8_in_paths_and_queries_is_a_400_page(jobs, path, query):
    response, elapsed = raw(jobs, "GET", path, query)
    assert_refused_politely(response, elapsed)
    assert response.status_code in (400, 404)
    # A path that is not UTF-8 matches no route: the service-wide JSON 400 answers it.
    assert response.content_type == ("application/json" if "\xff" in path else "text/html")


def test_bad_utf8_in_a_form_is_refused_and_posts_nothing(jobs):
    token = csrf_of(jobs.get("/admin/queue/jobs"))
    for body in (b"body=%FF%FE", b"body=%7B%7D&partition_key=%FF", b"body=%7B%7D&%FF=1"):
        response, elapsed = raw(
            jobs,
            "POST",
            "/admin/queue/jobs/post",
            body=b"csrf_token=" + token.encode() + b"&" + body,
        )
        assert_refused_politely(response, elapsed)
        assert response.status_code == 400
    assert (
        jobs.app.registry.queuey.overview.refresh(
            jobs.app.registry.queuey.queues.get(jobs.apps.app, "jobs")
        ).depth
        == 0
    )


@FUZZ
@given(
    field=st.sampled_from(["partition", "partition_key", "ttl", "delay", "priority", "dedup_id"]),
    value=NASTY,
    body=NASTY,
)
def test_post_form_fuzz(jobs, field, value, body):
    page = jobs.get("/admin/queue/jobs")
    form = {"csrf_token": csrf_of(page), "body": body, field: value}
    started = time.monotonic()
    response = jobs.post("/admin/queue/jobs/post", form, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)


@FUZZ
@given(
    field=st.sampled_from(
        [
            "queue_name",
            "partitions",
            "ttl",
            "type",
            "consistency",
            "visibility_timeout",
            "max_attempts",
            "dead_letter_queue",
            "delay",
        ]
    ),
    value=NASTY,
)
def test_create_form_fuzz(jobs, field, value):
    page = jobs.get("/admin/new")
    form = {"csrf_token": csrf_of(page), "queue_name": "fuzzed", field: value}
    started = time.monotonic()
    response = jobs.post("/admin/new", form, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)
    if response.status_code == 303:  # accepted: the API's rules allowed it
        created = unquote(response.location.rstrip("/").rsplit("/", 1)[1])
        jobs.app.registry.queuey.storage.delete_queue(jobs.apps.app, created)


@FUZZ
@given(
    page=st.sampled_from(
        ["/admin/", "/admin/queue/jobs/messages", "/admin/queue/jobs/dead", "/admin/signin"]
    ),
    name=st.sampled_from(["before", "after", "next"]),
    value=NASTY,
)
def test_query_parameter_fuzz(jobs, page, name, value):
    started = time.monotonic()
    response = jobs.get(page, {name: value}, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)


@FUZZ
@given(limit=NASTY, confirm=NASTY)
def test_redrive_and_confirm_fuzz(jobs, limit, confirm):
    token = csrf_of(jobs.get("/admin/queue/jobs"))
    started = time.monotonic()
    response = jobs.post(
        "/admin/queue/jobs/redrive", {"csrf_token": token, "limit": limit}, expect_errors=True
    )
    assert_refused_politely(response, time.monotonic() - started)
    response = jobs.post(
        "/admin/queue/jobs/purge", {"csrf_token": token, "confirm": confirm}, expect_errors=True
    )
    assert_refused_politely(response, time.monotonic() - started)

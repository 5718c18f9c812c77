"""Isolation between applications (queuey.core.quotas) on the native API and the
admin pages: each application's requests per second (429 + ``Retry-After``),
its waiting long polls, its queues; the rules themselves (the token bucket on
an injected clock, the buckets shared by several processes); the limits read
from the settings and the applications file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests
import webtest

import queuey
from queuey.applications import load_applications
from queuey.clock import ManualClock
from queuey.core.buckets import Buckets, take_token
from queuey.core.longpoll import LongPolls
from queuey.errors import ConfigurationError
from queuey.settings import load_settings
from tests.admin.conftest import ADMIN_SETTINGS
from tests.admin.conftest import sign_in as admin_sign_in
from tests.support import KEY, server_settings, start_live_server, wait_until

OTHER_KEY = "other-key"

APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8
{own}

[application:{other}]
keys = plain:{other_key}
allow = 127.0.0.0/8
"""


@pytest.fixture
def two_apps(tmp_path, test_apps):
    """``two_apps(own="")``: an applications file with the test application
    (its own limit lines ``own``) and a second one, ``<app>-other``."""

    def write(own: str = "") -> str:
        path = tmp_path / "two-apps.ini"
        path.write_text(
            APPLICATIONS.format(
                app=test_apps.app,
                key=KEY,
                own=own,
                other=f"{test_apps.app}-other",
                other_key=OTHER_KEY,
            ),
            encoding="utf-8",
        )
        return str(path)

    return write


def auth(app: str, key: str = KEY) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": key}


@pytest.fixture
def limited(make_app, sqlite_storage, two_apps, test_apps):
    """The app on SQLite, the test application limited to 2 requests/s with a
    burst of 3 (the defaults), on the test's frozen clock; so is the other
    application."""
    app = make_app(
        sqlite_storage,
        **{
            "queuey.applications": two_apps(),
            "queuey.limits.throttle_hold": "0",
            "queuey.limits.max_requests_per_second": "2",
            "queuey.limits.max_burst": "3",
        },
    )
    client = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    client.post_json(
        "/queue", {"queue_name": "jobs", "type": "public"}, headers=auth(test_apps.app)
    )
    return client


# -- the rules --------------------------------------------------------------------------
def test_token_bucket_admits_the_burst_then_the_rate():
    tokens, last = 3.0, 0.0
    taken = []
    for _ in range(5):  # five calls at t=0: three tokens
        tokens, last, wait = take_token(tokens, last, 0.0, rate=2.0, burst=3)
        taken.append(wait == 0)
    assert taken == [True, True, True, False, False]
    # Refused calls took nothing; the next token is half a second away.
    assert take_token(tokens, last, 0.0, 2.0, 3)[2] == pytest.approx(0.5)
    tokens, last, wait = take_token(tokens, last, 0.5, 2.0, 3)
    assert wait == 0
    # Ten idle seconds refill to the burst, not beyond.
    tokens, last, _ = take_token(tokens, last, 10.5, 2.0, 3)
    assert tokens == pytest.approx(2.0)
    # A clock stepped back refills nothing and counts on from the new time.
    tokens, last, wait = take_token(0.0, 100.0, 50.0, 2.0, 3)
    assert (tokens, last) == (0.0, 50.0) and wait == pytest.approx(0.5)


def test_shared_buckets_are_one_budget_for_every_process(tmp_path):
    """Two mappings of one directory (two worker processes) share each
    application's bucket; applications keep theirs apart."""
    first, second = Buckets(tmp_path), Buckets(tmp_path)
    try:
        now = lambda: 1000.0  # noqa: E731 - a frozen clock

        def take(buckets, app, at=now):
            return buckets.take(app, "requests", at, 10.0, 4, 1, True)[0] == 1

        admitted = [take(first if n % 2 else second, "flood") for n in range(8)]
        assert admitted == [True] * 4 + [False] * 4
        assert take(second, "quiet")
        assert take(first, "flood", lambda: 1000.1)  # 0.1 s: one token back
        assert not take(second, "flood", lambda: 1000.1)
    finally:
        first.close()
        second.close()


# -- requests per second -------------------------------------------------------------------
def test_over_the_rate_answers_429_with_retry_after(limited, test_apps, clock):
    headers = auth(test_apps.app)
    # Two more (the queue's creation took the first token): one post through
    # the fast path, one listing through Pyramid's router.
    limited.post_json("/queue/jobs", {"n": 1}, headers=headers, status=201)
    limited.get("/queue", headers=headers, status=200)
    refused = limited.post_json("/queue/jobs", {"n": 2}, headers=headers, status=429)
    assert refused.headers["Retry-After"] == "1"
    assert refused.json["status"] == "error"
    assert "2 requests per second" in refused.json["error_msg"]["rate_limit"]
    assert limited.get("/queue", headers=headers, status=429).headers["Retry-After"] == "1"
    # The refused post stored nothing.
    clock.advance(0.5)
    messages = limited.get("/queue/jobs", headers=headers, status=200).json["messages"]
    assert [m["body"] for m in messages] == [{"n": 1}]


def test_another_application_is_not_slowed(limited, test_apps):
    statuses = [limited.get("/queue", headers=auth(test_apps.app), status="*").status_int]
    statuses += [limited.get("/queue", headers=auth(test_apps.app), status="*").status_int]
    statuses += [limited.get("/queue", headers=auth(test_apps.app), status="*").status_int]
    assert statuses == [200, 200, 429]
    # The other application has a bucket of its own, full.
    other = auth(f"{test_apps.app}-other", OTHER_KEY)
    for _ in range(3):
        limited.get("/queue", headers=other, status=200)
    limited.get("/queue", headers=other, status=429)


def test_unauthenticated_calls_cost_the_application_nothing(limited, test_apps):
    """Knowing an application's name (and its public queue) is not enough to
    use up its budget: wrong keys, no key and public reads take no token."""
    name = test_apps.app
    for _ in range(20):
        limited.get("/queue", headers=auth(name, "wrong-key"), status=401)
        limited.post_json("/queue/jobs", {"x": 1}, headers={"X-Application-Name": name}, status=401)
        limited.get("/queue/jobs", headers={"X-Application-Name": name}, status=200)
    # The two tokens left after creating the queue are still there.
    limited.get("/queue", headers=auth(name), status=200)
    limited.get("/queue", headers=auth(name), status=200)
    limited.get("/queue", headers=auth(name), status=429)


def test_the_application_file_overrides_the_default(make_app, sqlite_storage, two_apps, test_apps):
    app = make_app(
        sqlite_storage,
        **{
            "queuey.applications": two_apps("max_requests_per_second = 1\nmax_burst = 1"),
            "queuey.limits.max_requests_per_second": "0",  # off for everyone else
            "queuey.limits.throttle_hold": "0",
        },
    )
    client = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    client.get("/queue", headers=auth(test_apps.app), status=200)
    client.get("/queue", headers=auth(test_apps.app), status=429)
    for _ in range(50):
        client.get("/queue", headers=auth(f"{test_apps.app}-other", OTHER_KEY), status=200)


def test_admin_pages_share_the_budget_and_answer_a_page(
    make_app, sqlite_storage, wrap_app, test_apps
):
    client = wrap_app(
        make_app(
            sqlite_storage,
            **ADMIN_SETTINGS,
            **{
                "queuey.limits.max_requests_per_second": "1",
                "queuey.limits.max_burst": "2",
                "queuey.limits.throttle_hold": "0",
            },
        )
    )
    admin_sign_in(client)  # the sign-in form is not charged
    client.get("/admin/", status=200)
    client.get("/queue", headers=client.auth, status=200)  # the API: same application
    page = client.get("/admin/", status=429)
    assert page.headers["Retry-After"] == "1"
    assert "Too many requests" in page.text and "Traceback" not in page.text


# -- queues ----------------------------------------------------------------------------------
def test_queue_cap_refuses_one_more_queue(make_app, sqlite_storage, two_apps, test_apps):
    app = make_app(
        sqlite_storage,
        **{"queuey.applications": two_apps("max_queues = 2"), "queuey.limits.max_queues": "0"},
    )
    client = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    headers = auth(test_apps.app)
    for name in ("a", "b"):
        client.post_json("/queue", {"queue_name": name}, headers=headers, status=201)
    refused = client.post_json("/queue", {"queue_name": "c"}, headers=headers, status=403)
    assert refused.json["status"] == "error"
    assert "limit of 2 queues" in refused.json["error_msg"]["max_queues"]
    names = client.get("/queue", headers=headers).json["queues"]
    assert names == ["a", "b"]
    # Room again after a delete; the other application has no such cap.
    client.delete("/queue/a?delete=true", headers=headers, status=200)
    client.post_json("/queue", {"queue_name": "c"}, headers=headers, status=201)
    other = auth(f"{test_apps.app}-other", OTHER_KEY)
    for n in range(5):
        client.post_json("/queue", {"queue_name": f"q{n}"}, headers=other, status=201)


# -- waiting long polls ------------------------------------------------------------------------
def test_one_application_cannot_hold_every_waiting_slot():
    """Three slots in the process, two per application: the flooder's third
    waiting call answers at once, and another application's call still waits
    and is served when its message comes."""
    polls = LongPolls(3, poll_interval=0.5, per_application=lambda app: 2)
    mailbox: dict[str, list[str]] = {"flood": [], "quiet": []}
    answers: dict[str, list] = {}

    def reserve(app: str, tag: str) -> None:
        answers[tag] = polls.wait_for(
            app, "q", lambda: list(mailbox[app]), lambda found: bool(found), wait=20
        )

    floods = [threading.Thread(target=reserve, args=("flood", f"f{n}")) for n in range(2)]
    for thread in floods:
        thread.start()
    wait_until(lambda: polls.waiting_of("flood") == 2, 5, "the flood's two waiting calls")
    started = time.monotonic()
    reserve("flood", "f-extra")  # over its own cap: answered at once
    assert answers["f-extra"] == [] and time.monotonic() - started < 1.0
    quiet = threading.Thread(target=reserve, args=("quiet", "q"))
    quiet.start()
    wait_until(lambda: polls.waiting_of("quiet") == 1, 5, "the quiet application's call to wait")
    mailbox["quiet"].append("hello")
    polls.notify("quiet", "q")
    quiet.join(5)
    assert answers["q"] == ["hello"]
    mailbox["flood"].append("done")
    polls.notify("flood", "q")
    for thread in floods:
        thread.join(5)
    assert polls.waiting == 0


def test_long_poll_cap_per_application_on_a_live_server(request, tmp_path, two_apps, test_apps):
    """Over HTTP: the flooder holds its 2 waiting reserves of 3 slots; its
    third answers at once, and another application's reserve waits and gets
    the message posted meanwhile."""
    settings = server_settings(request, two_apps(), "sqlite", tmp_path / "polls.sqlite3")
    settings.update({"queuey.reserve.max_waiting": "3", "queuey.limits.max_waiting_polls": "2"})
    server = start_live_server(queuey.main({}, **settings), test_apps.app, threads=12)
    flood, other = auth(test_apps.app), auth(f"{test_apps.app}-other", OTHER_KEY)
    polls = server.app.registry.queuey.long_polls
    try:
        for headers in (flood, other):
            requests.post(f"{server.url}/queue", json={"queue_name": "w"}, headers=headers)

        def reserve(headers, wait):
            started = time.monotonic()
            res = requests.post(
                f"{server.url}/queue/w/reserve",
                json={"wait": wait, "limit": 1},
                headers=headers,
                timeout=30,
            )
            return time.monotonic() - started, res.json()

        holders = [
            threading.Thread(target=reserve, args=(flood, 15), daemon=True) for _ in range(2)
        ]
        for thread in holders:
            thread.start()
        wait_until(lambda: polls.waiting_of(test_apps.app) == 2, 10, "two waiting reserves")
        took, answer = reserve(flood, 4)
        assert took < 1.0 and answer["messages"] == []
        got = {}
        waiter = threading.Thread(target=lambda: got.update(r=reserve(other, 10)), daemon=True)
        waiter.start()
        wait_until(lambda: polls.waiting_of(f"{test_apps.app}-other") == 1, 10, "B waiting")
        assert polls.waiting_of(test_apps.app) == 2  # while the flood holds its two
        requests.post(f"{server.url}/queue/w", json={"for": "B"}, headers=other, timeout=10)
        waiter.join(10)
        took, answer = got["r"]
        assert [m["body"] for m in answer["messages"]] == [{"for": "B"}]
        assert took < 8
        for n in range(2):  # the flood's holders take one message each and go
            requests.post(f"{server.url}/queue/w", json={"n": n}, headers=flood, timeout=10)
        for thread in holders:
            thread.join(10)
        assert polls.waiting == 0
    finally:
        server.stop()
        server.app.registry.queuey.storage.close()


# -- configuration -----------------------------------------------------------------------------
def test_limits_are_validated_at_start_up(tmp_path):
    base = {"queuey.applications": "x.ini"}
    for key, value in [
        ("queuey.limits.max_requests_per_second", "-1"),
        ("queuey.limits.max_burst", "-1"),
        ("queuey.limits.max_waiting_polls", "lots"),
        ("queuey.limits.max_queues", "-5"),
    ]:
        with pytest.raises(ConfigurationError) as caught:
            load_settings({**base, key: value}, environ={})
        assert key in str(caught.value)
    parsed = load_settings(base, environ={})
    # Off by default (docs/security.rst says why); 0 turns the burst to one second of the rate.
    assert parsed.limits_max_requests_per_second == 0 and parsed.limits_max_burst == 0
    assert parsed.limits_max_queues > 0
    assert load_settings({**base, "queuey.limits.max_burst": "0"}, environ={}).limits_max_burst == 0
    path = tmp_path / "apps.ini"
    path.write_text("[application:a]\nkeys = plain:k\nmax_burst = -1\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_applications(path, environ={})
    assert "[application:a]" in str(caught.value) and "max_burst" in str(caught.value)
    path.write_text(
        "[application:a]\nkeys = plain:k\nmax_requests_per_second = 2.5\nmax_queues = 0\n",
        encoding="utf-8",
    )
    app = load_applications(path, environ={})["a"]
    assert (app.max_requests_per_second, app.max_queues, app.max_burst) == (2.5, 0, None)


def test_rate_follows_the_injected_clock(make_app, sqlite_storage, two_apps, test_apps):
    clock = ManualClock()
    app = make_app(
        sqlite_storage,
        **{
            "queuey.applications": two_apps("max_requests_per_second = 10\nmax_burst = 1"),
            "queuey.limits.throttle_hold": "0",
            "queuey.clock": clock,
        },
    )
    client = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    for _ in range(30):  # 10 per second for 3 s of the test's clock: never refused
        client.get("/queue", headers=auth(test_apps.app), status=200)
        clock.advance(0.1)
    client.get("/queue", headers=auth(test_apps.app), status=200)
    assert client.get("/queue", headers=auth(test_apps.app), status=429)


# -- refusals are held ---------------------------------------------------------------------------
def test_a_refusal_is_held_on_the_applications_waiting_slots():
    """A throttled call waits out its hold on one of its application's slots;
    with them all taken, the next refusal answers at once (parked threads stay
    bounded), and another application's slots are untouched."""
    polls = LongPolls(4, poll_interval=0.5, per_application=lambda app: 1)
    held = threading.Thread(target=polls.hold, args=("flood", 5.0), daemon=True)
    held.start()
    wait_until(lambda: polls.waiting_of("flood") == 1, 5, "the first refusal to be held")
    started = time.monotonic()
    assert polls.hold("flood", 5.0) is False
    assert time.monotonic() - started < 0.5
    assert polls.hold("quiet", 0.05) is True
    assert polls.waiting_of("flood") == 1


def test_a_throttled_request_is_answered_after_the_hold(
    make_app, sqlite_storage, two_apps, test_apps
):
    app = make_app(
        sqlite_storage,
        **{
            "queuey.applications": two_apps("max_requests_per_second = 0.1\nmax_burst = 1"),
            "queuey.limits.throttle_hold": "0.3",
        },
    )
    client = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    client.get("/queue", headers=auth(test_apps.app), status=200)
    started = time.monotonic()
    refused = client.get("/queue", headers=auth(test_apps.app), status=429)
    assert 0.3 <= time.monotonic() - started < 2
    assert refused.headers["Retry-After"] == "10"


@pytest.mark.parametrize("ini", ["development.ini", "production.ini"])
def test_the_shipped_files_do_not_cap_a_lone_application(ini):
    """A default exists to keep tenants apart, not to cap one application
    below the server's capacity (docs/security.rst): the request rate is off
    as shipped, and so every request of an unlimited application takes no
    bucket at all."""
    import plaster

    from queuey.core.quotas import default_limits

    path = Path(__file__).resolve().parents[2] / ini
    settings = load_settings(plaster.get_settings(str(path), "app:main"), environ={})
    limits = default_limits(settings)
    assert limits.requests_per_second == 0 and limits.burst == 0
    assert limits.subscriptions == 100

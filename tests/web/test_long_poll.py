"""Long polls of ``reserve`` on a real waitress server (threads, sockets), not webtest.

Fifty waiting reserve calls must not delay a post or a read (docs/invariants.rst, "long
polls do not starve posts"), and must get messages as soon as they are posted
instead of waiting out their ``wait``. Times are measured on the wall clock of
the server's own thread pool, so the bounds are generous for a busy 2-core box
yet far below the 20 s a waiter would otherwise sit.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

import pytest
import requests

import queuey
from queuey.errors import ConfigurationError
from tests.support import KEY, server_settings, start_live_server, wait_until

WAITERS = 50
#: The server's threads, as production.ini sets them: max_waiting (64) + 16.
THREADS = 80
#: A post or read among the waiters answers within this (it takes ~10 ms alone).
PROMPT = 1.0


@pytest.fixture
def serve(request, tmp_path, applications_file, test_apps):
    """``serve(path=None, **settings)``: the app on SQLite (a file of its own
    unless ``path`` is given) behind waitress with THREADS threads."""
    servers = []

    def make(path=None, **settings):
        path = path or tmp_path / f"long-poll-{len(servers)}.sqlite3"
        base = server_settings(request, applications_file, "sqlite", path)
        # One application plays every caller here: its own cap of waiting
        # calls (queuey.core.quotas, tests/web/test_quotas.py) is off.
        base["queuey.limits.max_waiting_polls"] = "0"
        base.update(settings)
        server = start_live_server(queuey.main({}, **base), test_apps.app, threads=THREADS)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
        server.app.registry.queuey.storage.close()


class Api:
    """Calls to one live server as the test application (a session per thread)."""

    def __init__(self, server) -> None:
        self.url = server.url
        self.headers = {"X-Application-Name": server.application, "ApplicationKey": KEY}

    def call(self, method: str, path: str, **kwargs) -> tuple[float, requests.Response]:
        started = time.monotonic()
        with requests.Session() as session:
            res = session.request(
                method, self.url + path, headers=self.headers, timeout=60, **kwargs
            )
        return time.monotonic() - started, res

    def reserve(self, queue: str, **params) -> tuple[float, list[dict]]:
        seconds, res = self.call("POST", f"/queue/{queue}/reserve", json=params)
        assert res.status_code == 200, res.text
        return seconds, res.json()["messages"]


def _waiters(api: Api, pool: ThreadPoolExecutor, count: int, wait: int = 20):
    return [pool.submit(api.reserve, "jobs", wait=wait) for _ in range(count)]


def test_fifty_waiting_reserves_neither_delay_posts_nor_wait_out_their_timeout(serve):
    server = serve()
    api = Api(server)
    polls = server.app.registry.queuey.long_polls
    for name in ("jobs", "other"):
        assert api.call("POST", "/queue", json={"queue_name": name})[1].status_code == 201
    alone_seconds, res = api.call("POST", "/queue/other", json={"n": "alone"})
    assert res.status_code == 201  # a post without waiters, for comparison

    with ThreadPoolExecutor(WAITERS) as pool:
        futures = _waiters(api, pool, WAITERS)
        wait_until(
            lambda: polls.waiting == WAITERS,
            timeout=60,
            what=lambda: f"{WAITERS} waiting reserves (have {polls.waiting})",
        )
        post_seconds, res = api.call("POST", "/queue/jobs", json={"n": 0})
        assert res.status_code == 201, res.text
        posted_at = time.monotonic()
        read_seconds, res = api.call("GET", "/queue/jobs")
        assert res.status_code == 200 and len(res.json()["messages"]) == 1
        done, _ = wait_futures(futures, timeout=10, return_when=FIRST_COMPLETED)
        first_delivery = time.monotonic() - posted_at
        assert done, "no waiter got the posted message within 10 s"

        entries = [{"body": {"n": n}} for n in range(1, WAITERS)]
        batch_seconds, res = api.call("POST", "/queue/jobs/batch", json={"messages": entries})
        assert res.status_code == 201, res.text
        batch_at = time.monotonic()
        results = [future.result(timeout=60) for future in futures]
        all_delivered = time.monotonic() - batch_at

    delivered = Counter(m["body"]["n"] for _, messages in results for m in messages)
    duplicates = sum(count - 1 for count in delivered.values())
    lost = WAITERS - len(delivered)
    longest = max(seconds for seconds, _ in results)
    figures = (
        f"long poll: {WAITERS} waiters; a post without waiters {alone_seconds * 1000:.0f} ms; "
        f"post {post_seconds * 1000:.0f} ms, read "
        f"{read_seconds * 1000:.0f} ms, batch {batch_seconds * 1000:.0f} ms among them; "
        f"first delivery {first_delivery * 1000:.0f} ms after the post, all delivered "
        f"{all_delivered * 1000:.0f} ms after the batch; longest waiter {longest:.1f} s of 20; "
        f"sent {WAITERS}, delivered {sum(delivered.values())}, duplicates {duplicates}, "
        f"lost {lost}"
    )
    print(figures)
    assert post_seconds < PROMPT and read_seconds < PROMPT and batch_seconds < PROMPT, figures
    assert first_delivery < PROMPT, figures
    assert (duplicates, lost) == (0, 0), figures
    assert all(len(messages) == 1 for _, messages in results), figures
    assert longest < 10, figures


def test_more_reserves_than_server_threads_still_leave_room_for_posts(serve):
    """100 long polls on 80 threads: 64 (max_waiting) wait, the rest answer at
    once, so posts still find a thread; unbounded, they would hold all 80."""
    calls = 100
    server = serve()
    api = Api(server)
    polls = server.app.registry.queuey.long_polls
    api.call("POST", "/queue", json={"queue_name": "jobs"})
    with ThreadPoolExecutor(calls) as pool:
        futures = _waiters(api, pool, calls)
        wait_until(
            lambda: (
                polls.waiting == polls.max_waiting
                and sum(f.done() for f in futures) == calls - polls.max_waiting
            ),
            timeout=60,
            what=lambda: (
                f"{polls.max_waiting} waiting (have {polls.waiting}) and the rest answered"
            ),
        )
        post_seconds, res = api.call("POST", "/queue/jobs", json={"n": 0})
        assert res.status_code == 201
        entries = [{"body": {"n": n}} for n in range(1, polls.max_waiting)]
        api.call("POST", "/queue/jobs/batch", json={"messages": entries})
        results = [future.result(timeout=60) for future in futures]
    delivered = Counter(m["body"]["n"] for _, messages in results for m in messages)
    figures = (
        f"{calls} reserves on {THREADS} threads: {polls.max_waiting} waited; post among them "
        f"{post_seconds * 1000:.0f} ms; delivered {sum(delivered.values())} of "
        f"{polls.max_waiting} posted, duplicates {sum(c - 1 for c in delivered.values())}"
    )
    print(figures)
    assert post_seconds < PROMPT, figures
    assert sorted(delivered) == list(range(polls.max_waiting)), figures
    assert max(delivered.values()) == 1, figures


def test_a_reserve_beyond_max_waiting_answers_at_once(serve):
    server = serve(**{"queuey.reserve.max_waiting": "2"})
    api = Api(server)
    polls = server.app.registry.queuey.long_polls
    api.call("POST", "/queue", json={"queue_name": "jobs"})
    with ThreadPoolExecutor(2) as pool:
        futures = _waiters(api, pool, 2)
        wait_until(lambda: polls.waiting == 2, timeout=30, what="two waiting reserves")
        seconds, messages = api.reserve("jobs", wait=20)
        print(f"reserve beyond max_waiting answered in {seconds * 1000:.0f} ms")
        assert messages == [] and seconds < PROMPT
        entries = [{"body": {"n": n}} for n in range(2)]
        api.call("POST", "/queue/jobs/batch", json={"messages": entries})
        got = sorted(m["body"]["n"] for f in futures for m in f.result(timeout=30)[1])
    assert got == [0, 1]
    metrics = api.call("GET", "/metrics")[1].text
    assert "queuey_reserve_wait_refused_total 1.0" in metrics


def test_a_waiter_finds_a_delayed_message_when_it_falls_due(serve):
    """No post wakes the waiter when the message falls due: it polls storage."""
    server = serve(**{"queuey.reserve.poll_interval": "0.2"})
    api = Api(server)
    api.call("POST", "/queue", json={"queue_name": "jobs"})
    with ThreadPoolExecutor(1) as pool:
        (future,) = _waiters(api, pool, 1, wait=15)
        wait_until(
            lambda: server.app.registry.queuey.long_polls.waiting == 1, what="a waiting reserve"
        )
        _, res = api.call("POST", "/queue/jobs?delay=1", json={"n": "late"})
        posted_at = time.monotonic()
        assert res.status_code == 201
        _, messages = future.result(timeout=30)
        after = time.monotonic() - posted_at
    print(f"delayed 1 s: delivered {after:.2f} s after the post (poll interval 0.2 s)")
    assert [m["body"] for m in messages] == [{"n": "late"}]
    assert 0.9 <= after < 4, after


def test_a_waiter_sees_a_post_through_another_api_node_within_the_poll_interval(serve, tmp_path):
    """Two API nodes on one store: a post through one wakes no waiter of the
    other, which finds the message on its next storage check."""
    shared = tmp_path / "shared.sqlite3"
    waiting_node = serve(path=shared, **{"queuey.reserve.poll_interval": "0.5"})
    posting_node = serve(path=shared)
    waiting, posting = Api(waiting_node), Api(posting_node)
    waiting.call("POST", "/queue", json={"queue_name": "jobs"})
    with ThreadPoolExecutor(1) as pool:
        (future,) = _waiters(waiting, pool, 1, wait=15)
        polls = waiting_node.app.registry.queuey.long_polls
        wait_until(lambda: polls.waiting == 1, what="a waiting reserve")
        _, res = posting.call("POST", "/queue/jobs", json={"n": "elsewhere"})
        posted_at = time.monotonic()
        assert res.status_code == 201
        _, messages = future.result(timeout=30)
        after = time.monotonic() - posted_at
    print(f"post through another node: delivered {after:.2f} s later (poll interval 0.5 s)")
    assert [m["body"] for m in messages] == [{"n": "elsewhere"}]
    assert after < 3, after


def test_a_waiter_gives_up_with_nothing_at_its_deadline(serve):
    server = serve(**{"queuey.reserve.poll_interval": "0.1"})
    api = Api(server)
    api.call("POST", "/queue", json={"queue_name": "jobs"})
    seconds, messages = api.reserve("jobs", wait=1)
    assert messages == []
    assert 0.9 <= seconds < 4, seconds
    assert server.app.registry.queuey.long_polls.waiting == 0


@pytest.mark.parametrize(
    "key, value",
    [
        ("queuey.reserve.poll_interval", "0.6"),
        ("queuey.reserve.poll_interval", "0"),
        ("queuey.reserve.max_waiting", "-1"),
        ("queuey.reserve.max_waiting", "many"),
        ("queuey.dedup_window", "0"),
    ],
)
def test_bad_long_poll_settings_stop_the_service_naming_the_key(
    make_app, sqlite_storage, key, value
):
    with pytest.raises(ConfigurationError) as caught:
        make_app(sqlite_storage, **{key: value})
    assert caught.value.key == key

"""The asyncio client against the server as shipped: granian with 2 worker
processes, one node per storage backend for the whole module (SQLite, and
Cassandra). What a user of :class:`AsyncQueueyClient` notices: the blocking
client's answer models and errors, work-queue calls, flow and schedules, a
long poll that returns as soon as a message comes, and a long poll that can
be cancelled without hiding the next message.

The retry rules are checked against the scripted server too, on both clients
at once: the asyncio client repeats a ``503`` itself where the blocking one
leaves it to urllib3, with the same outcome.

Each scenario runs in ``asyncio.run`` inside a plain test function.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from queuey.client import (
    AsyncQueueyClient,
    BadRequest,
    Conflict,
    FlowInfo,
    NotFound,
    OutgoingMessage,
    PostedMessage,
    QueueFlow,
    QueueInfo,
    QueuePaused,
    QueueStats,
    QueueyClient,
    ReceiptResult,
    ReceivedMessage,
    ReservedMessage,
    ScheduleInfo,
    SubscriptionFlow,
    Unauthorized,
    Unavailable,
)
from tests.client.scripted import refused_url
from tests.faults.conftest import ApiNode
from tests.support import KEY, server_settings, write_applications
from tests.support import TestApps as Apps

#: Both backends; each starts a granian node (a process), so each is slow.
BACKENDS = [
    pytest.param("sqlite", marks=pytest.mark.slow),
    pytest.param("cassandra", marks=[pytest.mark.slow, pytest.mark.cassandra]),
]
#: A message the tests post to a schedule.
MESSAGE = {"body": {"report": "daily"}}


@dataclass(frozen=True)
class Node:
    """A granian API node and the application the tests use on it."""

    url: str
    application: str
    backend: str

    def client(self, key: str = KEY, **settings: Any) -> AsyncQueueyClient:
        return AsyncQueueyClient(
            self.url, self.application, key, retries=2, backoff=0.05, **settings
        )

    def sync_client(self, key: str = KEY) -> QueueyClient:
        return QueueyClient(self.url, self.application, key, retries=2, backoff=0.05)


@pytest.fixture(scope="module", params=BACKENDS)
def node(request, tmp_path_factory) -> Iterator[Node]:
    backend = request.param
    workdir = tmp_path_factory.mktemp(f"aio-{backend}")
    suffix = uuid.uuid4().hex[:10]
    apps = Apps(app=f"aio-{suffix}", remote_app=f"aioremote-{suffix}")
    applications = write_applications(workdir / "applications.ini", apps)
    settings = server_settings(request, applications, backend, workdir / "aio.sqlite3")
    api = ApiNode(f"aio-{backend}", workdir, settings, server="granian", workers=2)
    try:
        api.wait_ready()
        yield Node(api.url, apps.app, backend)
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            api.stop()


def run(scenario: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    """Run one async scenario to its end (bounded) in a fresh event loop."""

    async def bounded() -> Any:
        return await asyncio.wait_for(scenario(), timeout)

    return asyncio.run(bounded())


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """Ask ``check`` again and again until it answers truthy or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def waiting_polls(node: Node) -> int:
    """Reserve calls long-polling on the node now, over both workers (a gauge)."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(node.url + "/metrics", timeout=10)).text
    line = next(ln for ln in text.splitlines() if ln.startswith("queuey_reserve_waiting "))
    return int(float(line.split()[1]))


async def polls_become(node: Node, count: int, what: str) -> None:
    async def reached() -> bool:
        return await waiting_polls(node) == count

    await until(reached, 15, what)


# ------------------------------------------------------------ the real server


def test_posts_and_a_batch_come_back_as_the_blocking_clients_models(node):
    sync = node.sync_client()

    async def scenario() -> None:
        async with node.client() as client:
            info = await client.create_queue("orders", partitions=2, visibility_timeout=30)
            assert isinstance(info, QueueInfo) and info == sync.queue_info("orders")
            one = await client.post("orders", {"n": 0}, partition=1)
            batch = await client.post_batch(
                "orders",
                [{"n": 1}, OutgoingMessage({"n": 2}, partition=2, attributes={"k": "v"})],
            )
            posted = [one, *batch]
            assert all(type(p) is PostedMessage for p in posted)

            leased = await client.reserve("orders", limit=10)
            assert sorted(m.body["n"] for m in leased) == [0, 1, 2]
            assert all(type(m) is ReservedMessage and m.attempts == 1 for m in leased)
            assert await client.reserve("orders", limit=10) == [], "leased to nobody else"
            refs = [f"{p.partition}:{p.message_id}" for p in posted]
            found = await client.get_messages("orders", refs)
            assert all(type(m) is ReceivedMessage for m in found)
            assert found == sync.get_messages("orders", refs)

            acked = await client.ack("orders", [m.receipt for m in leased])
            assert acked == ReceiptResult(3, {})
            assert await client.ack("orders", []) == ReceiptResult(0, {}), "no call at all"
            stats = await client.stats("orders")
            assert type(stats) is QueueStats
            counts = stats.subscription()
            assert (counts.available, counts.in_flight) == (0, 0)
            assert "orders" in [q.name async for q in client.iter_queues(page_size=1)]

    run(scenario)
    sync.close()


def test_extend_release_and_stale_receipts_answer_as_they_do_blocking(node):
    async def scenario() -> None:
        async with node.client() as client:
            await client.create_queue("jobs", visibility_timeout=30)
            await client.post_batch("jobs", [{"n": 1}, {"n": 2}])
            kept, given_back = await client.reserve("jobs", limit=2, visibility_timeout=5)
            assert await client.extend("jobs", [kept.receipt], 60) == ReceiptResult(1, {})
            released = await client.release("jobs", [given_back.receipt], error="boom")
            assert released == ReceiptResult(1, {}, 0)
            (again,) = await client.reserve("jobs", limit=2)
            assert again.message_id == given_back.message_id and again.attempts == 2
            stale = await client.ack("jobs", [given_back.receipt])
            assert stale == ReceiptResult(0, {given_back.receipt: "expired"})
            done = await client.ack("jobs", [kept.receipt, again.receipt])
            assert done.done == 2 and done.ok

    run(scenario)


#: Calls refused by the server, each with the error both clients raise.
REFUSED = {
    "missing queue": (NotFound, lambda c: c.queue_info("no-such-queue")),
    "bad limit": (BadRequest, lambda c: c.reserve("refusals", limit=1000)),
    "existing queue": (Conflict, lambda c: c.create_queue("refusals")),
    "wrong key": (Unauthorized, lambda c: c.create_queue("other")),
}


def test_errors_are_the_blocking_clients_classes_with_the_same_details(node):
    sync = node.sync_client()
    sync.create_queue("refusals")
    seen = {}

    async def scenario() -> None:
        for label, (error, call) in REFUSED.items():
            key = "not-the-key" if label == "wrong key" else KEY
            with pytest.raises(error) as blocking:
                call(node.sync_client(key))
            async with node.client(key) as client:
                with pytest.raises(error) as awaited:
                    await call(client)
            assert type(awaited.value) is type(blocking.value) is error, label
            mine, theirs = awaited.value, blocking.value
            assert (mine.status, mine.error_msg, mine.outcome_unknown) == (
                theirs.status,
                theirs.error_msg,
                theirs.outcome_unknown,
            ), label
            seen[label] = (mine.status, mine.error_msg)

    run(scenario)
    sync.close()
    print("; ".join(f"{label}: {status} {msg}" for label, (status, msg) in seen.items()))


def test_flow_and_schedule_calls_round_trip(node):
    sync = node.sync_client()

    async def scenario() -> None:
        async with node.client() as client:
            await client.create_queue("flows")
            info = await client.set_queue_flow("flows", post_rate=50, max_length=100)
            assert type(info) is FlowInfo and info == sync.flow("flows")
            mail = await client.set_subscription_flow("flows", "mail", max_in_flight=2)
            assert type(mail) is SubscriptionFlow and mail.max_in_flight == 2
            assert await client.flow("flows") == FlowInfo(info.queue, {"mail": mail})
            paused = await client.pause("flows")
            assert type(paused) is QueueFlow and paused.paused
            with pytest.raises(QueuePaused) as refused:
                await client.post("flows", {"n": 1})
            assert refused.value.field == "paused" and not refused.value.outcome_unknown
            assert (await client.resume("flows")).paused is False
            assert (await client.pause("flows", "mail")).paused
            assert (await client.resume("flows", "mail")).paused is False
            reds = {"colour": ["red"]}
            assert await client.set_subscription_filter("flows", "reds", reds) == reds
            assert await client.subscription_filters("flows") == {"reds": reds}

            fields = {"name": "nightly", "queue": "flows", "cron": "0 2 * * *", "message": MESSAGE}
            made = await client.create_schedule(fields)
            assert type(made) is ScheduleInfo and made == sync.get_schedule("nightly")
            with pytest.raises(Conflict):
                await client.create_schedule(fields)
            assert [s.name for s in await client.list_schedules()] == ["nightly"]
            assert (await client.pause_schedule("nightly")).state == "paused"
            assert (await client.get_schedule("nightly")).paused
            assert (await client.resume_schedule("nightly")).state == "active"
            assert await client.delete_schedule("nightly") is None
            with pytest.raises(NotFound):
                await client.get_schedule("nightly")

    run(scenario)
    sync.close()


def test_a_long_poll_returns_as_soon_as_a_message_is_posted(node):
    async def scenario() -> float:
        async with node.client() as client:
            await client.create_queue("polls")
            await polls_become(node, 0, "no poll of an earlier test to wait")
            poll = asyncio.create_task(client.reserve("polls", wait=10))
            await polls_become(node, 1, "the reserve to wait on the server")
            posted = time.monotonic()
            await client.post("polls", {"n": 1})
            got = await poll
            assert [m.body for m in got] == [{"n": 1}]
            return time.monotonic() - posted

    waited = run(scenario)
    print(f"{node.backend}: the long poll (wait 10 s) answered {waited:.3f} s after the post")
    assert waited < 2, "the poll answers at once on its worker, within its poll interval on another"


def test_a_cancelled_long_poll_ends_at_once_and_hides_no_later_message(node):
    """The server runs the abandoned poll on (WSGI cannot see the disconnect)
    and leases it the next message; the client gives that lease back at once,
    so the next reserve gets the message, long before its visibility timeout."""
    figures = {}

    async def cancel(client: AsyncQueueyClient, queue: str) -> None:
        poll = asyncio.create_task(client.reserve(queue, wait=10))
        await polls_become(node, 1, "the reserve to wait on the server")
        started = time.monotonic()
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        figures.setdefault("cancel", []).append(time.monotonic() - started)

    async def scenario() -> None:
        async with node.client() as client:
            await client.create_queue("cancels", visibility_timeout=30)
            await polls_become(node, 0, "no poll of an earlier test to wait")

            # The abandoned poll surely takes the message: nobody else asks
            # until it has ended (the gauge is back to 0).
            await cancel(client, "cancels")
            assert (await client.heartbeat())["status"] == "ok", "the client stays usable"
            posted = await client.post("cancels", {"n": 1})
            await polls_become(node, 0, "the abandoned poll to take the message")
            started = time.monotonic()
            (back,) = await client.reserve("cancels", wait=5)
            figures["given back"] = time.monotonic() - started
            assert back.message_id == posted.message_id
            assert back.attempts == 2, "the abandoned poll leased it once"
            await client.ack("cancels", [back.receipt])

            # As a consumer does it: cancel, and reserve again at once.
            await cancel(client, "cancels")
            posted = await client.post("cancels", {"n": 2})
            started = time.monotonic()
            (next_one,) = await client.reserve("cancels", wait=10)
            figures["next reserve"] = time.monotonic() - started
            assert next_one.message_id == posted.message_id
            figures["attempts"] = next_one.attempts
            await client.ack("cancels", [next_one.receipt])

    run(scenario)
    print(
        f"{node.backend}: cancel returned in {max(figures['cancel']) * 1000:.1f} ms at most; "
        f"the message the abandoned poll leased came back in {figures['given back']:.3f} s; "
        f"cancel-post-reserve: {figures['next reserve']:.3f} s "
        f"(attempts {figures['attempts']}); visibility timeout 30 s"
    )
    assert max(figures["cancel"]) < 1
    assert figures["given back"] < 2 and figures["next reserve"] < 2


def test_without_the_client_an_abandoned_long_poll_hides_the_next_message(node):
    """Why the client gives the lease back: a long poll dropped by a plain
    HTTP client keeps running on the server, leases the next message, and
    that message comes back only after its visibility timeout."""
    timeout = 2

    async def scenario() -> tuple[float, int]:
        async with node.client() as client:
            await client.create_queue("dropped", visibility_timeout=timeout)
            await polls_become(node, 0, "no poll of an earlier test to wait")
            async with httpx.AsyncClient(headers=client.headers()) as plain:
                body = {"wait": 10}
                url = f"{node.url}/queue/dropped/reserve"
                poll = asyncio.create_task(plain.post(url, json=body, timeout=30))
                await polls_become(node, 1, "the plain reserve to wait on the server")
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
            posted = time.monotonic()
            await client.post("dropped", {"n": 1})
            await polls_become(node, 0, "the abandoned poll to take the message")
            assert await client.reserve("dropped") == [], "leased to the abandoned poll"
            (late,) = await client.reserve("dropped", wait=timeout + 5)
            await client.ack("dropped", [late.receipt])
            return time.monotonic() - posted, late.attempts

    hidden, attempts = run(scenario)
    print(f"{node.backend}: hidden {hidden:.2f} s (visibility timeout {timeout} s)")
    assert attempts == 2 and timeout - 0.5 < hidden < timeout + 3


def test_closing_the_client_with_an_abandoned_poll_is_prompt(node):
    async def scenario() -> float:
        client = node.client()
        await client.create_queue("closing")
        poll = asyncio.create_task(client.reserve("closing", wait=1))
        await asyncio.sleep(0.2)
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        started = time.monotonic()
        await client.aclose()
        return time.monotonic() - started

    assert run(scenario) < 1


# --------------------------------------------------- retry rules, both clients


def call_with(kind: str, urls: Any, name: str, *args: Any, **settings: Any) -> Any:
    """One call of a fresh client of ``kind`` (``sync`` or ``async``)."""
    settings = {"backoff": 0.01, "max_backoff": 0.05, **settings}
    if kind == "sync":
        with QueueyClient(urls, "app", "key", **settings) as client:
            return getattr(client, name)(*args)

    async def scenario() -> Any:
        async with AsyncQueueyClient(urls, "app", "key", **settings) as client:
            return await getattr(client, name)(*args)

    return run(scenario, 30)


UNAVAILABLE = {"status": "error", "error_msg": {"storage": "unavailable"}}
POSTED = {
    "status": "ok",
    "messages": [
        {"message_id": "0123456789ab1def8123456789abcdef", "timestamp": 1.5, "partition": 1}
    ],
}
STATS = {
    "status": "ok",
    "queue_name": "q",
    "messages": 0,
    "oldest_timestamp": None,
    "partitions": [],
    "subscriptions": [],
}


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_503_of_a_read_is_retried_honouring_retry_after(scripted, kind):
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0.02"})
    scripted.answer(200, STATS)
    assert call_with(kind, scripted.url, "stats", "q").name == "q"
    assert len(scripted.requests) == 2


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_post_without_dedup_id_answered_503_is_sent_once(scripted, kind):
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0"})
    with pytest.raises(Unavailable) as info:
        call_with(kind, scripted.url, "post", "q", {"a": 1}, auto_dedup=False)
    assert len(scripted.requests) == 1
    assert info.value.outcome_unknown is True and info.value.error_msg == UNAVAILABLE["error_msg"]


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_keyed_post_answered_503_is_sent_again_with_its_dedup_id(scripted, kind):
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0"})
    scripted.answer(201, POSTED)
    assert type(call_with(kind, scripted.url, "post", "q", {"a": 1})) is PostedMessage
    first, second = (path for _, path, _ in scripted.requests)
    assert first == second and "dedup_id=" in first


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_refusing_node_is_failed_over_and_an_answer_that_timed_out_is_not_reposted(
    scripted, kind
):
    scripted.answer(201, POSTED)
    posted = call_with(kind, [refused_url(), scripted.url], "post", "q", {"a": 1})
    assert posted.partition == 1 and len(scripted.requests) == 1
    scripted.answer(201, POSTED, delay=0.5)
    with pytest.raises(Unavailable, match="not retried") as info:
        call_with(kind, scripted.url, "post", "q", {"a": 1}, timeout=0.1, auto_dedup=False)
    assert info.value.outcome_unknown is True and len(scripted.requests) == 2


@pytest.mark.unit
def test_a_call_on_the_wire_is_the_blocking_clients(scripted):
    sent = {}
    for kind in ("sync", "async"):
        scripted.answer(200, {"status": "ok", "messages": []})
        call_with(kind, scripted.url, "reserve", "my q", "subs", 5, None, 3, [1, 3])
        method, path, body = scripted.requests[-1]
        sent[kind] = (method, path, json.loads(body))
    assert sent["sync"] == sent["async"]
    assert sent["async"] == (
        "POST",
        "/queue/my%20q/reserve",
        {"subscription": "subs", "limit": 5, "wait": 3, "partitions": "1,3"},
    )

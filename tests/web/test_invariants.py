"""The invariants of docs/invariants.rst, over real HTTP against real storage.

Each test runs on the embedded SQLite store and on the real Cassandra node.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from queuey import ids
from tests.support import KEY, wait_until

BACKENDS = ["sqlite", pytest.param("cassandra", marks=[pytest.mark.cassandra, pytest.mark.slow])]


def headers(server):
    return {"X-Application-Name": server.application, "ApplicationKey": KEY}


def create_queue(server, name, partitions):
    res = requests.post(
        f"{server.url}/queue",
        json={"queue_name": name, "partitions": partitions},
        headers=headers(server),
        timeout=10,
    )
    assert res.status_code == 201, res.text


def page_forward(session, server, queue, since, limit=200):
    params = {"order": "ascending", "limit": limit}
    if since:
        params["since"] = since
    res = session.get(
        f"{server.url}/queue/{queue}", params=params, headers=headers(server), timeout=30
    )
    assert res.status_code == 200, res.text
    return res.json()["messages"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_no_reader_skips_under_concurrent_writers(make_live_server, backend):
    """Invariant 2: paging forward with since=<last id> never misses a message."""
    server = make_live_server(backend)
    delay = server.app.registry.queuey.settings.read_delay
    create_queue(server, "noskip", partitions=4)
    acknowledged: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def writer(worker: int) -> None:
        session = requests.Session()
        n = 0
        while not stop.is_set():
            batch = [{"body": {"w": worker, "n": n + i}} for i in range(5)]
            res = session.post(
                f"{server.url}/queue/noskip/batch",
                json={"messages": batch},
                headers=headers(server),
                timeout=30,
            )
            if res.status_code != 201:
                errors.append(res.text)
                return
            with lock:
                acknowledged.update(m["message_id"] for m in res.json()["messages"])
            n += 5

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for thread in writers:
        thread.start()
    seen: list[str] = []
    reader = requests.Session()
    since = None
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        page = page_forward(reader, server, "noskip", since)
        seen.extend(m["message_id"] for m in page)
        if page:
            since = page[-1]["message_id"]
    stop.set()
    for thread in writers:
        thread.join()
    assert errors == []
    # Once the writers stop, the newest messages surface after the read delay.

    def drained() -> bool:
        nonlocal since
        page = page_forward(reader, server, "noskip", since, limit=1000)
        seen.extend(m["message_id"] for m in page)
        if page:
            since = page[-1]["message_id"]
        return not page and set(seen) >= acknowledged

    wait_until(drained, timeout=delay + 30, interval=0.2, what="the reader to catch up")
    assert len(seen) == len(set(seen)), "a forward reader saw a message twice"
    missing = acknowledged - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages were skipped"
    keys = [ids.order_key(ids.parse_id(s)) for s in seen]
    assert keys == sorted(keys)
    assert len(acknowledged) > 100


@pytest.mark.parametrize("backend", BACKENDS)
def test_acknowledged_messages_survive_a_restart(make_live_server, backend, tmp_path):
    """Invariant 1: every 201 message is readable from a new API process."""
    extra = {"queuey.sqlite.path": str(tmp_path / "durable.sqlite3")} if backend == "sqlite" else {}
    first = make_live_server(backend, **extra)
    queue = f"durable{int(time.time() * 1000) % 10**9}"
    create_queue(first, queue, partitions=3)
    posted = []
    for n in range(30):
        res = requests.post(
            f"{first.url}/queue/{queue}", json={"n": n}, headers=headers(first), timeout=10
        )
        assert res.status_code == 201
        posted.append(res.json()["messages"][0]["message_id"])
    first.stop()
    first.app.registry.queuey.storage.close()

    second = make_live_server(backend, **extra)
    delay = second.app.registry.queuey.settings.read_delay

    def all_back():
        res = requests.get(
            f"{second.url}/queue/{queue}",
            params={"limit": 1000, "order": "ascending"},
            headers=headers(second),
            timeout=10,
        )
        got = [m["message_id"] for m in res.json()["messages"]]
        return got if len(got) == len(posted) else None

    got = wait_until(all_back, timeout=delay + 15, interval=0.2, what="every message back")
    assert sorted(got) == sorted(posted)
    assert got == posted  # one writer, in order: ascending read is post order

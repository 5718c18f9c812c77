"""The production server's worker processes (granian, ``queuey.server``) keep
every invariant of one process: on one SQLite file, ids are minted in order
across workers, concurrent posts share commits and lose nothing, a queue change
through one worker is seen by the next request to any other, and a worker
killed with ``kill -9`` loses nothing it acknowledged.

Each request lands on whichever worker the kernel hands the connection to, so
these tests send many requests on fresh connections and check what every one
of them saw.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests

from queuey.client import QueueyClient
from tests.faults.conftest import AckingPoster, PostingFigures, read_back, read_back_complete
from tests.support import KEY, wait_until

PARTITIONS = 4
pytestmark = pytest.mark.slow


def headers(app: str) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": KEY}


def test_two_workers_mint_ids_in_order_and_lose_nothing(make_api_node, test_apps):
    node = make_api_node("workers", server="granian")
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    queue = f"order{int(time.time() * 1000)}"
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=PARTITIONS)
    acked: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def post(worker: int) -> None:
        for n in range(150):
            try:
                # A new connection each time: the kernel spreads them over the workers.
                res = requests.post(
                    f"{node.url}/queue/{queue}",
                    json={"key": f"{worker}-{n}"},
                    headers=headers(test_apps.app),
                    timeout=10,
                )
            except requests.RequestException as exc:
                errors.append(repr(exc))
                continue
            if res.status_code != 201:
                errors.append(f"{res.status_code} {res.text[:200]}")
                continue
            with lock:
                acked.extend(res.json()["messages"])

    threads = [threading.Thread(target=post, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stamps = [m["timestamp"] for m in acked]
    ids = [m["message_id"] for m in acked]
    with QueueyClient(node.url, test_apps.app, KEY) as reader:
        found = read_back(reader, queue, PARTITIONS)
    print(
        f"\n[granian, 2 workers, SQLite] posted={len(acked)} errors={len(errors)} "
        f"distinct_ids={len(set(ids))} distinct_timestamps={len(set(stamps))} "
        f"read_back={sum(found.values())} duplicates={sum(n - 1 for n in found.values())}"
    )
    assert not errors, errors[:3]
    assert len(acked) == 8 * 150
    # One file, one write lock across processes: every id has its own microsecond,
    # so ids sort the way they were committed, whichever worker minted them.
    assert len(set(stamps)) == len(stamps) == len(set(ids))
    assert sum(found.values()) == len(acked) and max(found.values()) == 1


def test_a_purge_through_one_worker_is_seen_by_the_next_request_to_any(make_api_node, test_apps):
    """Without a shared change counter, the other worker's cached metadata would
    post into the purged incarnation (the message then vanishes from reads)."""
    node = make_api_node("workers", server="granian")
    queue = f"purge{int(time.time() * 1000)}"
    auth = headers(test_apps.app)
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=1)
    for _ in range(5):  # warm both workers' caches
        requests.get(f"{node.url}/queue/{queue}", headers=auth, timeout=10).raise_for_status()
    for round_ in range(20):
        res = requests.delete(f"{node.url}/queue/{queue}?delete=false", headers=auth, timeout=10)
        assert res.status_code == 200, res.text
        res = requests.post(
            f"{node.url}/queue/{queue}", json={"round": round_}, headers=auth, timeout=10
        )
        assert res.status_code == 201, res.text
        read = requests.get(f"{node.url}/queue/{queue}", headers=auth, timeout=10).json()
        assert [m["body"] for m in read["messages"]] == [{"round": round_}], round_


def test_kill_9_of_a_worker_loses_nothing_acknowledged(make_api_node, test_apps):
    node = make_api_node("workers", server="granian")
    queue = f"workerkill{int(time.time() * 1000)}"
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=PARTITIONS)
    posters = [
        AckingPoster(f"p{i}", [node.url], test_apps.app, queue, PARTITIONS, batch=1 + 9 * (i % 2))
        for i in range(4)
    ]
    for poster in posters:
        poster.start()
    wait_until(lambda: sum(len(p.counts.acked) for p in posters) > 300, 60, "posts to flow")
    victim = node.workers()[0]
    os.kill(victim, signal.SIGKILL)
    killed_at = sum(len(p.counts.acked) for p in posters)
    # The supervisor starts a new worker; posts go on through the other meanwhile.
    wait_until(
        lambda: sum(len(p.counts.acked) for p in posters) > killed_at + 300,
        60,
        "posts to flow after the kill",
    )
    for poster in posters:
        poster.stop()
    expected = set().union(*(p.counts.acked for p in posters))
    with QueueyClient(node.url, test_apps.app, KEY) as reader:
        found = read_back_complete(
            lambda: read_back(reader, queue, PARTITIONS), expected, timeout=30, interval=0.5
        )
    figures = PostingFigures.count(posters, found)
    print(f"\n[granian, kill -9 of one of 2 workers, SQLite] {figures.line()}")
    assert victim not in node.workers()
    assert len(node.workers()) >= 2, "the supervisor replaced the killed worker"
    assert figures.lost == 0, figures.line()


def test_metrics_count_every_worker(make_api_node, test_apps):
    """Whichever worker answers ``/metrics``, it counts the posts of all of them."""
    node = make_api_node("workers", server="granian")
    queue = f"metrics{int(time.time() * 1000)}"
    auth = headers(test_apps.app)
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=1)
    for n in range(60):
        res = requests.post(f"{node.url}/queue/{queue}", json={"n": n}, headers=auth, timeout=10)
        assert res.status_code == 201, res.text
    seen = set()
    for _ in range(20):
        text = requests.get(f"{node.url}/metrics", timeout=10).text
        posted = [ln for ln in text.splitlines() if ln.startswith("queuey_messages_posted_total")]
        seen.add(posted[0].split()[-1] if posted else None)
    assert seen == {"60.0"}, seen


def test_every_worker_exposes_the_figures_the_refresher_process_measured(make_api_node, test_apps):
    """Queues are measured by a process of their own; every worker's /metrics
    shows its figures (the workers follow its snapshot)."""
    node = make_api_node("workers", server="granian", **{"queuey.stats.interval": "0.5"})
    assert len(node.workers()) == 2 and len(node.workers("refresher")) == 1
    queue = f"figures{int(time.time() * 1000)}"
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=1)
        admin.post_batch(queue, [{"n": n} for n in range(7)])
    line = f'queuey_queue_depth{{application="{test_apps.app}",queue="{queue}"}} 7.0'

    def shown_by_every_answer() -> bool:
        answers = [requests.get(f"{node.url}/metrics", timeout=10).text for _ in range(10)]
        return all(line in text.splitlines() for text in answers)

    wait_until(shown_by_every_answer, 30, "every worker to show the measured depth", 0.5)


def _waiting_reserves(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("queuey_reserve_waiting"):
            return float(line.split()[-1])
    return 0.0


def test_a_long_poll_on_one_worker_is_answered_by_a_post_through_any(make_api_node, test_apps):
    """Long polls wait in one worker's memory; a post the other worker takes
    must still reach them within the poll interval, not at their deadline."""
    node = make_api_node("workers", server="granian", **{"queuey.reserve.poll_interval": "0.2"})
    queue = f"longpoll{int(time.time() * 1000)}"
    auth = headers(test_apps.app)
    with QueueyClient(node.url, test_apps.app, KEY) as admin:
        admin.create_queue(queue, partitions=2)
    waits: list[float] = []
    for round_ in range(8):
        answer: dict = {}

        def reserve(answer: dict = answer) -> None:
            started = time.monotonic()
            res = requests.post(
                f"{node.url}/queue/{queue}/reserve",
                json={"limit": 1, "wait": 15},
                headers={**auth, "Connection": "close"},
                timeout=30,
            )
            answer["elapsed"] = time.monotonic() - started
            answer["res"] = res

        waiter = threading.Thread(target=reserve)
        waiter.start()
        wait_until(lambda: _waiting_reserves(node.url) >= 1, 10, "the reserve to wait", 0.05)
        posted_at = time.monotonic()
        res = requests.post(
            f"{node.url}/queue/{queue}",
            json={"round": round_},
            headers={**auth, "Connection": "close"},
            timeout=10,
        )
        assert res.status_code == 201, res.text
        waiter.join(30)
        assert answer["res"].status_code == 200, answer["res"].text
        bodies = [m["body"] for m in answer["res"].json()["messages"]]
        assert bodies == [{"round": round_}], bodies
        waits.append(time.monotonic() - posted_at)
        receipts = [m["receipt"] for m in answer["res"].json()["messages"]]
        requests.post(
            f"{node.url}/queue/{queue}/ack", json={"receipts": receipts}, headers=auth, timeout=10
        ).raise_for_status()
    print(f"\n[granian, 2 workers] post -> waiting reserve: worst {max(waits) * 1000:.0f} ms")
    # Far below the 15 s wait: every waiter was answered by the post, whichever
    # worker held it (a poll interval of 0.2 s, plus the request itself).
    assert max(waits) < 3.0, waits

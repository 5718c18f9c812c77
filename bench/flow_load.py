"""The HTTP load of ``bench/flow.py``: calls, flow settings, and consumers
that log every reserve with its times.

Every caller here is a plain ``http.client`` connection to one API node (the
bench application's headers), so the load generator's own cost stays small
beside the nodes it measures.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.api import BODY_200, request
from bench.workqueue_load import percentiles

#: Messages a second each trickling group posts, one per post.
TRICKLE_PER_S = 10
#: Writers posting the flood, batches of 100 each.
FLOOD_WRITERS = 4


def connect(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def call(
    conn: http.client.HTTPConnection, method: str, path: str, payload: Any = None
) -> tuple[int, Any]:
    """One request; the status and the parsed JSON answer (or its first bytes).
    A connection the node dropped answers 503 (outcome unknown, as a load
    balancer would say); the next call connects again."""
    body = None if payload is None else json.dumps(payload).encode()
    try:
        status, data = request(conn, method, path, body)
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        return 503, {"raw": f"connection lost: {exc!r}"}
    try:
        return status, json.loads(data)
    except ValueError:
        return status, {"raw": data[:200].decode(errors="replace")}


def expect(conn: http.client.HTTPConnection, method: str, path: str, payload: Any = None) -> Any:
    """A set-up call that must succeed (2xx)."""
    status, answer = call(conn, method, path, payload)
    if not 200 <= status < 300:
        raise RuntimeError(f"{method} {path}: {status} {answer}")
    return answer


def queue_name(tag: str) -> str:
    return f"flow{tag}{uuid.uuid4().hex[:10]}"


class FlowDoor:
    """Flow settings changed as a user's program changes them: through the
    REST routes of docs/flow.rst, on one node unless told which."""

    def __init__(self, port: int) -> None:
        self.conn = connect(port)

    def close(self) -> None:
        self.conn.close()

    def set_queue(self, queue: str, **fields: Any) -> None:
        expect(self.conn, "PUT", f"/queue/{queue}", fields)

    def set_subscription(self, queue: str, sub: str, **fields: Any) -> None:
        expect(self.conn, "PUT", f"/queue/{queue}/subscriptions/{sub}", fields)

    def pause(self, queue: str, sub: str, conn: http.client.HTTPConnection | None = None) -> None:
        """Pause ``sub``'s deliveries (through ``conn``'s node when given)."""
        expect(conn or self.conn, "POST", f"/queue/{queue}/subscriptions/{sub}/pause")

    def resume(self, queue: str, sub: str, conn: http.client.HTTPConnection | None = None) -> None:
        expect(conn or self.conn, "POST", f"/queue/{queue}/subscriptions/{sub}/resume")


# ---------------------------------------------------------------- consumers


@dataclass
class Reserve:
    """One reserve call: when it was sent and answered (``time.perf_counter``),
    through which node, and the bodies it handed out."""

    node: int
    sent: float
    received: float
    bodies: list[dict]


@dataclass
class ReserveLog:
    """Every reserve of a run, thread-safe; ``errors`` stops the consumers,
    ``unavailable`` counts the calls answered 503 (made again, as a consumer
    would)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    reserves: list[Reserve] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unavailable: int = 0

    def retry(self, status: int) -> bool:
        """Whether a call answered ``status`` is to be made again (503: counted)."""
        if status != 503:
            return False
        with self.lock:
            self.unavailable += 1
        time.sleep(0.2)
        return True

    def add(self, entry: Reserve) -> None:
        with self.lock:
            self.reserves.append(entry)

    def failed(self, text: str) -> None:
        with self.lock:
            self.errors.append(text[:300])

    def delivered(self, since: float = 0.0, until: float = float("inf")) -> int:
        """Messages handed out by reserves answered in ``[since, until)``."""
        with self.lock:
            return sum(len(r.bodies) for r in self.reserves if since <= r.received < until)


class Consumers:
    """``count`` threads spread over ``ports``, each looping reserve (``limit``,
    ``wait``) then ``finish`` (``ack`` or ``release``) of what it got, until
    :meth:`stop`. ``on_batch(messages, received)`` sees every non-empty answer."""

    def __init__(
        self,
        ports: list[int],
        queue: str,
        log: ReserveLog,
        *,
        count: int = 4,
        limit: int = 10,
        wait: int = 1,
        finish: str = "ack",
        on_batch: Callable[[list[dict], float], None] = lambda messages, received: None,
    ) -> None:
        self.queue, self.log, self.limit, self.wait = queue, log, limit, wait
        self.finish, self.on_batch = finish, on_batch
        self._stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(i % len(ports), ports[i % len(ports)]))
            for i in range(count)
        ]

    def start(self) -> Consumers:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self, node: int, port: int) -> None:
        conn = connect(port)
        ask = {"limit": self.limit, "wait": self.wait, "visibility_timeout": 120}
        try:
            while not self._stop.is_set() and not self.log.errors:
                sent = time.perf_counter()
                status, answer = call(conn, "POST", f"/queue/{self.queue}/reserve", ask)
                received = time.perf_counter()
                if self.log.retry(status):
                    continue
                if status != 200:
                    self.log.failed(f"reserve {status} {answer}")
                    return
                messages = answer.get("messages", [])
                self.log.add(Reserve(node, sent, received, [m["body"] for m in messages]))
                if not messages:
                    continue
                self.on_batch(messages, received)
                receipts = {"receipts": [m["receipt"] for m in messages]}
                path = f"/queue/{self.queue}/{self.finish}"
                status, answer = call(conn, "POST", path, receipts)
                while self.log.retry(status) and not self._stop.is_set():
                    status, answer = call(conn, "POST", path, receipts)
                if status != 200:
                    self.log.failed(f"{self.finish} {status} {answer}")
                    return
        except (OSError, http.client.HTTPException, KeyError) as exc:
            self.log.failed(repr(exc))
        finally:
            conn.close()


# ---------------------------------------------------------------- fairness


class Trickle:
    """What one fairness run saw: each trickled message's post time, latency
    and lane (its priority as delivered), the flood's deliveries;
    ``on_batch`` is the consumers' hook."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posted: dict[tuple[str, int], float] = {}
        self.latency: dict[tuple[str, int], float] = {}
        self.lane: dict[tuple[str, int], int] = {}
        self.duplicates = 0
        self.flood_delivered = 0
        self.flood_last = 0.0
        self.errors: list[str] = []
        #: Posts answered 503: a trickled message is not counted (it may be
        #: stored: its delivery is ignored), a flood's batch is posted again.
        self.unavailable = 0

    def on_batch(self, messages: list[dict], received: float) -> None:
        with self.lock:
            for message in messages:
                body = message["body"]
                if body["g"] == "flood":
                    self.flood_delivered += 1
                    self.flood_last = received
                    continue
                key = (body["g"], body["s"])
                if key in self.latency:
                    self.duplicates += 1
                else:
                    self.latency[key] = received - body["t"]
                    self.lane[key] = message.get("priority", 0)

    def all_delivered(self) -> bool:
        with self.lock:
            return all(key in self.latency for key in self.posted)

    def refused(self, status: int, answer: object, what: str) -> bool:
        """Whether a post answered ``status`` failed; a 503 is counted, not failed."""
        with self.lock:
            if status == 503:
                self.unavailable += 1
            elif status != 201:
                self.errors.append(f"{what} {status} {answer}"[:300])
                return True
        return False

    def figures(self, since: float = 0.0, until: float = float("inf")) -> dict:
        with self.lock:
            chosen = [k for k, at in self.posted.items() if since <= at < until]
            values = [self.latency[k] for k in chosen if k in self.latency]
            quiet = sum(1 for k in chosen if self.lane.get(k) == 1)
        return {
            "messages": len(chosen),
            "delivered": len(values),
            "in_quiet_lane": quiet,
            **percentiles(values),
            "max_ms": round(max(values) * 1000, 1) if values else None,
        }


def trickler(port: int, queue: str, group: str, stop: threading.Event, run: Trickle) -> None:
    """Post one message of ``group`` every 1 / :data:`TRICKLE_PER_S` s until ``stop``."""
    conn = connect(port)
    try:
        n = 0
        due = time.perf_counter()
        while not stop.wait(max(0.0, due - time.perf_counter())):
            sent = time.perf_counter()
            body = {**BODY_200, "g": group, "s": n, "t": sent}
            entry = {"body": body, "group": group}
            status, answer = call(conn, "POST", f"/queue/{queue}/batch", {"messages": [entry]})
            if run.refused(status, answer, "trickle"):
                return
            if status == 201:
                with run.lock:
                    run.posted[(group, n)] = sent
            n += 1
            due += 1.0 / TRICKLE_PER_S
    finally:
        conn.close()


def flooder(ports: list[int], queue: str, count: int, run: Trickle) -> float:
    """Post ``count`` messages of group ``flood`` in batches of 100; seconds it took."""
    sizes = [min(100, count - i) for i in range(0, count, 100)]
    lock = threading.Lock()

    def writer(port: int) -> None:
        conn = connect(port)
        try:
            while True:
                with lock:
                    if not sizes or run.errors:
                        return
                    size = sizes.pop()
                body = {**BODY_200, "g": "flood", "s": 0, "t": 0.0}
                entries = [{"body": body, "group": "flood"} for _ in range(size)]
                status = 503
                while status == 503 and not run.errors:
                    batch = {"messages": entries}
                    status, answer = call(conn, "POST", f"/queue/{queue}/batch", batch)
                    if run.refused(status, answer, "flood"):
                        return
        finally:
            conn.close()

    started = time.perf_counter()
    writers = [
        threading.Thread(target=writer, args=(ports[i % len(ports)],)) for i in range(FLOOD_WRITERS)
    ]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    return time.perf_counter() - started

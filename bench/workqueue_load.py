"""The HTTP load of ``bench/workqueue.py``: filling a queue, draining it with
reserve + ack, and timing post -> first delivery, spread over API nodes.

Every function takes the nodes' ports and spreads its connections over them
round-robin; ``VISIBILITY_TIMEOUT`` and ``PARTITIONS`` are the queues' settings.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

from bench.api import BODY_200, request

VISIBILITY_TIMEOUT = 120
PARTITIONS = 8
FILL_BATCH = 100
FILL_WRITERS = 4


def connect(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def call(conn: http.client.HTTPConnection, path: str, payload: dict) -> tuple[int, dict]:
    status, data = request(conn, "POST", path, json.dumps(payload).encode())
    try:
        return status, json.loads(data)
    except ValueError:
        return status, {"raw": data[:200].decode(errors="replace")}


def percentiles(values: list[float]) -> dict:
    flat = sorted(values)
    if not flat:
        return {"p50_ms": None, "p99_ms": None}
    return {
        "p50_ms": round(statistics.median(flat) * 1000, 2),
        "p99_ms": round(flat[max(0, int(len(flat) * 0.99) - 1)] * 1000, 2),
    }


def create_queue(port: int) -> str:
    name = f"wq{uuid.uuid4().hex[:12]}"
    conn = connect(port)
    try:
        queue = {"queue_name": name, "partitions": PARTITIONS}
        status, answer = call(conn, "/queue", {**queue, "visibility_timeout": VISIBILITY_TIMEOUT})
    finally:
        conn.close()
    if status != 201:
        raise RuntimeError(f"creating {name}: {status} {answer}")
    return name


def fill(ports: list[int], queue: str, messages: int, per_post: int = FILL_BATCH) -> float:
    """Post ``messages`` from four writers spread over the nodes, ``per_post``
    per request (1: a plain POST each); return messages/s."""
    posts = [min(per_post, messages - i) for i in range(0, messages, per_post)]
    lock = threading.Lock()
    errors: list[str] = []

    def writer(port: int) -> None:
        conn = connect(port)
        try:
            while True:
                with lock:
                    if not posts or errors:
                        return
                    size = posts.pop()
                if per_post == 1:
                    status, answer = call(conn, f"/queue/{queue}", BODY_200)
                else:
                    body = {"messages": [{"body": BODY_200} for _ in range(size)]}
                    status, answer = call(conn, f"/queue/{queue}/batch", body)
                if status != 201:
                    with lock:
                        errors.append(f"{status} {answer}")
        finally:
            conn.close()

    started = time.perf_counter()
    threads = [
        threading.Thread(target=writer, args=(ports[i % len(ports)],)) for i in range(FILL_WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"filling {queue}: {errors[0]}")
    return messages / (time.perf_counter() - started)


@dataclass
class DrainState:
    """What the consumers of one drain share; ``lock`` guards every counter."""

    target: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: int = 0
    finished_at: float | None = None
    seen: set[str] = field(default_factory=set)
    duplicates: int = 0
    redelivered: int = 0
    ack_failed: int = 0
    errors: list[str] = field(default_factory=list)
    empty_reserves: int = 0
    reserve_latency: list[float] = field(default_factory=list)
    ack_latency: list[float] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.acked >= self.target or bool(self.errors)


def consume(port: int, queue: str, batch: int, state: DrainState, deadline: float) -> None:
    conn = connect(port)
    reserve = {"limit": batch, "wait": 1}
    try:
        while not state.done and time.perf_counter() < deadline:
            started = time.perf_counter()
            status, answer = call(conn, f"/queue/{queue}/reserve", reserve)
            reserved = time.perf_counter()
            if status != 200:
                with state.lock:
                    state.errors.append(f"reserve {status} {answer}")
                return
            messages = answer.get("messages", [])
            if not messages:
                with state.lock:
                    state.empty_reserves += 1
                continue
            receipts = [m["receipt"] for m in messages]
            status, answer = call(conn, f"/queue/{queue}/ack", {"receipts": receipts})
            acked_at = time.perf_counter()
            with state.lock:
                state.reserve_latency.append(reserved - started)
                state.ack_latency.append(acked_at - reserved)
                if status != 200:
                    state.errors.append(f"ack {status} {answer}")
                    return
                for message in messages:
                    if message["message_id"] in state.seen:
                        state.duplicates += 1
                    state.seen.add(message["message_id"])
                    if message.get("attempts", 1) > 1:
                        state.redelivered += 1
                state.ack_failed += len(answer.get("failed") or {})
                state.acked += answer.get("acked", 0)
                if state.acked >= state.target and state.finished_at is None:
                    state.finished_at = acked_at
    except (OSError, http.client.HTTPException, KeyError) as exc:
        with state.lock:
            state.errors.append(repr(exc))
    finally:
        conn.close()


def bench_latency(ports: list[int], count: int, consumers: int, timeout: float) -> dict:
    """Post one message at a time (to each node in turn); time until a
    long-polling consumer (on any node) holds it."""
    queue = create_queue(ports[0])
    delivered: dict[int, float] = {}
    arrived = threading.Condition()
    stop = threading.Event()
    errors: list[str] = []

    def consumer(port: int) -> None:
        conn = connect(port)
        try:
            while not stop.is_set():
                status, answer = call(conn, f"/queue/{queue}/reserve", {"limit": 1, "wait": 5})
                now = time.perf_counter()
                if status != 200:
                    raise RuntimeError(f"reserve {status} {answer}")
                messages = answer.get("messages", [])
                with arrived:
                    for message in messages:
                        delivered.setdefault(message["body"]["seq"], now)
                    arrived.notify_all()
                if messages:
                    receipts = [m["receipt"] for m in messages]
                    status, answer = call(conn, f"/queue/{queue}/ack", {"receipts": receipts})
                    if status != 200:
                        raise RuntimeError(f"ack {status} {answer}")
        except (RuntimeError, OSError, http.client.HTTPException, KeyError) as exc:
            with arrived:
                errors.append(str(exc))
                arrived.notify_all()
        finally:
            conn.close()

    threads = [
        threading.Thread(target=consumer, args=(ports[i % len(ports)],)) for i in range(consumers)
    ]
    for thread in threads:
        thread.start()
    latencies, post_latencies, missed = [], [], 0
    producers = [connect(port) for port in ports]
    try:
        for seq in range(count):
            body = json.dumps({**BODY_200, "seq": seq}).encode()
            started = time.perf_counter()
            conn = producers[seq % len(producers)]
            status, _ = request(conn, "POST", f"/queue/{queue}", body)
            post_latencies.append(time.perf_counter() - started)
            if status != 201:
                errors.append(f"post {status}")
                break
            with arrived:
                if not arrived.wait_for(
                    lambda seq=seq: seq in delivered or bool(errors), timeout=timeout
                ):
                    missed += 1
                    continue
            if errors:
                break
            latencies.append(delivered[seq] - started)
    finally:
        for conn in producers:
            conn.close()
        stop.set()
        for thread in threads:
            thread.join()
    return {
        "consumers": consumers,
        "messages": count,
        "delivered": len(latencies),
        "missed": missed,
        "errors": errors[:5],
        **percentiles(latencies),
        "post": percentiles(post_latencies),
    }

"""Work-queue benchmark: reserve + ack end to end against a real Queuey server.

    python bench/workqueue.py [--backend sqlite|cassandra|both] [--messages 20000]
                              [--batches 10,100] [--consumers 4] [--latency-messages 300]

For each backend one server process (pserve + waitress with the settings of
``bench/api.py``: Cassandra is the harness node, keyspace ``queuey_bench``, read
delay 2 s) and load from this process over keep-alive connections; every
measurement uses a fresh 8-partition queue whose visibility timeout (120 s) is far
longer than a batch takes, and the ``default`` subscription:

* ``reserve_ack``: a queue filled with ``--messages`` ~200-byte messages is
  drained by ``--consumers`` threads, each looping ``reserve`` (``limit`` = the
  batch size, ``wait`` 1 s) then ``ack`` of every receipt it got, once per batch
  size, after the fill has passed the read delay. Messages/s from the first
  reserve to the last successful ack, with the duplicates and redeliveries seen
  (0 expected) and the messages not delivered when ``--timeout`` ran out;
* ``post_to_delivery``: ``--consumers`` threads long-poll ``reserve``
  (``limit`` 1, ``wait`` 5 s) while one producer posts one message at a time and
  waits for its delivery before the next: p50/p99 from just before the POST is
  sent to the moment a consumer holds the message.

Prints one JSON object on stdout; progress on stderr. Server and load share the
machine's cores. Not a test: run it on a quiet machine and compare medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200, Server, request, storage_settings  # noqa: E402

VISIBILITY_TIMEOUT = 120
PARTITIONS = 8
FILL_BATCH = 100
FILL_WRITERS = 4


def log(message: str) -> None:
    print(f"[workqueue] {message}", file=sys.stderr, flush=True)


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
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        status, answer = call(
            conn,
            "/queue",
            {
                "queue_name": name,
                "partitions": PARTITIONS,
                "visibility_timeout": VISIBILITY_TIMEOUT,
            },
        )
    finally:
        conn.close()
    if status != 201:
        raise RuntimeError(f"creating {name}: {status} {answer}")
    return name


def fill(port: int, queue: str, messages: int) -> float:
    """Post ``messages`` in batches of 100 from four writers; return messages/s."""
    batches = [min(FILL_BATCH, messages - i) for i in range(0, messages, FILL_BATCH)]
    lock = threading.Lock()
    errors: list[str] = []

    def writer() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while True:
                with lock:
                    if not batches or errors:
                        return
                    size = batches.pop()
                body = {"messages": [{"body": BODY_200} for _ in range(size)]}
                status, answer = call(conn, f"/queue/{queue}/batch", body)
                if status != 201:
                    with lock:
                        errors.append(f"{status} {answer}")
        finally:
            conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=writer) for _ in range(FILL_WRITERS)]
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
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
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


def bench_reserve_ack(
    port: int, messages: int, batch: int, consumers: int, settle: float, timeout: float
) -> dict:
    queue = create_queue(port)
    log(f"batch {batch}: filling {queue} with {messages} messages")
    fill_rate = fill(port, queue, messages)
    time.sleep(settle)  # let the newest writes pass the configured read delay
    log(f"batch {batch}: draining with {consumers} consumers")
    state = DrainState(target=messages)
    started = time.perf_counter()
    deadline = started + timeout
    threads = [
        threading.Thread(target=consume, args=(port, queue, batch, state, deadline))
        for _ in range(consumers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = state.finished_at or time.perf_counter()
    elapsed = finished - started
    return {
        "consumers": consumers,
        "batch": batch,
        "messages": messages,
        "acked": state.acked,
        "delivered": len(state.seen),
        "duplicates": state.duplicates,
        "redelivered": state.redelivered,
        "ack_failed": state.ack_failed,
        "not_delivered": messages - len(state.seen),
        "timed_out": state.finished_at is None and not state.errors,
        "empty_reserves": state.empty_reserves,
        "errors": state.errors[:5],
        "seconds": round(elapsed, 2),
        "per_second": round(state.acked / elapsed, 1),
        "fill_per_second": round(fill_rate, 1),
        "reserve": percentiles(state.reserve_latency),
        "ack": percentiles(state.ack_latency),
    }


def bench_latency(port: int, count: int, consumers: int, timeout: float) -> dict:
    """Post one message at a time; time until a long-polling consumer holds it."""
    queue = create_queue(port)
    delivered: dict[int, float] = {}
    arrived = threading.Condition()
    stop = threading.Event()
    errors: list[str] = []

    def consumer() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
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

    threads = [threading.Thread(target=consumer) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    latencies, post_latencies, missed = [], [], 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for seq in range(count):
            body = json.dumps({**BODY_200, "seq": seq}).encode()
            started = time.perf_counter()
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


def read_delay(backend: str, workdir: Path) -> float:
    """The read delay ``bench/api.py`` configures for ``backend`` (one definition)."""
    found = re.search(r"queuey\.read_delay = ([\d.]+)", storage_settings(backend, workdir))
    return float(found.group(1)) if found else 0.0


def bench_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict:
    settle = read_delay(backend, workdir)
    server = Server(backend, workdir)
    try:
        results: dict = {"read_delay_s": settle}
        for batch in args.batches:
            results[f"reserve_ack_batch_{batch}"] = bench_reserve_ack(
                server.port, args.messages, batch, args.consumers, settle + 0.5, args.timeout
            )
        log(f"post to delivery, {args.latency_messages} messages")
        results["post_to_delivery"] = bench_latency(
            server.port, args.latency_messages, args.consumers, timeout=settle + 30
        )
        results["server_peak_rss_mb"] = round(server.peak_rss / 2**20, 1)
        return results
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--batches", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100]
    )
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--latency-messages", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=600.0, help="per drain, seconds")
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    out = {
        "benchmark": "workqueue",
        "cpus": os.cpu_count(),
        "cores": "server (one waitress process, 8 threads) and load generator share the cores",
        "message_bytes": len(json.dumps(BODY_200)),
        "visibility_timeout_s": VISIBILITY_TIMEOUT,
        "partitions": PARTITIONS,
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="queuey-workqueue-") as tmp:
        for backend in backends:
            out["results"][backend] = bench_backend(backend, args, Path(tmp))
    print(json.dumps(out, indent=2))
    return 1 if any(failed(figures) for figures in out["results"].values()) else 0


def failed(figures: dict) -> bool:
    """Whether any measurement of one backend saw errors or did not finish in time."""
    return any(
        isinstance(f, dict) and (f.get("errors") or f.get("timed_out") or f.get("missed"))
        for f in figures.values()
    )


if __name__ == "__main__":
    sys.exit(main())

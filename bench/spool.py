"""The producer spool's cost: posts through :class:`queuey.client.Spool` beside direct posts.

    python bench/spool.py [--threads 1,8] [--duration 3] [--runs 3]

Starts one Queuey server (``pserve``, granian with 2 workers, SQLite: the
server as shipped) and, for each thread count, runs ``--runs`` times, each
``--duration`` seconds:

* ``direct``: every thread loops ``QueueyClient.post`` of one ~200-byte
  message (one HTTP request, acknowledged when the service stored it);
* ``spool``: every thread loops ``Spool.post`` of the same message (accepted
  once fsynced to the local spool file), while the spool's sender forwards
  them in batches; ``drained_per_s`` counts until the last one was
  acknowledged by the service.

Reports messages per second and post latency (p50/p99, milliseconds), the
median of the runs, with messages per fsync for the spool (group commit).
The spool file lives in the system's temporary directory. Prints one JSON
object. Not a test: compare medians on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import APP, BODY_200, KEY, Server  # noqa: E402
from queuey.client import QueueyClient, Spool  # noqa: E402
from queuey.client import spool as spool_module  # noqa: E402


def log(message: str) -> None:
    print(f"[spool] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load(post, threads: int, duration: float) -> tuple[int, list[float], float]:
    """``threads`` threads calling ``post(n)`` for ``duration`` seconds: the
    count, every latency (seconds) and the elapsed time."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = time.perf_counter() + duration

    def worker(i: int) -> None:
        mine = latencies[i]
        n = 0
        while time.perf_counter() < stop:
            began = time.perf_counter()
            post(i * 10_000_000 + n)
            mine.append(time.perf_counter() - began)
            n += 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    flat = [x for part in latencies for x in part]
    return len(flat), flat, elapsed


def figures(count: int, latencies: list[float], elapsed: float) -> dict:
    return {
        "messages": count,
        "per_second": round(count / elapsed),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
    }


def direct_run(server: Server, threads: int, duration: float) -> dict:
    clients = [QueueyClient(server.url, APP, KEY) for _ in range(threads)]
    by_thread = {}

    def post(n: int) -> None:
        i = n // 10_000_000
        client = by_thread.setdefault(i, clients[i])
        client.post("direct", {**BODY_200, "n": n})

    out = figures(*load(post, threads, duration))
    for client in clients:
        client.close()
    return out


class SyncCounter:
    def __init__(self) -> None:
        self.count = 0
        self.real = os.fdatasync

    def __call__(self, fd: int) -> None:
        self.count += 1
        self.real(fd)


def spool_run(server: Server, threads: int, duration: float, workdir: Path) -> dict:
    syncs = SyncCounter()
    spool_module.os.fdatasync = syncs  # type: ignore[attr-defined]
    client = QueueyClient(server.url, APP, KEY)
    path = workdir / f"bench-{threads}-{time.monotonic_ns()}.spool"
    spool = Spool(client, path)
    try:
        started = time.perf_counter()
        out = figures(
            *load(lambda n: spool.post("spooled", {**BODY_200, "n": n}), threads, duration)
        )
        if not spool.flush(300):
            raise RuntimeError("the spool did not drain within 300 s")
        drained = time.perf_counter() - started
    finally:
        spool.close()
        client.close()
        spool_module.os.fdatasync = syncs.real  # type: ignore[attr-defined]
    out["drained_per_s"] = round(out["messages"] / drained)
    out["messages_per_fsync"] = round(out["messages"] / max(1, syncs.count), 1)
    return out


def median_of(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["per_second_runs"] = [r["per_second"] for r in runs]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    out: dict = {
        "benchmark": "spool",
        "backend": "sqlite",
        "server": "granian, 2 workers",
        "cpus": os.cpu_count(),
        "body_bytes": len(json.dumps(BODY_200)),
    }
    results: dict = {"direct": {}, "spool": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server = Server("sqlite", workdir, log_level="WARNING")
        try:
            with QueueyClient(server.url, APP, KEY) as client:
                client.create_queue("direct", partitions=4)
                client.create_queue("spooled", partitions=4)
            for threads in counts:
                for kind in ("direct", "spool"):
                    runs = []
                    for i in range(args.runs):
                        log(f"{kind}, {threads} thread(s), run {i + 1}/{args.runs}")
                        if kind == "direct":
                            runs.append(direct_run(server, threads, args.duration))
                        else:
                            runs.append(spool_run(server, threads, args.duration, workdir))
                    results[kind][f"threads_{threads}"] = median_of(runs)
        finally:
            server.stop()
    out["results"] = results
    out["how"] = (
        f"median of {args.runs} runs of {args.duration:g} s per figure; latency is one "
        "post call as the producer sees it (direct: the HTTP round trip and the store's "
        "commit; spool: the local append and its shared fsync)"
    )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

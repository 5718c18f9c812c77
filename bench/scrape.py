"""What a Prometheus scrape costs on a node watching many queues.

    python bench/scrape.py [--backend sqlite|cassandra|both] [--queues 1000]
                           [--messages 10] [--subscriptions 5] [--scrapes 50]
                           [--paced 10]

For each backend: one ``pserve`` process (the settings of ``bench/api.py``,
default ``queuey.stats.*``), ``--queues`` queues of 2 partitions holding
``--messages`` messages each, read by ``--subscriptions`` work-queue
subscriptions each (one reserve of one message names each into being, so
each has messages available and one in flight). The node's refresher runs
from its start; the benchmark waits, from the end of the fill, until every
queue and every subscription has its gauges (how long the refresher took to
measure them all), then times scrapes of ``/metrics`` two ways:

- ``back_to_back``: ``--scrapes`` one after another; the median and 95th
  percentile latency and the server CPU per scrape (all its processes, and
  its worker processes alone: the refresher process measures queues
  meanwhile). Most of these find the figures they were written from last
  time (a scrape keeps each queue's lines until it is measured again).
- ``after_each_pass``: ``--paced`` scrapes, each as soon as the refresher
  has published a new pass (what a Prometheus scraping every 15 s or more
  meets: the workers read the new figures and write again the queues
  measured since). CPU is counted over each scrape's own window, so the
  node's background work between scrapes is left out.

It also reports the exposition's size and the CPU the refresher costs the
idle node per minute. Prints one JSON object on stdout. Not a test: compare
medians.
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
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import Server, request  # noqa: E402

SERIES = "queuey_queue_depth{"
SUBSCRIPTION_SERIES = "queuey_subscription_available{"


def log(message: str) -> None:
    print(f"[scrape] {message}", file=sys.stderr, flush=True)


def cpu(server: Server) -> float:
    """CPU seconds of the server's processes (its workers and refresher too)."""
    return server.cpu()


def worker_cpu(server: Server) -> float:
    """CPU seconds of the server's worker processes, which answer the scrapes
    (not its refresher, which measures queues meanwhile)."""
    total = 0.0
    for child in server.ps.children(recursive=True):
        try:
            if child.environ().get("QUEUEY_ROLE") == "worker":
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def on_cpu(server: Server, workers_only: bool = False) -> float:
    """CPU seconds of the server's processes (or its workers), to the
    nanosecond: each thread's time on a CPU (``/proc/<pid>/task/*/schedstat``),
    where ``cpu_times`` counts 10 ms ticks, too coarse for one scrape."""
    total = 0
    for process in [server.ps, *server.ps.children(recursive=True)]:
        try:
            if workers_only and process.environ().get("QUEUEY_ROLE") != "worker":
                continue
            tasks = os.listdir(f"/proc/{process.pid}/task")
        except (psutil.Error, OSError):
            continue
        for task in tasks:
            try:
                with open(f"/proc/{process.pid}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def snapshot_path(server: Server) -> Path | None:
    """The figures' snapshot the server's refresher publishes each pass."""
    for child in server.ps.children(recursive=True):
        try:
            shared = child.environ().get("QUEUEY_SHARED_DIR")
        except psutil.Error:
            continue
        if shared:
            return Path(shared) / "overview.pickle"
    return None


def published(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_mtime_ns, found.st_ino


def paced(server: Server, conn: http.client.HTTPConnection, scrapes: int) -> dict:
    """``scrapes`` scrapes, each once a new pass is published, CPU counted
    over each scrape alone (all processes, and the workers)."""
    path = snapshot_path(server)
    if path is None:
        raise RuntimeError("no snapshot: is the server granian with its workers?")
    latencies, server_ms, worker_ms = [], [], []
    last = published(path)
    for _ in range(scrapes):
        deadline = time.monotonic() + 120
        while published(path) == last:
            if time.monotonic() > deadline:
                raise TimeoutError("the refresher published no pass in 2 min")
            time.sleep(0.05)
        last = published(path)
        time.sleep(0.2)  # past the rename: the pass is whole
        before, workers_before = on_cpu(server), on_cpu(server, workers_only=True)
        elapsed, _ = scrape(conn)
        latencies.append(elapsed)
        server_ms.append((on_cpu(server) - before) * 1000)
        worker_ms.append((on_cpu(server, workers_only=True) - workers_before) * 1000)
    return {
        "scrapes": scrapes,
        "scrape_median_ms": round(statistics.median(latencies) * 1000, 2),
        "server_cpu_ms_per_scrape": round(statistics.median(server_ms), 2),
        "worker_cpu_ms_per_scrape": round(statistics.median(worker_ms), 2),
        "worker_cpu_ms_max": round(max(worker_ms), 2),
    }


def scrape(conn: http.client.HTTPConnection) -> tuple[float, bytes]:
    started = time.perf_counter()
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
    except (http.client.RemoteDisconnected, ConnectionError):
        # The server closed the idle keep-alive connection (after a pause): a new one.
        conn.close()
        started = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"/metrics answered {response.status}")
    return time.perf_counter() - started, body


#: The Cassandra backend's requests by kind, summed over a node's processes.
REQUESTS = re.compile(r'^queuey_cassandra_requests_total\{kind="(\w+)"\} (\S+)$', re.MULTILINE)


def request_counts(port: int) -> dict[str, float]:
    """The CQL requests a node has sent so far, by kind (``{}`` on SQLite)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        _, body = scrape(conn)
    finally:
        conn.close()
    return {kind: float(value) for kind, value in REQUESTS.findall(body.decode())}


def fill(port: int, queues: int, messages: int, subscriptions: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    run = uuid.uuid4().hex[:6]  # the Cassandra keyspace outlives a run

    def call(path: str, body: str, *expected: int) -> None:
        # A 503 (the store busy under the fill: Cassandra shares the 2 cores)
        # is worth another try; a dedup id makes a repeated batch store once.
        for _ in range(10):
            status, data = request(conn, "POST", path, body)
            if status != 503:
                break
            time.sleep(0.5)
        if status not in expected:
            raise RuntimeError(f"{path}: {status} {data[:200]!r}")

    for q in range(queues):
        name = f"scrape-{run}-{q:05d}"
        # 409: a create repeated after a 503 had landed.
        call("/queue", json.dumps({"queue_name": name, "partitions": 2}), 201, 409)
        if messages:
            entries = [{"body": {"n": n}, "dedup_id": f"{name}-{n}"} for n in range(messages)]
            call(f"/queue/{name}/batch", json.dumps({"messages": entries}), 201)
        for s in range(subscriptions):
            call(f"/queue/{name}/reserve", json.dumps({"subscription": f"sub-{s}"}), 200)
    conn.close()


def run_backend(backend: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="queuey-scrape-") as tmp:
        server = Server(backend, Path(tmp))
        try:
            started = time.monotonic()
            fill(server.port, args.queues, args.messages, args.subscriptions)
            log(f"{backend}: {args.queues} queues filled in {time.monotonic() - started:.1f}s")
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            started = time.monotonic()
            while True:
                _, body = scrape(conn)
                subscriptions = body.count(SUBSCRIPTION_SERIES.encode())
                if (
                    body.count(SERIES.encode()) >= args.queues
                    and subscriptions >= args.queues * args.subscriptions
                ):
                    break
                if time.monotonic() - started > 900:
                    raise TimeoutError("the refresher did not measure every queue in 15 min")
                time.sleep(0.5)
            measured_all = time.monotonic() - started
            log(f"{backend}: every queue measured {measured_all:.1f}s after the fill")

            # The refresher's own cost on an idle node: CPU over a minute, no requests.
            idle_cpu_before, idle_started = cpu(server), time.monotonic()
            time.sleep(args.idle)
            idle_cpu = (cpu(server) - idle_cpu_before) / (time.monotonic() - idle_started) * 60

            latencies = []
            cpu_before, workers_before = cpu(server), worker_cpu(server)
            for _ in range(args.scrapes):
                elapsed, body = scrape(conn)
                latencies.append(elapsed)
            cpu_per_scrape = (cpu(server) - cpu_before) / args.scrapes
            workers_per_scrape = (worker_cpu(server) - workers_before) / args.scrapes
            after_each_pass = paced(server, conn, args.paced) if args.paced else None
            conn.close()
            latencies.sort()
            return {
                "queues": args.queues,
                "messages_per_queue": args.messages,
                "every_queue_measured_seconds": round(measured_all, 1),
                "back_to_back": {
                    "scrapes": args.scrapes,
                    "scrape_median_ms": round(statistics.median(latencies) * 1000, 2),
                    "scrape_p95_ms": round(latencies[int(len(latencies) * 0.95) - 1] * 1000, 2),
                    "server_cpu_ms_per_scrape": round(cpu_per_scrape * 1000, 2),
                    "worker_cpu_ms_per_scrape": round(workers_per_scrape * 1000, 2),
                },
                "after_each_pass": after_each_pass,
                "exposition_bytes": len(body),
                "queue_series": body.count(SERIES.encode()),
                "subscriptions_per_queue": args.subscriptions,
                "subscription_series": body.count(SUBSCRIPTION_SERIES.encode()),
                "refresher_cpu_seconds_per_minute_idle": round(idle_cpu, 2),
            }
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "cassandra", "both"], default="both")
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--subscriptions", type=int, default=5)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument(
        "--paced", type=int, default=10, help="scrapes, each after a new refresher pass"
    )
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU sampling")
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    results = {}
    for backend in backends:
        results[backend] = run_backend(backend, args)
        log(f"{backend}: {json.dumps(results[backend])}")
    print(json.dumps({"benchmark": "scrape", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""HTTP API benchmark: one server process, load from this process over keep-alive.

    python bench/api.py [--backend sqlite|cassandra|both] [--duration 10]

Prints one JSON object: for each backend, single-message POST req/s with p50/p99
latency, batch POST (100 x ~200-byte messages) messages/s, GET (limit=1000)
messages/s, each with its concurrency, and the server's peak RSS. Not a test:
run it on a quiet machine and compare medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port, wait_http  # noqa: E402

APP, KEY = "bench", "bench-key"
#: The bench application's SigV4 secret (bench/sqs.py).
SQS_SECRET = "bench-sqs-secret"
HEADERS = {"X-Application-Name": APP, "ApplicationKey": KEY, "Content-Type": "application/json"}
BODY_200 = {
    "signature": "js::RunScript | EnterBaseline",
    "product": "Firefox",
    "version": "146.0",
    "build": "20261121000000",
    "uuid": "x" * 36,
    "platform": "Windows NT 10.0",
}

INI = """
[app:main]
use = egg:queuey
queuey.applications = {apps}
{storage}
[server:main]
use = egg:waitress#main
listen = 127.0.0.1:{port}
threads = {threads}
connection_limit = 200
"""


def storage_settings(backend: str, workdir: Path) -> str:
    if backend == "sqlite":
        return (
            f"queuey.storage.backend = queuey.storage.sqlite\n"
            f"queuey.sqlite.path = {workdir}/bench.sqlite3\nqueuey.read_delay = 0\n"
        )
    from queuey.harness import cassandra

    cluster = cassandra.ensure_running(1)
    return (
        "queuey.storage.backend = queuey.storage.cassandra\n"
        f"queuey.cassandra.contact_points = {','.join(cluster.contact_points)}\n"
        f"queuey.cassandra.port = {cluster.port}\n"
        "queuey.cassandra.keyspace = queuey_bench\n"
        "queuey.cassandra.create_schema = true\n"
        "queuey.cassandra.request_timeout = 2\n"
        "queuey.read_delay = 2\n"
    )


class Server:
    def __init__(self, backend: str, workdir: Path, threads: int = 8) -> None:
        self.port = free_port()
        apps = workdir / "apps.ini"
        apps.write_text(
            f"[application:{APP}]\nkeys = plain:{KEY}\nallow = 127.0.0.0/8\n"
            f"sqs_secret = {SQS_SECRET}\n"
        )
        ini = workdir / f"{backend}.ini"
        ini.write_text(
            INI.format(
                apps=apps,
                storage=storage_settings(backend, workdir),
                port=self.port,
                threads=threads,
            )
        )
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "pserve"), str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / f"{backend}.log", "wb"),
        )
        wait_http(f"http://127.0.0.1:{self.port}/__lbheartbeat__", timeout=120)
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_rss = max(self.peak_rss, self.ps.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def request(conn: http.client.HTTPConnection, method: str, path: str, body=None):
    conn.request(method, path, body=body, headers=HEADERS)
    response = conn.getresponse()
    data = response.read()
    return response.status, data


def drive(port: int, concurrency: int, duration: float, make_request) -> dict:
    """Run ``make_request(conn, worker, n)`` in a loop on ``concurrency`` keep-alive connections."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    units = [0] * concurrency
    failures = [0] * concurrency
    deadline = time.perf_counter() + duration

    def worker(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            ok, count = make_request(conn, index, n)
            latencies[index].append(time.perf_counter() - start)
            if ok:
                units[index] += count
            else:
                failures[index] += 1
            n += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    flat = sorted(x for per in latencies for x in per)
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "requests": len(flat),
        "failures": sum(failures),
        "units": sum(units),
        "per_second": round(sum(units) / elapsed, 1),
        "p50_ms": round(statistics.median(flat) * 1000, 2) if flat else None,
        "p99_ms": round(flat[int(len(flat) * 0.99) - 1] * 1000, 2) if flat else None,
    }


def bench_backend(backend: str, duration: float, workdir: Path) -> dict:
    server = Server(backend, workdir)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        queue = f"bench{int(time.time())}"
        status, _ = request(
            conn, "POST", "/queue", json.dumps({"queue_name": queue, "partitions": 8})
        )
        assert status == 201, status
        single_body = json.dumps(BODY_200).encode()

        def single(c, worker, n):
            status, _ = request(c, "POST", f"/queue/{queue}", single_body)
            return status == 201, 1

        batch_body = json.dumps({"messages": [{"body": BODY_200} for _ in range(100)]}).encode()

        def batch(c, worker, n):
            status, _ = request(c, "POST", f"/queue/{queue}/batch", batch_body)
            return status == 201, 100

        results = {
            "single_post": drive(server.port, 8, duration, single),
            "batch_post": drive(server.port, 4, duration, batch),
        }
        delay = 2.5 if backend == "cassandra" else 0
        time.sleep(delay)  # let the newest writes pass the configured read delay

        def get(c, worker, n):
            status, data = request(c, "GET", f"/queue/{queue}?limit=1000&partitions={n % 8 + 1}")
            return status == 200, data.count(b'"message_id"')

        results["get_1000"] = drive(server.port, 4, duration, get)
        results["single_post"]["unit"] = "requests"
        results["batch_post"]["unit"] = "messages"
        results["get_1000"]["unit"] = "messages"
        results["server_peak_rss_mb"] = round(server.peak_rss / 2**20, 1)
        return results
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    out = {"benchmark": "api", "cpus": os.cpu_count(), "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            out["results"][backend] = bench_backend(backend, args.duration, Path(tmp))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``queuey export`` / ``queuey import`` benchmark on the SQLite backend.

    python bench/export.py [--messages 1000000] [--no-import]

Starts one Queuey server process (pserve + waitress, as ``bench/api.py``
does) on a loopback port, fills a queue of 8 partitions through the HTTP API
(batch POSTs of 1000 ~200-byte messages on 4 keep-alive connections: the
storage API would be faster, but this is the path data takes in production),
then runs ``queuey export`` in a subprocess, exactly as an operator would, and
times it. The export's peak RSS is ``ru_maxrss`` of that child from
``os.wait4``; this process stays small (it never imports Queuey) so that
figure is the export's own and not a peak carried across ``exec`` from a large
parent. Then the same for ``queuey import`` of the file into a second queue,
unless ``--no-import``.

Prints one JSON object. Not a test: compare medians on a quiet machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import APP, BODY_200, HEADERS, KEY, Server  # noqa: E402

PARTITIONS = 8
BATCH = 1000
CONNECTIONS = 4


def fill(port: int, queue: str, count: int) -> dict:
    """``count`` messages through batch POSTs; how long it took."""
    batches = list(range(0, count, BATCH))
    lock = threading.Lock()
    failures: list[str] = []

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if not batches or failures:
                    break
                start = batches.pop()
            size = min(BATCH, count - start)
            body = json.dumps(
                {"messages": [{"body": {**BODY_200, "n": start + i}} for i in range(size)]}
            )
            conn.request("POST", f"/queue/{queue}/batch", body=body, headers=HEADERS)
            response = conn.getresponse()
            data = response.read()
            if response.status != 201:
                failures.append(f"HTTP {response.status}: {data[:200]!r}")
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"filling {queue} failed: {failures[0]}")
    seconds = time.perf_counter() - started
    return {
        "method": f"HTTP batch POST, {BATCH} messages each, {CONNECTIONS} connections",
        "seconds": round(seconds, 1),
        "messages_per_second": round(count / seconds),
    }


def create(port: int, queue: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"queue_name": queue, "partitions": PARTITIONS})
    conn.request("POST", "/queue", body=body, headers=HEADERS)
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status != 201:
        raise RuntimeError(f"creating {queue}: HTTP {response.status}")


def run_cli(argv: list[str], port: int, count: int) -> dict:
    """Run ``queuey ARGV`` as a child process; its time and peak RSS."""
    queuey = Path(sys.executable).parent / "queuey"
    env = {
        **os.environ,
        "QUEUEY_URL": f"http://127.0.0.1:{port}",
        "QUEUEY_APPLICATION": APP,
        "QUEUEY_KEY": KEY,
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(queuey), *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"queuey {' '.join(argv)} failed: {stderr[-2000:]}")
    return {
        "command": "queuey " + " ".join(argv),
        "seconds": round(seconds, 1),
        "messages_per_second": round(count / seconds),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--no-import", action="store_true")
    args = parser.parse_args()
    count = args.messages
    out: dict = {"benchmark": "export", "backend": "sqlite", "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server = Server("sqlite", workdir)
        try:
            create(server.port, "source")
            results: dict = {"messages": count, "fill": fill(server.port, "source", count)}
            exported = workdir / "source.jsonl"
            results["export"] = run_cli(
                ["export", "source", "-o", str(exported), "-q"], server.port, count
            )
            with exported.open("rb") as f:
                lines = sum(1 for _ in f)
            if lines != count:
                raise RuntimeError(f"the export has {lines} lines, not {count}")
            results["export"]["file_mib"] = round(exported.stat().st_size / 2**20, 1)
            if not args.no_import:
                create(server.port, "copy")
                results["import"] = run_cli(
                    ["import", "copy", "-i", str(exported), "-q"], server.port, count
                )
            results["server_peak_rss_mib"] = round(server.peak_rss / 2**20, 1)
            results["bench_process_peak_rss_mib"] = round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
            )
        finally:
            server.stop()
    out["results"] = results
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

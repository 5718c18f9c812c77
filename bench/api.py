"""HTTP API benchmark: the production server under a native load generator (wrk).

    python bench/api.py [--backend sqlite|cassandra|both] [--duration 8] [--runs 3]
                        [--server granian|waitress] [--workers 2]
                        [--only heartbeat,single_post,batch_post,get_1000,reserve_ack]

For each backend, one server started by ``pserve`` from an ini like the shipped
ones (granian, ``--workers`` processes of 16 threads; or waitress, one process of
8 threads), and ``wrk`` (C, from Debian: installed when missing, as root) as the
load. Every scenario first runs ``--warmup`` seconds uncounted, then ``--runs``
times for ``--duration`` seconds, and the median run is reported, with the rate
of every run:

* ``heartbeat``: ``GET /__lbheartbeat__``, 8 connections: the server and
  framework alone;
* ``single_post``: one ~200-byte message per ``POST``, 8 connections, each
  waiting for its answer (acknowledged = durable: SQLite commits with
  ``synchronous=FULL``; the harness Cassandra node syncs its commit log before
  it answers);
* ``batch_post``: 100 messages per ``POST /batch``, 4 connections;
* ``get_1000``: ``GET ?limit=1000`` of one partition at a time, 4 connections,
  after the posts have passed the read delay;
* ``reserve_ack``: 4 connections, each a worker looping ``reserve`` (limit 100)
  then ``ack`` of every receipt, draining what the posts left (after
  ``--duration`` seconds of uncounted batch posts when ``batch_post`` is not
  among the scenarios; never warmed up, which would drain the backlog).

The two cores are shared: the server's processes, wrk's threads (2, or one per
connection for ``reserve_ack``) and, for Cassandra, its JVM. The CPU seconds each
used are reported per scenario (``server_cpu_s``, ``store_cpu_s``: Cassandra's
JVM, ``wrk_cpu_s``) and per message by process (``cpu_us_per_message``: api,
store, load), with the server's peak resident memory (all its processes).
Prints one JSON object. Not a test: run it on a quiet machine and compare
medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Server and its settings live in bench/servers.py; the other benchmarks import them here too.
from bench.servers import APP, KEY, SERVERS, CpuMeter, Server, store_processes  # noqa: E402
from bench.servers import INI as INI  # noqa: E402
from bench.servers import SQS_SECRET as SQS_SECRET  # noqa: E402
from bench.servers import tree_cpu as tree_cpu  # noqa: E402

HEADERS = {"X-Application-Name": APP, "ApplicationKey": KEY, "Content-Type": "application/json"}
BODY_200 = {
    "signature": "js::RunScript | EnterBaseline",
    "product": "Firefox",
    "version": "146.0",
    "build": "20261121000000",
    "uuid": "x" * 36,
    "platform": "Windows NT 10.0",
}
WRK_DIR = ROOT / "bench" / "wrk"
PARTITIONS = 8


def log(message: str) -> None:
    print(f"[api] {message}", file=sys.stderr, flush=True)


def request(conn: http.client.HTTPConnection, method: str, path: str, body=None):
    conn.request(method, path, body=body, headers=HEADERS)
    response = conn.getresponse()
    data = response.read()
    return response.status, data


def ensure_wrk() -> str:
    """The path of ``wrk``; installs Debian's package when it is missing (as root)."""
    found = shutil.which("wrk")
    if found:
        return found
    log("wrk missing: installing it from Debian")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get"] if os.geteuid() == 0 else ["sudo", "-n", "-E", "apt-get"]
    subprocess.run([*apt, "update", "-q"], check=True, env=env, stdout=sys.stderr)
    subprocess.run([*apt, "install", "-y", "-q", "wrk"], check=True, env=env, stdout=sys.stderr)
    found = shutil.which("wrk")
    if not found:
        raise RuntimeError("wrk is not on PATH after installing it")
    return found


def wrk(
    server: Server,
    script: str,
    path: str,
    connections: int,
    threads: int,
    duration: float,
    env: dict[str, str],
) -> dict:
    """One wrk run; the figures its script's ``done`` printed, with CPU and memory."""
    argv = [
        ensure_wrk(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{round(duration)}s",
        "--timeout",
        "10s",
        "-s",
        str(WRK_DIR / script),
        f"http://127.0.0.1:{server.port}{path}",
    ]
    environ = {**os.environ, "QUEUEY_WRK_DIR": str(WRK_DIR), **env}
    meter = CpuMeter([server], store_processes(server.backend))  # its "load" is not wrk
    cpu_before = meter.read()
    server.peak_rss = server.rss()
    proc = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ps = psutil.Process(proc.pid)
    wrk_cpu = 0.0
    while proc.poll() is None:
        try:
            times = ps.cpu_times()
            wrk_cpu = times.user + times.system
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {(out + err).decode()[-1000:]}")
    lines = [line for line in out.decode().splitlines() if line.startswith('{"wrk"')]
    if not lines:
        raise RuntimeError(f"wrk printed no results: {out.decode()[-1000:]}")
    figures = json.loads(lines[-1])["wrk"]
    seconds = figures["duration_us"] / 1e6
    cpu_after = meter.read()
    server_cpu = cpu_after["api"] - cpu_before["api"]
    store_cpu = cpu_after["store"] - cpu_before["store"]
    units = max(1, figures["units"])
    return {
        "connections": connections,
        "wrk_threads": threads,
        "seconds": round(seconds, 2),
        "requests": figures["requests"],
        "units": figures["units"],
        "per_second": round(figures["units"] / seconds, 1),
        "requests_per_second": round(figures["requests"] / seconds, 1),
        "p50_ms": round(figures["p50_us"] / 1000, 2),
        "p90_ms": round(figures["p90_us"] / 1000, 2),
        "p99_ms": round(figures["p99_us"] / 1000, 2),
        "max_ms": round(figures["max_us"] / 1000, 2),
        "failures": figures["failures"] + figures["socket_errors"] + figures["timeouts"],
        "empty_answers": figures["empty"],
        "server_cpu_s": round(server_cpu, 2),
        "store_cpu_s": round(store_cpu, 2),
        "wrk_cpu_s": round(wrk_cpu, 2),
        # Where each message's CPU went, by process: the API node (its granian
        # workers and refresher), the store (Cassandra's JVM; SQLite runs inside
        # the API) and the load generator.
        "cpu_us_per_message": {
            "api": round(1e6 * server_cpu / units, 1),
            "store": round(1e6 * store_cpu / units, 1),
            "load": round(1e6 * wrk_cpu / units, 1),
        },
        "server_peak_rss_mb": round(server.peak_rss / 2**20, 1),
    }


def median_run(runs: list[dict]) -> dict:
    """The run with the median rate, plus every run's rate."""
    ordered = sorted(runs, key=lambda run: run["per_second"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs_per_second"] = [run["per_second"] for run in runs]
    chosen["median_per_second"] = statistics.median(run["per_second"] for run in runs)
    return chosen


def create_queue(port: int, name: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    status, data = request(
        conn, "POST", "/queue", json.dumps({"queue_name": name, "partitions": PARTITIONS})
    )
    conn.close()
    if status != 201:
        raise RuntimeError(f"creating {name}: {status} {data[:200]!r}")


def bench_backend(
    backend: str,
    duration: float,
    runs: int,
    workdir: Path,
    server_kind: str,
    workers: int,
    only: set[str],
    request_log: str = "INFO",
    warmup: float = 2.0,
) -> dict:
    server = Server(backend, workdir, server=server_kind, workers=workers, log_level=request_log)
    body_file = workdir / "message.json"
    body_file.write_bytes(json.dumps(BODY_200).encode())
    queue = f"bench{int(time.time())}"
    results: dict = {"server": server.description}
    try:
        create_queue(server.port, queue)
        path = f"/queue/{queue}"
        batch_env = {"QUEUEY_WRK_BODY": str(body_file), "QUEUEY_WRK_BATCH": "100"}
        scenarios = [
            ("heartbeat", "plain.lua", "/__lbheartbeat__", 8, 2, {}),
            ("single_post", "post.lua", path, 8, 2, {"QUEUEY_WRK_BODY": str(body_file)}),
            ("batch_post", "post.lua", path, 4, 2, batch_env),
            ("get_1000", "read.lua", path, 4, 2, {"QUEUEY_WRK_LIMIT": "1000"}),
            ("reserve_ack", "reserve_ack.lua", path, 4, 4, {"QUEUEY_WRK_LIMIT": "100"}),
        ]
        for name, script, target, connections, threads, env in scenarios:
            if name not in only:
                continue
            if name == "reserve_ack" and "batch_post" not in only:
                # It drains what the posts left: single posts alone leave too little.
                log(f"{backend}: batches of 100 for {duration:g}s first, to drain")
                wrk(server, "post.lua", path, 4, 2, duration, batch_env)
            if name in ("get_1000", "reserve_ack") and backend == "cassandra":
                time.sleep(2.5)  # the newest posts pass the configured read delay
            log(f"{backend}: {name} x{runs}")
            if warmup > 0 and name != "reserve_ack":  # its warm-up would drain the backlog
                # Not counted: the first seconds of load pay for warming up
                # (Cassandra's JIT above all: a cold node spent ~3x the CPU per write).
                wrk(server, script, target, connections, threads, warmup, env)
            measured = [
                wrk(server, script, target, connections, threads, duration, env)
                for _ in range(runs)
            ]
            results[name] = median_run(measured)
        units = {
            "heartbeat": "requests",
            "single_post": "messages (one per request)",
            "batch_post": "messages (100 per request)",
            "get_1000": "messages read",
            "reserve_ack": "messages reserved and acked",
        }
        for name, unit in units.items():
            if name in results:
                results[name]["unit"] = unit
        results["server_rss_mb_after"] = round(server.rss() / 2**20, 1)
        return results
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server", default="granian", choices=sorted(SERVERS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--request-log",
        default="INFO",
        choices=["INFO", "WARNING"],
        help="INFO: a line per request, as the shipped ini files log",
    )
    parser.add_argument("--only", default="heartbeat,single_post,batch_post,get_1000,reserve_ack")
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="seconds of each scenario run first, not counted"
    )
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    only = set(args.only.split(","))
    out = {
        "benchmark": "api",
        "cpus": os.cpu_count(),
        "load": f"wrk {wrk_version()} (C, {WRK_DIR.relative_to(ROOT)}/*.lua)",
        "message_bytes": len(json.dumps(BODY_200)),
        "results": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            out["results"][backend] = bench_backend(
                backend,
                args.duration,
                args.runs,
                Path(tmp),
                args.server,
                args.workers,
                only,
                args.request_log,
                args.warmup,
            )
    print(json.dumps(out, indent=2))
    return 0


def wrk_version() -> str:
    done = subprocess.run([ensure_wrk(), "-v"], capture_output=True, text=True, check=False)
    words = (done.stdout + done.stderr).split()
    return words[1] if len(words) > 1 else "unknown"


if __name__ == "__main__":
    sys.exit(main())

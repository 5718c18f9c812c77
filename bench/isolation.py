"""Isolation between applications: one application's flood beside another's trickle.

    python bench/isolation.py [--duration 10] [--trickle-rate 20] [--flood-limit 200]
                              [--flood-connections 16] [--load wrk|threads]

One server from the shipped ``development.ini`` (granian, its 2 workers of 48
threads, SQLite, the request log), with three applications: ``trickle`` posts
one ~200-byte message every ``1/--trickle-rate`` s on a keep-alive connection
of its own; ``flood`` (no limits) and ``flood-limited``
(``max_requests_per_second`` = ``--flood-limit``, burst the same) post as fast
as ``--flood-connections`` connections allow (``wrk``, installed when missing
as root, or that many Python threads with ``--load threads``). Three phases of
``--duration`` seconds:

* ``alone``: the trickle alone;
* ``flood``: the trickle beside ``flood``;
* ``flood_limited``: the trickle beside ``flood-limited``.

For each, the trickle's latency (p50, p99, max; measured from when each post
was due, so a stalled server is not hidden by posts it delayed) and failures,
and the flood's answers per second by kind (201 stored, 429 refused). Prints
one JSON object. Not a test: compare phases of one run, on a quiet machine.
"""

from __future__ import annotations

import argparse
import configparser
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200, INI, WRK_DIR, ensure_wrk, tree_cpu  # noqa: E402
from bench.common import free_port, start_pserve, stop_process_group, wait_http  # noqa: E402

KEY = "isolation-key"
APPLICATIONS = """
[application:trickle]
keys = plain:{key}
allow = 127.0.0.0/8

[application:flood]
keys = plain:{key}
allow = 127.0.0.0/8
max_requests_per_second = 0

[application:flood-limited]
keys = plain:{key}
allow = 127.0.0.0/8
max_requests_per_second = {limit}
max_burst = {burst}
"""


def log(message: str) -> None:
    print(f"[isolation] {message}", file=sys.stderr, flush=True)


def headers(app: str) -> dict[str, str]:
    return {"X-Application-Name": app, "ApplicationKey": KEY, "Content-Type": "application/json"}


class ShippedServer:
    """``pserve`` on development.ini's settings and server section (its port,
    store and applications file moved into ``workdir``)."""

    def __init__(self, workdir: Path, apps: Path) -> None:
        shipped = configparser.ConfigParser(interpolation=None)
        shipped.read(ROOT / "development.ini", encoding="utf-8")
        settings = dict(shipped["app:main"])
        settings.pop("use", None)
        settings["queuey.applications"] = str(apps)
        settings["queuey.sqlite.path"] = str(workdir / "isolation.sqlite3")
        server = dict(shipped["server:main"])
        self.port = free_port()
        server["listen"] = f"127.0.0.1:{self.port}"
        self.description = {
            "ini": "development.ini",
            "workers": int(server.get("workers", 1)),
            "threads_per_worker": int(server.get("threads", 0)),
            "reserve_max_waiting": settings.get("queuey.reserve.max_waiting"),
        }
        ini = workdir / "isolation.ini"
        ini.write_text(
            INI.format(
                apps=apps,
                storage="".join(
                    f"{k} = {v}\n" for k, v in settings.items() if k != "queuey.applications"
                ),
                server="".join(f"{k} = {v}\n" for k, v in server.items()),
                log_level=shipped.get("logger_queuey", "level", fallback="INFO"),
            ),
            encoding="utf-8",
        )
        self.proc = start_pserve(ini, workdir / "isolation.log")
        wait_http(f"http://127.0.0.1:{self.port}/__lbheartbeat__", timeout=120)
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        return tree_cpu(self.ps)

    def stop(self) -> None:
        stop_process_group(self.proc)


def create_queue(port: int, app: str, name: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/queue", json.dumps({"queue_name": name}), headers(app))
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.status != 201:
        raise RuntimeError(f"creating {app}/{name}: {response.status} {data[:200]!r}")


def post_once(
    conn: http.client.HTTPConnection, port: int, path: str, body, headers: dict[str, str]
) -> tuple[int, http.client.HTTPConnection]:
    """One ``POST``, its answer read: its status (0 when it failed on the way)
    and the connection to use next (a fresh one after a failure)."""
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status, conn
    except (OSError, http.client.HTTPException):
        conn.close()
        return 0, http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def trickle(port: int, rate: float, seconds: float) -> dict:
    """Posts due every ``1/rate`` s; latency from when each was due."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps(BODY_200)
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    count = int(rate * seconds)
    for n in range(count):
        due = started + n / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        status, conn = post_once(conn, port, "/queue/trickle", body, headers("trickle"))
        statuses[status] += 1
        if status:
            latencies.append((time.monotonic() - due) * 1000)
    conn.close()
    return {
        "rate_per_s": rate,
        "posts": count,
        "ok": statuses[201],
        "failed": count - statuses[201],
        "p50_ms": round(statistics.median(latencies), 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99), 2) if latencies else None,
        "max_ms": round(max(latencies), 2) if latencies else None,
    }


def flood_wrk(port: int, app: str, connections: int, seconds: float, body_file: Path):
    argv = [
        ensure_wrk(),
        "-t2",
        f"-c{connections}",
        f"-d{round(seconds)}s",
        "--timeout",
        "10s",
        "-s",
        str(WRK_DIR / "post.lua"),
        f"http://127.0.0.1:{port}/queue/{app}",
    ]
    env = {
        **os.environ,
        "QUEUEY_WRK_DIR": str(WRK_DIR),
        "QUEUEY_WRK_APP": app,
        "QUEUEY_WRK_KEY": KEY,
        "QUEUEY_WRK_BODY": str(body_file),
    }
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def result() -> dict:
        out, err = proc.communicate()
        lines = [line for line in out.decode().splitlines() if line.startswith('{"wrk"')]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {(out + err).decode()[-1000:]}")
        figures = json.loads(lines[-1])["wrk"]
        took = figures["duration_us"] / 1e6
        return {
            "load": "wrk",
            "connections": connections,
            "requests_per_s": round(figures["requests"] / took, 1),
            "stored_per_s": round(figures["units"] / took, 1),
            "refused_per_s": round(figures["failures"] / took, 1),
            "errors": figures["socket_errors"] + figures["timeouts"],
        }

    return result


def flood_threads(port: int, app: str, connections: int, seconds: float, body_file: Path):
    body = body_file.read_bytes()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def run() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        seen: Counter[int] = Counter()
        while time.monotonic() < deadline:
            status, conn = post_once(conn, port, f"/queue/{app}", body, headers(app))
            seen[status] += 1
        conn.close()
        with lock:
            statuses.update(seen)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()

    def result() -> dict:
        for thread in threads:
            thread.join()
        total = sum(statuses.values())
        return {
            "load": "python threads",
            "connections": connections,
            "requests_per_s": round(total / seconds, 1),
            "stored_per_s": round(statuses[201] / seconds, 1),
            "refused_per_s": round(statuses[429] / seconds, 1),
            "errors": total - statuses[201] - statuses[429],
        }

    return result


def phase(server: ShippedServer, args, flood_app: str | None, body_file: Path) -> dict:
    log(f"phase: trickle{' + ' + flood_app if flood_app else ' alone'}")
    cpu_before = server.cpu()
    finish = None
    if flood_app:
        start = flood_wrk if args.load == "wrk" else flood_threads
        finish = start(server.port, flood_app, args.flood_connections, args.duration, body_file)
        time.sleep(0.5)  # the flood is running before the trickle starts
    measured = {"trickle": trickle(server.port, args.trickle_rate, args.duration - 1.0)}
    if finish is not None:
        measured["flood"] = finish()
    measured["server_cpu_s"] = round(server.cpu() - cpu_before, 2)
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--trickle-rate", type=float, default=20.0)
    parser.add_argument("--flood-limit", type=float, default=200.0)
    parser.add_argument("--flood-connections", type=int, default=16)
    parser.add_argument("--load", default="wrk", choices=["wrk", "threads"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        apps = workdir / "applications.ini"
        burst = max(1, int(args.flood_limit))
        apps.write_text(APPLICATIONS.format(key=KEY, limit=args.flood_limit, burst=burst))
        body_file = workdir / "message.json"
        body_file.write_text(json.dumps(BODY_200))
        server = ShippedServer(workdir, apps)
        try:
            for app, name in (("trickle", "trickle"), ("flood", "flood"), ("flood-limited",) * 2):
                create_queue(server.port, app, name)
            results = {
                "alone": phase(server, args, None, body_file),
                "flood": phase(server, args, "flood", body_file),
                "flood_limited": phase(server, args, "flood-limited", body_file),
            }
        finally:
            server.stop()
    out = {
        "benchmark": "isolation",
        "cpus": os.cpu_count(),
        "server": server.description,
        "flood_limit_per_s": args.flood_limit,
        "phase_seconds": args.duration,
        "results": results,
        "how": (
            "trickle latency is measured from when each post was due; the flood, its "
            "load generator and the server share the same cores"
        ),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory soak: the server's resident memory under the single-post load, for minutes.

    python bench/soak.py [--backend sqlite|cassandra] [--minutes 10] [--sample 10]

One server as in ``bench/api.py`` (granian, 2 workers) and ``wrk`` posting one
~200-byte message per request on 8 connections, back to back, for ``--minutes``
(one wrk run per ``--sample`` seconds, so the rate is seen over time too). After
each slice the RSS of the server's processes (all workers) is sampled. Reports
the samples, the RSS after the first minute (warm: caches, pools and buffers
filled) and at the end, the growth between them and a least-squares slope over
the warm samples in MB per minute. "Flat" means the slope stays under 1 MB per
minute. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200, Server, create_queue, log, wrk  # noqa: E402

FLAT_MB_PER_MINUTE = 1.0


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if not spread:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def soak(backend: str, minutes: float, sample: int, workdir: Path) -> dict:
    server = Server(backend, workdir)
    body_file = workdir / "message.json"
    body_file.write_bytes(json.dumps(BODY_200).encode())
    queue = f"soak{int(time.time())}"
    samples = []
    try:
        create_queue(server.port, queue)
        started = time.monotonic()
        log(f"{backend}: soak for {minutes} min")
        while time.monotonic() - started < minutes * 60:
            run = wrk(
                server,
                "post.lua",
                f"/queue/{queue}",
                8,
                2,
                sample,
                {"QUEUEY_WRK_BODY": str(body_file)},
            )
            samples.append(
                {
                    "minute": round((time.monotonic() - started) / 60, 2),
                    "rss_mb": round(server.rss() / 2**20, 1),
                    "per_second": run["per_second"],
                    "p99_ms": run["p99_ms"],
                    "failures": run["failures"],
                }
            )
    finally:
        server.stop()
    warm = [s for s in samples if s["minute"] >= 1.0] or samples
    growth = warm[-1]["rss_mb"] - warm[0]["rss_mb"]
    per_minute = slope([(s["minute"], s["rss_mb"]) for s in warm])
    return {
        "server": server.description,
        "minutes": minutes,
        "messages": round(sum(s["per_second"] * sample for s in samples)),
        "median_per_second": statistics.median(s["per_second"] for s in samples),
        "failures": sum(s["failures"] for s in samples),
        "rss_mb_first_minute": warm[0]["rss_mb"],
        "rss_mb_end": warm[-1]["rss_mb"],
        "rss_growth_mb": round(growth, 1),
        "rss_slope_mb_per_minute": round(per_minute, 2),
        "flat": abs(per_minute) < FLAT_MB_PER_MINUTE,
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "cassandra"])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample", type=int, default=10, help="seconds per wrk slice")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = soak(args.backend, args.minutes, args.sample, Path(tmp))
    print(
        json.dumps(
            {"benchmark": "soak", "cpus": os.cpu_count(), "results": {args.backend: result}},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two commits' servers, alternated on one box: medians and ratios per figure.

    python bench/ab.py A B [--rounds 4] [--backend sqlite|cassandra|both]
                           [--only single_post,batch_post,reserve_ack] [--duration 8]

Each commit is exported (``git archive``, nothing of the working tree) to a
temporary folder. Both sides are measured by *this* checkout's
``bench/api.py`` (the same load scripts, settings and warm-up for both), its
server started with the commit's own code first on ``PYTHONPATH``; every run
starts a fresh server on a fresh store (a new SQLite file, an empty Cassandra
keyspace). Per backend (SQLite's rounds first, then Cassandra's, after one
uncounted run that warms the node's JIT up), the order flips every round (A B,
B A, ...) so neither side always runs on a warmer or a busier box, and before
every run the box must be quiet (all cores below :data:`QUIET_PERCENT` busy
over a second, waited for at most :data:`QUIET_WAIT` s: a Cassandra node still
compacting after the last run no longer lands on the next one).

Prints one JSON object: for every backend and scenario, each side's rates, p50
latencies and server CPU per message round by round, their medians, the ratio
B / A of the median rates (above 1: B is faster) and ``beyond_noise``: whether
the two sides' rates do not overlap at all (every run of one side faster than
every run of the other); ``cpu_ratio_b_to_a`` and ``cpu_beyond_noise`` say the
same of the server's CPU per message, which spreads far less than the rates.
Run ``bench/ab.py X X`` (an A/A run) to see the tool's own spread on this box
before trusting a ratio near 1. Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
#: The box counts as quiet below this share of all its cores, over one second.
QUIET_PERCENT = 15.0
#: The longest wait for a quiet box before a run (then it runs anyway, and says so).
QUIET_WAIT = 60.0


def log(message: str) -> None:
    print(f"[ab] {message}", file=sys.stderr, flush=True)


def export(rev: str, into: Path) -> Path:
    """``rev``'s tree in ``into`` (a fresh folder)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def settle() -> float:
    """Wait for a quiet box (see the module's docstring); the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < QUIET_WAIT:
        if psutil.cpu_percent(interval=1.0) < QUIET_PERCENT:
            break
    waited = time.monotonic() - started
    if waited >= QUIET_WAIT:
        log(f"the box stayed busy for {QUIET_WAIT:g}s: running anyway")
    return round(waited, 1)


def one_run(tree: Path, backend: str, only: str, duration: float) -> dict:
    """This checkout's ``bench/api.py --runs 1`` against ``tree``'s server:
    its results for ``backend``."""
    environ = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "api.py"), "--backend", backend, "--runs", "1"]
        + ["--only", only, "--duration", str(duration)],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/api.py against {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)["results"][backend]


def summary(runs: list[dict]) -> dict:
    rates = [run["per_second"] for run in runs]
    cpu_us = [1e6 * run["server_cpu_s"] / max(1, run["units"]) for run in runs]
    return {
        "per_second": rates,
        "p50_ms": [run["p50_ms"] for run in runs],
        "server_cpu_us_per_message": [round(us, 1) for us in cpu_us],
        "median_per_second": statistics.median(rates),
        "median_p50_ms": statistics.median(run["p50_ms"] for run in runs),
        "median_server_cpu_us_per_message": round(statistics.median(cpu_us), 1),
    }


def compare(a: dict, b: dict) -> dict:
    ratio = b["median_per_second"] / a["median_per_second"] if a["median_per_second"] else 0
    apart = min(a["per_second"]) > max(b["per_second"]) or min(b["per_second"]) > max(
        a["per_second"]
    )
    cpu_a, cpu_b = a["median_server_cpu_us_per_message"], b["median_server_cpu_us_per_message"]
    us_a, us_b = a["server_cpu_us_per_message"], b["server_cpu_us_per_message"]
    return {
        "a": a,
        "b": b,
        "ratio_b_to_a": round(ratio, 3),
        "cpu_ratio_b_to_a": round(cpu_b / cpu_a, 3) if cpu_a else None,
        "beyond_noise": apart,
        "cpu_beyond_noise": min(us_a) > max(us_b) or min(us_b) > max(us_a),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the commit before (A)")
    parser.add_argument("b", help="the commit after (B)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--only", default="single_post,batch_post,reserve_ack")
    parser.add_argument("--duration", type=float, default=8.0)
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    scenarios = args.only.split(",")
    runs: dict = {side: {b: {s: [] for s in scenarios} for b in backends} for side in "ab"}
    waits: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {side: export(getattr(args, side), Path(tmp) / side) for side in "ab"}
        for backend in backends:
            if backend == "cassandra":
                log("cassandra: one uncounted run to warm the node up")
                one_run(trees["a"], backend, args.only, args.duration)
            for number in range(args.rounds):
                for side in "ab" if number % 2 == 0 else "ba":
                    waits.append(settle())
                    log(f"{backend} round {number + 1}: {side}")
                    got = one_run(trees[side], backend, args.only, args.duration)
                    for scenario in scenarios:
                        runs[side][backend][scenario].append(got[scenario])
    out: dict = {
        "benchmark": "ab",
        "a": args.a,
        "b": args.b,
        "rounds": args.rounds,
        "seconds_waited_for_a_quiet_box": waits,
        "results": {},
    }
    for backend in backends:
        for scenario in scenarios:
            out["results"].setdefault(backend, {})[scenario] = compare(
                summary(runs["a"][backend][scenario]), summary(runs["b"][backend][scenario])
            )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

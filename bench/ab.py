"""Two commits' servers, alternated on one box: medians and ratios per figure.

    python bench/ab.py A B [--rounds 3] [--backend sqlite|cassandra|both]
                           [--only single_post,batch_post,reserve_ack] [--duration 8]

Each commit is exported (``git archive``, nothing of the working tree) to a
temporary folder, and every round runs ``bench/api.py --runs 1`` of the one,
then of the other, with the commit's own code first on ``PYTHONPATH``; the
order flips every round (A B, B A, A B ...) so neither side always runs on a
warmer or a busier box. Prints one JSON object: for every backend and
scenario, each side's rates and p50 latencies round by round, their medians,
the server CPU microseconds per message, and the ratio B / A of the medians
(above 1: B is faster). Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export(rev: str, into: Path) -> Path:
    """``rev``'s tree in ``into`` (a fresh folder)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def one_run(tree: Path, backend: str, only: str, duration: float) -> dict:
    """``bench/api.py --runs 1`` of ``tree``: its results for ``backend``."""
    environ = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / "api.py"), "--backend", backend, "--runs", "1"]
        + ["--only", only, "--duration", str(duration)],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/api.py in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)["results"][backend]


def summary(runs: list[dict]) -> dict:
    rates = [run["per_second"] for run in runs]
    cpu_us = [1e6 * run["server_cpu_s"] / max(1, run["units"]) for run in runs]
    return {
        "per_second": rates,
        "p50_ms": [run["p50_ms"] for run in runs],
        "median_per_second": statistics.median(rates),
        "median_p50_ms": statistics.median(run["p50_ms"] for run in runs),
        "median_server_cpu_us_per_message": round(statistics.median(cpu_us), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the commit before (A)")
    parser.add_argument("b", help="the commit after (B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--only", default="single_post,batch_post,reserve_ack")
    parser.add_argument("--duration", type=float, default=8.0)
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    scenarios = args.only.split(",")
    runs: dict = {side: {b: {s: [] for s in scenarios} for b in backends} for side in "ab"}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {side: export(getattr(args, side), Path(tmp) / side) for side in "ab"}
        for number in range(args.rounds):
            order = "ab" if number % 2 == 0 else "ba"
            for side in order:
                for backend in backends:
                    print(f"round {number + 1}: {side} {backend}", file=sys.stderr, flush=True)
                    got = one_run(trees[side], backend, args.only, args.duration)
                    for scenario in scenarios:
                        runs[side][backend][scenario].append(got[scenario])
    out: dict = {"benchmark": "ab", "a": args.a, "b": args.b, "rounds": args.rounds, "results": {}}
    for backend in backends:
        for scenario in scenarios:
            a = summary(runs["a"][backend][scenario])
            b = summary(runs["b"][backend][scenario])
            ratio = b["median_per_second"] / a["median_per_second"] if a["median_per_second"] else 0
            out["results"].setdefault(backend, {})[scenario] = {
                "a": a,
                "b": b,
                "ratio_b_to_a": round(ratio, 3),
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

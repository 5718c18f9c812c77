"""Run every benchmark and print one JSON document (``make bench``).

Each benchmark is a script printing one JSON object on stdout; a failing one is
reported with its exit code and the tail of its stderr, and the others still run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["api.py", "consumers.py", "spark.py", "durability.py"]


def run(script: str) -> dict:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(HERE / script)], capture_output=True, text=True, check=False
    )
    elapsed = round(time.monotonic() - started, 1)
    if proc.returncode != 0:
        return {
            "error": f"exit {proc.returncode}",
            "stderr": proc.stderr[-2000:],
            "seconds": elapsed,
        }
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        return {"error": "no JSON on stdout", "stdout": proc.stdout[-2000:], "seconds": elapsed}
    result["seconds"] = elapsed
    return result


def main() -> int:
    only = sys.argv[1:] or BENCHMARKS
    results = {script.removesuffix(".py"): run(script) for script in only}
    print(json.dumps(results, indent=2))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

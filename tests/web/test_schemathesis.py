"""A schema-driven fuzzer finds no difference between /openapi.json and the service.

Schemathesis reads the live server's own description and sends what it
generates from it (examples, boundary values, random valid and invalid input,
stateful create/read/delete chains), with every check it has: no 500, status
codes, content types, headers and bodies as described, invalid input refused,
valid input accepted, 405 with ``Allow``, deleted queues gone, auth enforced.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from queuey.web.openapi import EXAMPLE_QUEUES
from tests.support import KEY

#: Enough cases to cover every parameter's boundaries in ~1-2 minutes on 2 cores.
MAX_EXAMPLES = 50
SEED = 20261122
REPO = Path(__file__).resolve().parents[2]


def _create_example_queues(server) -> None:
    """The queues the spec's examples name exist, so generated reads and posts
    reach real queues and not only 404."""
    auth = {"X-Application-Name": server.application, "ApplicationKey": KEY}
    for name, queue_type in EXAMPLE_QUEUES.items():
        res = requests.post(
            f"{server.url}/queue",
            json={"queue_name": name, "partitions": 4, "type": queue_type},
            headers=auth,
            timeout=10,
        )
        assert res.status_code == 201, res.text


@pytest.mark.slow
def test_schemathesis_finds_no_difference(make_live_server, tmp_path):
    # A generated `wait` of up to 20 s per reserve would spend the run waiting;
    # without long polls a reserve answers at once, otherwise the same.
    live_server = make_live_server("sqlite", **{"queuey.reserve.max_waiting": "0"})
    _create_example_queues(live_server)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{live_server.url}/openapi.json",
        "--checks",
        "all",
        "--mode",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--continue-on-failure",
        "--no-color",
        "--report-dir",
        str(tmp_path / "report"),
        "-H",
        f"X-Application-Name: {live_server.application}",
        "-H",
        f"ApplicationKey: {KEY}",
    ]
    dropped_file = tmp_path / "dropped.tsv"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SCHEMATHESIS_HOOKS": "tests.web.schemathesis_hooks",
        "QUEUEY_ST_DROPPED": str(dropped_file),
    }
    started = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env, check=False
    )
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    dropped = dropped_file.read_text("utf-8").splitlines() if dropped_file.exists() else []
    kinds = Counter(tuple(line.split("\t")[:3]) for line in dropped)
    print(output)
    print(f"schemathesis: exit {done.returncode} after {elapsed:.1f}s; dropped by the hooks:")
    for (code, operation, why), count in sorted(kinds.items()):
        print(f"  {count:4d} {code} {operation} ({why})")
    assert done.returncode == 0, output[-6000:]

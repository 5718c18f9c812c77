"""An export's memory does not grow with the queue: 50,000 messages of about
1 KiB (a 55 MB file, several times that as Python objects) are exported by a
process whose Python heap peaks below :data:`BOUND_MIB` (tracemalloc,
started once every module is imported) and whose peak RSS stays below
:data:`RSS_BOUND_MIB`. The RSS is ``VmHWM`` of the subprocess's own memory:
its ``ru_maxrss`` is no use here, since Linux carries the peak of the pytest
process it was spawned from across ``exec``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from queuey.client.models import OutgoingMessage

COUNT = 50_000
BOUND_MIB = 25
RSS_BOUND_MIB = 100

MEASURE = textwrap.dedent(
    """
    import json, sys, tracemalloc
    from queuey.cli import main
    import queuey.cli.transfer  # every import done before the measure

    tracemalloc.start()
    code = main(sys.argv[1:])
    heap_peak = tracemalloc.get_traced_memory()[1]
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    rss = int(status.split()[0])
    print(json.dumps({"code": code, "heap_peak_bytes": heap_peak, "max_rss_kib": rss}))
    """
)


@pytest.mark.slow
def test_export_memory_is_bounded(client, server, tmp_path):
    client.create_queue("big", partitions=4)
    pad = "x" * 1000
    for start in range(0, COUNT, 1000):
        client.post_batch(
            "big",
            [
                OutgoingMessage({"n": n, "pad": pad}, partition=1 + n % 4)
                for n in range(start, start + 1000)
            ],
        )
    out = tmp_path / "big.jsonl"
    env = {
        "QUEUEY_URL": server.url,
        "QUEUEY_APPLICATION": server.application,
        "QUEUEY_KEY": server.key,
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, "export", "big", "-o", str(out), "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    assert figures["code"] == 0
    with out.open("rb") as f:
        assert sum(1 for _ in f) == COUNT
    heap_mib = figures["heap_peak_bytes"] / 2**20
    rss_mib = figures["max_rss_kib"] / 1024
    size_mib = out.stat().st_size / 2**20
    print(
        f"export of {COUNT} messages ({size_mib:.0f} MiB of lines): "
        f"Python heap peak {heap_mib:.1f} MiB, peak RSS {rss_mib:.0f} MiB"
    )
    assert heap_mib < BOUND_MIB
    assert rss_mib < RSS_BOUND_MIB

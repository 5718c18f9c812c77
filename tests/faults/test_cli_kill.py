"""``queuey export`` and ``queuey import`` killed with ``kill -9`` mid-run, then
run again with ``--resume`` / the same command: every message once, none lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from queuey.cli.transfer import ImportProgress
from queuey.client.http import QueueyClient
from queuey.client.models import OutgoingMessage
from tests.support import wait_until

pytestmark = pytest.mark.slow

QUEUEY = str(Path(sys.executable).parent / "queuey")
COUNT = 40_000
PARTITIONS = 4


def run(server, *args: str, wait: bool = True):
    env = {
        **os.environ,
        "QUEUEY_URL": server.url,
        "QUEUEY_APPLICATION": server.application,
        "QUEUEY_KEY": server.key,
    }
    proc = subprocess.Popen(
        [QUEUEY, *args, "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if wait:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    return proc


def kill_when(proc: subprocess.Popen, ready, what: str) -> None:
    wait_until(lambda: ready() or proc.poll() is not None, timeout=120, what=what)
    assert proc.poll() is None, "the command finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)


@pytest.fixture
def filled(live_server):
    client = QueueyClient(live_server.url, live_server.application, live_server.key)
    client.create_queue("source", partitions=PARTITIONS)
    client.create_queue("copy", partitions=PARTITIONS)
    for start in range(0, COUNT, 1000):
        client.post_batch(
            "source",
            [
                OutgoingMessage({"n": n, "pad": "x" * 100}, partition=1 + n % PARTITIONS)
                for n in range(start, start + 1000)
            ],
        )
    yield client
    client.close()


def test_export_and_import_killed_mid_run_resume_without_loss_or_duplicates(
    live_server, filled, tmp_path
):
    exported = tmp_path / "source.jsonl"
    proc = run(live_server, "export", "source", "-o", str(exported), wait=False)
    kill_when(proc, lambda: exported.exists() and exported.stat().st_size > 1_500_000, "export")
    cut_at = exported.stat().st_size
    run(live_server, "export", "source", "-o", str(exported), "--resume")
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    exported_counts = Counter(line["body"]["n"] for line in lines)

    progress = ImportProgress.path_for(exported)
    proc = run(live_server, "import", "copy", "-i", str(exported), wait=False)
    kill_when(
        proc,
        lambda: (p := ImportProgress.load(progress)) is not None and p.line >= COUNT // 4,
        "import progress",
    )
    stored_at_kill = filled.stats("copy").messages
    run(live_server, "import", "copy", "-i", str(exported))
    imported = Counter(m.body["n"] for m in filled.iter_messages("copy"))

    print(
        f"export killed at {cut_at:,} bytes, resumed: {len(lines):,} lines, "
        f"{sum(c > 1 for c in exported_counts.values())} duplicated, "
        f"{COUNT - len(exported_counts)} lost; import killed with {stored_at_kill:,} stored, "
        f"re-run: {sum(imported.values()):,} stored, "
        f"{sum(c > 1 for c in imported.values())} duplicated, {COUNT - len(imported)} lost"
    )
    assert len(lines) == COUNT and set(exported_counts) == set(range(COUNT))
    assert 0 < stored_at_kill < COUNT
    assert sum(imported.values()) == COUNT and set(imported) == set(range(COUNT))

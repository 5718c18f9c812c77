"""``kill_process`` crashes exactly the process a pidfile recorded, and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import process

pytestmark = pytest.mark.unit


def _sleeper(tmp_path: Path, name: str) -> Path:
    """A detached process started the way the harness starts services; its pidfile."""
    marker = f"sleeper:{tmp_path / name}"
    pidfile = tmp_path / f"{name}.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(120)", process.marker_arg(marker)]
    process.start_detached(
        argv, pidfile=pidfile, log_file=tmp_path / f"{name}.log", cwd=tmp_path, marker=marker
    )
    return pidfile


def test_kill_process_crashes_only_the_recorded_process(tmp_path: Path) -> None:
    victim, bystander = _sleeper(tmp_path, "victim"), _sleeper(tmp_path, "bystander")
    record = process.PidRecord.load(bystander)
    assert record is not None
    try:
        # The bystander's pid with another start time: its pid was "reused".
        stale = tmp_path / "stale.pid"
        process.PidRecord(record.pid, record.start_time + 1, record.marker).save(stale)
        assert process.kill_process(stale, timeout=5) is False
        assert not stale.exists()

        killed = process.PidRecord.load(victim)
        assert killed is not None and process.running_pid(victim) == killed.pid
        assert process.kill_process(victim, timeout=10) is True
        assert process.process_start_time(killed.pid) != killed.start_time
        assert not victim.exists()
        assert process.kill_process(victim, timeout=5) is False  # already gone

        assert process.running_pid(bystander) == record.pid, "killed a process it did not name"
    finally:
        process.stop_processes([victim, bystander], timeout=5)

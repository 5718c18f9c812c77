"""The harness runs a real ZooKeeper, and stopping a service signals only our own pid."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from harness import process, zookeeper
from tests.support import free_port

pytestmark = pytest.mark.zookeeper


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    return client


@pytest.fixture(scope="module")
def hosts() -> str:
    return zookeeper.ensure_running().hosts


@pytest.fixture
def root(hosts: str) -> Iterator[str]:
    path = f"/harness-test-{uuid.uuid4().hex[:12]}"
    admin = _client(hosts)
    admin.ensure_path(path)
    try:
        yield path
    finally:
        admin.delete(path, recursive=True)
        admin.stop()
        admin.close()


def test_server_reports_3_9(hosts: str) -> None:
    st = zookeeper.status()
    assert st.healthy and st.pid is not None
    assert st.version is not None and st.version.startswith("3.9.")
    assert str(zookeeper.ensure_running()) == hosts


def test_ephemeral_node_vanishes_when_its_session_closes(hosts: str, root: str) -> None:
    owner = _client(hosts)
    observer = _client(hosts)
    try:
        path = owner.create(f"{root}/member", b"alive", ephemeral=True)
        deleted = threading.Event()
        stat = observer.exists(path, watch=lambda event: deleted.set())
        assert stat is not None and stat.ephemeralOwner == owner.client_id[0]

        owner.stop()
        owner.close()

        assert deleted.wait(timeout=15), "ephemeral node survived its closed session"
        assert observer.exists(path) is None
    finally:
        owner.stop()
        owner.close()
        observer.stop()
        observer.close()


def test_stop_kills_only_the_process_we_started(tmp_path: Path) -> None:
    base = tmp_path / "zk"
    port = free_port()
    server = zookeeper.ensure_running(port, base_dir=base)
    ours = process.PidRecord.load(server.pidfile)
    assert ours is not None and process.running_pid(server.pidfile) == ours.pid

    # A bystander that looks like one of ours (it carries a marker argument).
    marker = process.marker_arg(f"bystander:{tmp_path}")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    try:
        process.wait_for(
            lambda: marker in Path(f"/proc/{bystander.pid}/cmdline").read_text(),
            timeout=10,
            interval=0.05,
            what="the bystander to exec",
        )
        started = process.process_start_time(bystander.pid)
        assert started is not None
        exact = tmp_path / "exact.pid"
        process.PidRecord(bystander.pid, started, marker).save(exact)
        assert process.running_pid(exact) == bystander.pid  # the checks are not vacuous

        # Same pid, different marker: a pidfile of another service instance.
        other_marker = tmp_path / "other-marker.pid"
        process.PidRecord(bystander.pid, started, ours.marker).save(other_marker)
        # Same pid and marker, different start time: the recorded process died
        # and its pid was reused.
        reused = tmp_path / "reused.pid"
        process.PidRecord(bystander.pid, started + 1, marker).save(reused)
        for pidfile in (other_marker, reused):
            assert process.running_pid(pidfile) is None
            assert process.stop_process(pidfile, timeout=1) is False
            assert not pidfile.exists()
        assert bystander.poll() is None

        assert zookeeper.stop(base_dir=base) is True
        st = zookeeper.status(base_dir=base)
        assert st.pid is None and not st.healthy
        assert not server.pidfile.exists()
        assert process.process_start_time(ours.pid) != ours.start_time
        assert not process.port_open(server.address, port)
        assert bystander.poll() is None, "stop signalled a process it did not start"
        assert zookeeper.stop(base_dir=base) is False
    finally:
        bystander.kill()
        bystander.wait()

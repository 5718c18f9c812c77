"""A producer posting through its spool survives a 30 s outage of the API node
and a ``kill -9`` mid-send: restarted on the same spool file, it sends the
rest, and the queue holds every acknowledged message exactly once.

The node is the server as shipped (granian, 2 workers) on SQLite; it is
stopped for 30 s while the producer (a process of its own,
tests/faults/spool_producer.py) goes on posting 100,000 messages, then
started again on the same port and database. The first producer sends at
most 1,500 messages a second, so however fast the box, the spool still holds
messages (some stored but not yet marked sent) when, every message spooled
and the sender halfway through them, the producer is killed with ``kill -9``
and started again with ``--drain-only`` (unpaced).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey.client import QueueyClient, spoolfile
from tests.faults import conftest as faults_conftest
from tests.faults.conftest import read_back
from tests.support import KEY, wait_until

pytestmark = pytest.mark.slow

COUNT = 100_000
PARTITIONS = 4
OUTAGE = 30.0
SEND_RATE = 1500  # messages a second from the first producer's sender
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def producers(tmp_path) -> Iterator:
    """``start(node, application, spool, acked, *options)``: a producer process;
    every one still running at the end is killed."""
    procs: list[subprocess.Popen] = []

    def start(node, application: str, spool: Path, acked: Path, *extra: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "tests.faults.spool_producer", node.url, application, KEY]
        argv += [str(spool), "spooled", str(COUNT), str(acked), *extra]
        with open(tmp_path / "producer.log", "ab") as log:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def sent(spool: Path) -> int:
    return spoolfile.scan(spool).sent if spool.exists() else 0


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_spool_survives_an_outage_and_a_kill_mid_send(
    make_api_node, producers, test_apps, tmp_path, monkeypatch
):
    started = time.monotonic()
    node = make_api_node("spool-node", server="granian")
    client = QueueyClient(node.url, test_apps.app, KEY, retries=5, backoff=0.2)
    client.create_queue("spooled", partitions=PARTITIONS)
    spool, acked = tmp_path / "producer.spool", tmp_path / "acked.txt"

    first = producers(node, test_apps.app, spool, acked, "--send-rate", str(SEND_RATE))
    wait_until(lambda: sent(spool) >= 2000, 60, "the first sends", interval=0.2)
    node.stop()
    down = time.monotonic()
    time.sleep(OUTAGE)  # the outage is the scenario, not a wait for a condition
    posted_in_outage = lines(acked)
    sent_before = spoolfile.scan(spool).sent
    monkeypatch.setattr(faults_conftest, "free_port", lambda: node.port)
    again = make_api_node("spool-node-again", server="granian")
    assert again.url == node.url
    outage = time.monotonic() - down

    def halfway() -> bool:
        assert first.poll() is None, "the producer finished before it could be killed"
        return lines(acked) == COUNT and spoolfile.scan(spool).sent >= COUNT // 2

    wait_until(halfway, 120, "every message spooled and half of them sent", interval=0.1)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    at_kill = spoolfile.scan(spool)
    stored_at_kill = client.stats("spooled").messages  # unmarked ones were in flight
    second = producers(again, test_apps.app, spool, acked, "--drain-only")
    assert second.wait(180) == 0, (tmp_path / "producer.log").read_text()
    after = spoolfile.scan(spool)

    acknowledged = {int(x) for x in acked.read_text().split()}
    found = read_back(client, "spooled", PARTITIONS)
    stored = {int(k[1:]) for k in found}
    duplicated = sum(n - 1 for n in found.values())
    lost = len(acknowledged - stored)
    print(
        f"acknowledged by the spool {len(acknowledged)}, stored {len(stored)}, "
        f"duplicated {duplicated}, lost {lost}; outage {outage:.1f}s "
        f"(posts accepted by its end: {posted_in_outage}, sent before it: {sent_before}); "
        f"killed with {len(at_kill.pending)} spooled, {at_kill.sent} sent, "
        f"{stored_at_kill - at_kill.sent} stored but not yet marked (in flight); "
        f"after the restart: sent {after.sent}, torn {after.torn}; "
        f"wall {time.monotonic() - started:.1f}s"
    )
    client.close()
    assert len(acknowledged) == COUNT and posted_in_outage > sent_before
    assert 0 < len(at_kill.pending) < COUNT
    assert lost == 0 and duplicated == 0 and stored == acknowledged
    assert os.path.exists(spool) and not after.pending

"""The service and an unreachable Cassandra: at start-up and mid-run.

A real API node (``pserve`` + waitress, its own process) runs against a real
Cassandra node of this module's own (ports 19642/17600/17699, a tmp dir),
which the tests start late and ``kill -9``. While storage is unreachable the
service must keep running and answer 503 with ``Retry-After`` (heartbeat
included), never 500; once Cassandra is back the same process must recover
by itself, within a bounded time, and nothing it acknowledged may be lost.

Figures are printed (run pytest with ``-s``) and put in the assertion messages.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.faults.conftest import read_back_complete
from tests.faults.storage_support import NATIVE_PORT, OwnCassandra, Prober, figures
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.cassandra]

#: Longest the service may take to notice that Cassandra is back.
RECOVERY_DEADLINE = 60.0


@pytest.fixture(scope="module")
def own_cassandra(tmp_path_factory) -> Iterator[OwnCassandra]:
    """This module's own node, not started yet; stopped at the end whatever happens."""
    node = OwnCassandra(tmp_path_factory.mktemp("own-cassandra"))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def api_node(make_api_node, own_cassandra):
    """``api_node(name)``: an API node whose storage is the module's own Cassandra."""

    def make(name: str):
        return make_api_node(
            name,
            backend="cassandra",
            **{
                "queuey.cassandra.contact_points": "127.0.0.1",
                "queuey.cassandra.port": str(NATIVE_PORT),
                "queuey.cassandra.connect_timeout": "2",
                "queuey.cassandra.request_timeout": "2",
                "queuey.read_delay": "3",
            },
        )

    return make


def _alive(node) -> None:
    assert node.proc.poll() is None, f"the API node exited:\n{node.log_tail()}"


def _storage_unavailable(prober: Prober) -> None:
    """The heartbeat says storage is down, with 503 + Retry-After."""
    beat = prober.heartbeat()
    assert beat.status_code == 503, beat.text
    assert beat.headers.get("Retry-After")
    assert beat.json()["checks"]["storage"].startswith("unavailable"), beat.text


def _recovers(prober: Prober) -> float:
    """Seconds until heartbeat and a post both succeed again (polled, bounded)."""
    started = time.monotonic()
    wait_until(
        lambda: prober.heartbeat().status_code == 200,
        RECOVERY_DEADLINE,
        "the heartbeat to report storage ok",
        interval=0.5,
    )
    return time.monotonic() - started


def _read_back_everything(prober: Prober) -> Counter:
    """Every message stored, once the acknowledged ones are readable (or 30 s passed)."""
    return read_back_complete(prober.read_back, set(prober.answers.acked), 30, interval=0.5)


def test_service_starts_without_cassandra_and_recovers_when_it_comes(
    api_node, own_cassandra, test_apps
):
    assert own_cassandra.pid is None
    node = api_node("starts-before-cassandra")
    _alive(node)
    prober = Prober(node.url, test_apps.app, "early")
    _storage_unavailable(prober)
    for response in (prober.create_queue(), prober.post(), prober.read()):
        assert response.status_code == 503, response.text
        assert response.headers.get("Retry-After"), response.headers
    _alive(node)

    node_start = own_cassandra.start()
    recovery = _recovers(prober)
    _alive(node)
    assert prober.create_queue().status_code == 201
    for _ in range(20):
        assert prober.post().status_code == 201
    found = _read_back_everything(prober)
    line = figures(
        prober.answers,
        found,
        f"cassandra_start={node_start:.1f}s recovered_after_start={recovery:.1f}s",
    )
    print(f"\n[storage unreachable at start-up] {line}")
    _alive(node)
    assert 500 not in prober.answers.statuses, line
    assert prober.answers.without_retry_after == 0, line
    assert set(prober.answers.acked) <= set(found), line


def test_service_survives_cassandra_killed_mid_run(api_node, own_cassandra, test_apps):
    own_cassandra.start()
    node = api_node("cassandra-dies-under-it")
    prober = Prober(node.url, test_apps.app, "midrun")
    wait_until(
        lambda: prober.heartbeat().status_code == 200,
        RECOVERY_DEADLINE,
        "the service to reach its Cassandra",
        interval=0.5,
    )
    assert prober.create_queue().status_code == 201
    prober.start_posting()
    try:
        wait_until(lambda: len(prober.answers.acked) >= 30, 60, "30 acknowledged posts")
        own_cassandra.kill()
        killed_at = time.monotonic()
        wait_until(
            lambda: prober.answers.statuses[503] > 0, 60, "a post answered 503", interval=0.2
        )
        _storage_unavailable(prober)
        _alive(node)
        node_start = own_cassandra.start()
        recovery = _recovers(prober)
        acked_before = len(prober.answers.acked)
        wait_until(
            lambda: len(prober.answers.acked) >= acked_before + 20,
            RECOVERY_DEADLINE,
            "posts to be acknowledged again",
            interval=0.2,
        )
    finally:
        prober.stop_posting()
    down = time.monotonic() - killed_at
    _alive(node)
    found = _read_back_everything(prober)
    line = figures(
        prober.answers,
        found,
        f"cassandra_restart={node_start:.1f}s recovered_after_restart={recovery:.1f}s "
        f"kill_to_end={down:.1f}s",
    )
    print(f"\n[cassandra killed mid-run] {line}")
    assert 500 not in prober.answers.statuses, line
    assert not [s for s in prober.answers.statuses if str(s).startswith("no answer")], line
    assert prober.answers.without_retry_after == 0, line
    assert set(prober.answers.acked) <= set(found), line

"""Invariant 1 on a single Cassandra node: a post answered 201 survives a crash.

The node is this module's own (never the shared one): four clients post
batches of 20 through the real API, the node's JVM gets ``kill -9`` mid-load,
the harness restarts it, and everything is read back. With the commit log
synced ``periodic``-ally (the old configuration) a 201 meant "in memory" and
the last acknowledged posts before the crash vanished on restart.
"""

from __future__ import annotations

import pytest

from harness import cassandra, cassandra_config
from tests.faults.cassandra_support import (
    Figures,
    api_settings,
    crash_under_load,
    own_cassandra,
    serve,
)

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]

PORTS = {"port": 19342, "storage_port": 17300, "jmx_port": 17399}
#: Load before the crash: past one 10 s periodic sync period, so the old
#: configuration always had acknowledged writes that no sync covered yet.
LOAD_SECONDS = 12.0


@pytest.fixture
def node(tmp_path_factory):
    with own_cassandra(1, tmp_path_factory.mktemp("cassandra-crash"), PORTS) as node:
        yield node


def test_acknowledged_posts_survive_kill_9_of_the_node(node, applications_file, test_apps):
    settings = api_settings(node.contact_points, node.port, applications_file)
    with serve(settings, test_apps.app) as server:
        run = crash_under_load(
            server,
            "crash",
            kill=lambda: cassandra.kill_node(node.nodes[0]),
            restart=lambda: cassandra.ensure_running(1, base_dir=node.base_dir, **PORTS),
            load_s=LOAD_SECONDS,
        )
    figures = Figures.of(
        run,
        commitlog=str(cassandra_config.rendered_commitlog(node.nodes[0])),
        acked_before_kill=run.acked_before_kill,
        acked_msgs_per_s=round(run.acked_per_s),
    ).show("kill -9 of the only Cassandra node")
    assert figures.lost == 0, f"acknowledged messages lost: {figures}"
    assert figures.duplicates == 0, f"messages read twice: {figures}"
    assert figures.failed_posts > 0, f"the crash went unnoticed; test proves nothing: {figures}"

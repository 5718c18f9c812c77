"""The rendered cassandra.yaml: commit-log durability per deployment (no JVM here;
that a node starts with each mode and survives a crash is tests/faults')."""

from __future__ import annotations

import pytest
import yaml

from harness import cassandra, cassandra_config
from harness.cassandra_config import CommitLogSync
from harness.process import HarnessError

pytestmark = pytest.mark.unit


def _render(tmp_path, nodes: int, commitlog: CommitLogSync) -> list[dict]:
    cluster = cassandra.cluster_spec(
        nodes, 19342, storage_port=17300, jmx_port=17399, base_dir=tmp_path
    )
    return [
        yaml.safe_load(cassandra_config.render(cluster, node, commitlog).read_text())
        for node in cluster.nodes
    ]


@pytest.mark.parametrize("nodes", [1, 3])
def test_every_deployment_acknowledges_only_what_is_on_disk(monkeypatch, nodes):
    monkeypatch.delenv(cassandra_config.ENV, raising=False)
    sync = cassandra_config.commitlog_for(nodes)
    assert sync.durable and sync.mode != "periodic"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("periodic", {"commitlog_sync": "periodic", "commitlog_sync_period": "10000ms"}),
        ("periodic:2000", {"commitlog_sync": "periodic", "commitlog_sync_period": "2000ms"}),
        ("group", {"commitlog_sync": "group", "commitlog_sync_group_window": "10ms"}),
        ("GROUP:2", {"commitlog_sync": "group", "commitlog_sync_group_window": "2ms"}),
        ("batch", {"commitlog_sync": "batch"}),
    ],
)
def test_each_mode_renders_only_its_own_window(tmp_path, text, expected):
    # Cassandra refuses to start when a mode comes with another mode's window.
    (config,) = _render(tmp_path, 1, CommitLogSync.parse(text))
    rendered = {key: value for key, value in config.items() if key.startswith("commitlog_sync")}
    assert rendered == expected


def test_rendered_mode_is_read_back_from_a_node_directory(tmp_path):
    cluster = cassandra.cluster_spec(
        3, 19442, storage_port=17400, jmx_port=17500, base_dir=tmp_path
    )
    for node in cluster.nodes:
        cassandra_config.render(cluster, node, CommitLogSync.parse("group:7"))
    assert {cassandra_config.rendered_commitlog(n) for n in cluster.nodes} == {
        CommitLogSync("group", 7)
    }
    never_started = cassandra.cluster_spec(1, 19342, base_dir=tmp_path / "new").nodes[0]
    assert cassandra_config.rendered_commitlog(never_started) is None


def test_environment_overrides_the_deployment_default(monkeypatch):
    monkeypatch.setenv(cassandra_config.ENV, "periodic:500")
    assert cassandra_config.commitlog_for(1) == CommitLogSync("periodic", 500)
    assert cassandra_config.commitlog_for(1, "batch") == CommitLogSync("batch", 0)


@pytest.mark.parametrize("text", ["fsync", "batch:5", "group:0", "group:abc", "periodic:99999"])
def test_bad_modes_are_refused_with_a_message(text):
    with pytest.raises(HarnessError, match="commit-log|batch mode"):
        CommitLogSync.parse(text)


def test_cluster_nodes_share_seed_and_get_balanced_tokens(tmp_path):
    configs = _render(tmp_path, 3, cassandra_config.CLUSTER_COMMITLOG)
    assert {c["seed_provider"][0]["parameters"][0]["seeds"] for c in configs} == {"127.0.0.1:17300"}
    tokens = [int(c["initial_token"]) for c in configs]
    assert tokens == sorted(tokens) and tokens[0] == -(2**63)
    assert [c["listen_address"] for c in configs] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def test_command_line_passes_the_mode_to_the_harness(monkeypatch):
    from harness import __main__ as cli

    seen = {}

    def fake_ensure_running(*args, **kwargs):
        seen.update(kwargs)
        raise HarnessError("stop here")

    monkeypatch.setattr(cassandra, "ensure_running", fake_ensure_running)
    assert cli.main(["cassandra", "start", "--port", "19342", "--commitlog", "batch"]) == 1
    assert seen["commitlog"] == "batch"

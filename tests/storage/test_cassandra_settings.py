"""The ``queuey.cassandra.*`` settings: defaults, parsing, and errors that name the key."""

from __future__ import annotations

import pytest

from queuey.clock import ManualClock
from queuey.errors import ConfigurationError
from queuey.storage.cassandra import CassandraStorage, parse_settings


@pytest.mark.unit
def test_settings_defaults():
    cfg = parse_settings({})
    assert cfg.contact_points == ("127.0.0.1",)
    assert (cfg.port, cfg.keyspace, cfg.local_dc) == (9042, "queuey", "datacenter1")
    assert cfg.replication == {"class": "SimpleStrategy", "replication_factor": 1}
    assert (cfg.request_timeout, cfg.bucket_seconds, cfg.create_schema) == (2.0, 60, False)
    storage = CassandraStorage(cfg, ManualClock())
    assert storage.write_timeout_seconds == 2.0


@pytest.mark.unit
def test_settings_are_parsed():
    cfg = parse_settings(
        {
            "queuey.cassandra.contact_points": " 10.0.0.1, 10.0.0.2 ",
            "queuey.cassandra.port": "19042",
            "queuey.cassandra.keyspace": "q2",
            "queuey.cassandra.replication": "{'class': 'NetworkTopologyStrategy', 'dc1': 3}",
            "queuey.cassandra.request_timeout": "1.5",
            "queuey.cassandra.create_schema": "true",
            "queuey.cassandra.username": "u",
            "queuey.cassandra.password": "p",
        }
    )
    assert cfg.contact_points == ("10.0.0.1", "10.0.0.2")
    assert cfg.replication == {"class": "NetworkTopologyStrategy", "dc1": 3}
    assert (cfg.port, cfg.keyspace, cfg.request_timeout, cfg.create_schema) == (
        19042,
        "q2",
        1.5,
        True,
    )
    assert (cfg.username, cfg.password) == ("u", "p")


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, value",
    [
        ("port", "ninety"),
        ("port", "70000"),
        ("keyspace", "bad-name"),
        ("replication", "SimpleStrategy"),
        ("replication", "{'replication_factor': 1}"),
        ("request_timeout", "0"),
        ("bucket_seconds", "0"),
        ("max_ttl", "-5"),
        ("create_schema", "perhaps"),
        ("username", "only-me"),
    ],
)
def test_bad_settings_name_the_key(key, value):
    with pytest.raises(ConfigurationError) as info:
        parse_settings({f"queuey.cassandra.{key}": value})
    assert info.value.key.startswith("queuey.cassandra.")
    assert info.value.key.endswith(key if key != "username" else "password")


@pytest.mark.unit
def test_the_removed_lwt_work_queue_design_is_refused_by_name():
    assert parse_settings({"queuey.cassandra.work_queue": "owned"}).work_queue == "owned"
    with pytest.raises(ConfigurationError) as info:
        parse_settings({"queuey.cassandra.work_queue": "lwt"})
    assert info.value.key == "queuey.cassandra.work_queue"
    assert "lwt design was removed" in str(info.value)

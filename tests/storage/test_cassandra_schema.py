"""The Cassandra schema: versioned, idempotent migrations and the tables' compaction."""

from __future__ import annotations

import uuid

import pytest

from queuey.storage.cassandra import load_from_config, parse_settings
from queuey.storage.cassandra.schema import (
    LATEST_VERSION,
    MESSAGES_GC_GRACE,
    current_version,
    twcs_window,
    upgrade_schema,
)
from tests.storage.cassandra_support import KEYSPACE, MICROS, raw


@pytest.mark.cassandra
def test_schema_upgrade_is_idempotent_and_versioned(settings, store, clock):
    keyspace = "queuey_schema_" + uuid.uuid4().hex[:10]
    fresh = {
        **settings,
        "queuey.cassandra.keyspace": keyspace,
        "queuey.cassandra.bucket_seconds": "30",
    }
    try:
        first = upgrade_schema(fresh)
        assert first[0].startswith(f"CREATE KEYSPACE IF NOT EXISTS {keyspace}")
        assert any(".messages (" in s for s in first)
        assert upgrade_schema(fresh) == []
        assert current_version(store.session, keyspace) == LATEST_VERSION
        # The bucket width is the keyspace's: a later setting cannot strand old messages.
        for width in ("30", "60"):
            other = load_from_config({**fresh, "queuey.cassandra.bucket_seconds": width}, clock)
            try:
                assert other.bucket_micros == 30 * MICROS
            finally:
                other.close()
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


@pytest.mark.cassandra
def test_message_tables_use_time_window_compaction(store):
    rows = raw(
        store,
        "SELECT table_name, compaction, default_time_to_live, gc_grace_seconds "
        "FROM system_schema.tables WHERE keyspace_name = %s",
        (KEYSPACE,),
    )
    tables = {row[0]: row for row in rows}
    unit, size = twcs_window(60, parse_settings({}).max_ttl)
    for name in ("messages", "message_buckets"):
        _, compaction, default_ttl, gc_grace = tables[name]
        assert compaction["class"].endswith("TimeWindowCompactionStrategy")
        assert (compaction["compaction_window_unit"], compaction["compaction_window_size"]) == (
            unit,
            str(size),
        )
        assert default_ttl == 0
        assert gc_grace == MESSAGES_GC_GRACE
    assert not tables["queues"][1]["class"].endswith("TimeWindowCompactionStrategy")


@pytest.mark.unit
def test_twcs_window_is_a_whole_number_of_buckets():
    assert twcs_window(60, 30 * 86400) == ("DAYS", 1)
    assert twcs_window(60, 3 * 86400) == ("MINUTES", 144)
    unit, size = twcs_window(7, 3600)
    seconds = size * {"MINUTES": 60, "HOURS": 3600, "DAYS": 86400}[unit]
    assert seconds % 7 == 0 and seconds % 60 == 0

"""Settings checked against each other and against the storage backend at start-up.

``queuey.max_ttl`` bounds every ttl the API accepts; a backend that cannot
keep messages that long must stop the service at start-up (naming the key),
not fail the post that uses such a ttl. And a ttl of exactly
``queuey.max_ttl`` must be stored and read back on every backend.
"""

from __future__ import annotations

import datetime

import pytest

from queuey import ids
from queuey.clock import ManualClock
from queuey.errors import ConfigurationError
from queuey.settings import load_settings
from queuey.storage.cassandra import CassandraStorage, parse_settings
from queuey.storage.sqlite import SQLiteStorage

#: Cassandra refuses TTLs above 20 years.
TWENTY_YEARS = 630_720_000
#: The longest ``queuey.cassandra.max_ttl`` the backend accepts (20 years less its slack).
CASSANDRA_LONGEST = TWENTY_YEARS - 2 * 86400 - 2
#: The longest ttl whose expiry still fits SQLite's 64-bit integers for any id timestamp.
SQLITE_LONGEST = (2**63 - 1 - ids.MAX_MICROS) // ids.MICROS


def _round_trip(app, clock, ttl: int) -> None:
    """Create a queue, post one message with ``ttl``, read it back."""
    app.post_json("/queue", {"queue_name": "longest", "ttl": ttl}, headers=app.auth, status=201)
    posted = app.post_json(
        f"/queue/longest?ttl={ttl}", {"kept": "long"}, headers=app.auth, status=201
    ).json["messages"]
    assert len(posted) == 1
    clock.advance(30)  # past any read delay
    read = app.get("/queue/longest", headers=app.auth, status=200).json["messages"]
    assert [(m["message_id"], m["body"]) for m in read] == [
        (posted[0]["message_id"], {"kept": "long"})
    ]


@pytest.mark.unit
def test_a_default_ttl_above_the_max_names_the_key():
    with pytest.raises(ConfigurationError) as info:
        load_settings(
            {"queuey.applications": "apps.ini", "queuey.default_ttl": "61", "queuey.max_ttl": "60"}
        )
    assert info.value.key == "queuey.default_ttl"
    assert "queuey.max_ttl" in str(info.value)


# -- SQLite -------------------------------------------------------------------------


def test_sqlite_refuses_a_max_ttl_it_cannot_keep(make_app, tmp_path, clock):
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    try:
        with pytest.raises(ConfigurationError) as info:
            make_app(store, **{"queuey.max_ttl": str(SQLITE_LONGEST + 1)})
        assert info.value.key == "queuey.max_ttl"
    finally:
        store.close()


def test_sqlite_keeps_a_message_with_the_longest_ttl(make_app, wrap_app, tmp_path, clock):
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    try:
        app = wrap_app(make_app(store, **{"queuey.max_ttl": str(SQLITE_LONGEST)}))
        _round_trip(app, clock, SQLITE_LONGEST)
    finally:
        store.close()


# -- Cassandra ------------------------------------------------------------------------


@pytest.mark.cassandra
def test_cassandra_refuses_a_max_ttl_above_its_own(applications_file, cassandra_settings):
    """Cassandra's 20 years is above the backend's configured maximum (30 days by default)."""
    import queuey

    settings = {
        **cassandra_settings,
        "queuey.applications": str(applications_file),
        "queuey.read_delay": "5",
        "queuey.max_ttl": str(TWENTY_YEARS),
    }
    with pytest.raises(ConfigurationError) as info:
        queuey.main({}, **settings)
    assert info.value.key == "queuey.max_ttl"
    assert "queuey.cassandra.max_ttl" in info.value.message


@pytest.mark.cassandra
def test_cassandra_keeps_a_message_with_the_longest_ttl(make_app, wrap_app, cassandra_settings):
    from queuey.storage.cassandra import load_from_config

    clock = ManualClock()
    longest = {**cassandra_settings, "queuey.cassandra.max_ttl": str(CASSANDRA_LONGEST)}
    store = load_from_config(longest, clock)
    try:
        app = wrap_app(
            make_app(store, **{"queuey.max_ttl": str(CASSANDRA_LONGEST), "queuey.clock": clock})
        )
        _round_trip(app, clock, CASSANDRA_LONGEST)
    finally:
        store.close()


@pytest.mark.unit
def test_cassandra_max_ttl_shrinks_as_its_latest_expiry_nears(make_app):
    """In-process (no node): the expiry date must fit too, not only the ttl.

    Cassandra 5 stores expiries up to 2106-02-07; in 2100 a ten-year ttl no
    longer fits, so a service configured for one must not start.
    """
    year_2100 = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
    clock = ManualClock(ids.to_micros(year_2100))
    ten_years = 10 * 365 * 86400
    config = parse_settings({"queuey.cassandra.max_ttl": str(ten_years)})
    store = CassandraStorage(config, clock)  # never connects
    assert store.max_ttl < 7 * 365 * 86400
    with pytest.raises(ConfigurationError) as info:
        make_app(store, **{"queuey.max_ttl": str(ten_years), "queuey.clock": clock})
    assert info.value.key == "queuey.max_ttl"
    store.close()

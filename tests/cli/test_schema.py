"""The ``queuey`` command: ``schema upgrade`` and ``schema show`` on each backend,
with minimal ini files (an app section, no logging sections)."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from queuey.cli import main
from queuey.storage.cassandra import parse_settings, schema_status
from queuey.storage.cassandra.schema import LATEST_VERSION
from queuey.storage.cassandra.session import build_cluster
from queuey.storage.sqlite.schema import SCHEMA_VERSION


def write_ini(path, settings: dict[str, str]) -> str:
    lines = ["[app:main]", "use = egg:queuey", *(f"{k} = {v}" for k, v in settings.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_schema_upgrade_creates_the_sqlite_file(tmp_path, applications_file, capsys):
    ini = write_ini(
        tmp_path / "development.ini",
        {
            "queuey.storage.backend": "queuey.storage.sqlite",
            "queuey.sqlite.path": "%(here)s/var/queuey.sqlite3",
            "queuey.applications": str(applications_file),
        },
    )
    database = tmp_path / "var" / "queuey.sqlite3"
    assert not database.exists()
    assert main(["schema", "upgrade", "-c", ini]) == 0
    assert (
        f"queuey.storage.sqlite: schema up to date ({SCHEMA_VERSION} step(s) applied)"
        in capsys.readouterr().out
    )
    conn = sqlite3.connect(database)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"queues", "messages", "checkpoints", "state"} <= tables


@pytest.mark.cassandra
def test_schema_upgrade_migrates_a_fresh_cassandra_keyspace(
    tmp_path, cassandra_settings, applications_file, capsys
):
    keyspace = "queuey_cli_" + uuid.uuid4().hex[:12]
    settings = {
        "queuey.storage.backend": "queuey.storage.cassandra",
        "queuey.cassandra.contact_points": cassandra_settings["queuey.cassandra.contact_points"],
        "queuey.cassandra.port": cassandra_settings["queuey.cassandra.port"],
        "queuey.cassandra.keyspace": keyspace,
        "queuey.cassandra.request_timeout": "5",
        "queuey.applications": str(applications_file),
    }
    ini = write_ini(tmp_path / "production.ini", settings)
    try:
        assert main(["schema", "show", "-c", ini]) == 0
        assert f"schema version 0 of {LATEST_VERSION}" in capsys.readouterr().out

        assert main(["schema", "upgrade", "-c", ini]) == 0
        out = capsys.readouterr().out
        assert f"applied: CREATE KEYSPACE IF NOT EXISTS {keyspace}" in out
        assert schema_status(settings) == (LATEST_VERSION, LATEST_VERSION)

        assert main(["schema", "show", "-c", ini]) == 0
        assert f"schema version {LATEST_VERSION} of {LATEST_VERSION}" in capsys.readouterr().out

        assert main(["schema", "upgrade", "-c", ini]) == 0
        out = capsys.readouterr().out
        assert "applied:" not in out
        assert "(0 step(s) applied)" in out
    finally:
        cluster = build_cluster(parse_settings(settings))
        try:
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
        finally:
            cluster.shutdown()

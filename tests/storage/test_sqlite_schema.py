"""SQLite schema versions: a version-1 file (the first release's) is taken to
the latest version by ``queuey schema upgrade`` or by opening it, keeping its data."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from queuey import ids
from queuey.cli import main
from queuey.errors import StorageUnavailable
from queuey.model import ReadQuery
from queuey.storage.sqlite import SQLiteStorage, schema_version, upgrade_schema
from queuey.storage.sqlite.schema import SCHEMA_VERSION, tiebreak

#: The first release's tables, as its files hold them.
V1 = """
CREATE TABLE queues (application TEXT NOT NULL, name TEXT NOT NULL,
    partitions INTEGER NOT NULL, ttl INTEGER NOT NULL, type TEXT NOT NULL,
    consistency TEXT NOT NULL, created INTEGER NOT NULL, incarnation TEXT NOT NULL,
    PRIMARY KEY (application, name)) WITHOUT ROWID;
CREATE TABLE messages (incarnation TEXT NOT NULL, partition INTEGER NOT NULL,
    ts INTEGER NOT NULL, tiebreak BLOB NOT NULL, id BLOB NOT NULL,
    expires INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (incarnation, partition, ts, tiebreak)) WITHOUT ROWID;
CREATE INDEX messages_by_expiry ON messages (expires);
CREATE TABLE checkpoints (application TEXT NOT NULL, queue TEXT NOT NULL,
    consumer TEXT NOT NULL, partition INTEGER NOT NULL, id BLOB NOT NULL,
    PRIMARY KEY (application, queue, consumer, partition)) WITHOUT ROWID;
CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO state VALUES ('schema_version', 1);
"""


@pytest.fixture
def v1_file(tmp_path, clock):
    """A version-1 file holding one queue with one live message."""
    path = tmp_path / "var" / "queuey.sqlite3"
    path.parent.mkdir()
    now = clock.now_micros()
    message_id = ids.IdGenerator().make(now)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")  # as the first release left its files
        conn.executescript(V1)
        conn.execute("INSERT INTO state VALUES ('last_ts', ?)", (now,))
        conn.execute(
            "INSERT INTO queues VALUES ('app', 'old', 2, 600, 'public', 'strong', ?, 'inc1')",
            (now,),
        )
        conn.execute(
            "INSERT INTO messages VALUES ('inc1', 2, ?, ?, ?, ?, '{\"v\": 1}')",
            (now, tiebreak(message_id), message_id.bytes, now + 600 * ids.MICROS),
        )
        conn.commit()
    finally:
        conn.close()
    return path, message_id


def write_ini(path, database, applications_file) -> str:
    path.write_text(
        "[app:main]\nuse = egg:queuey\n"
        "queuey.storage.backend = queuey.storage.sqlite\n"
        f"queuey.sqlite.path = {database}\n"
        f"queuey.applications = {applications_file}\n",
        encoding="utf-8",
    )
    return str(path)


def check_migrated(path, message_id, clock) -> None:
    store = SQLiteStorage(path, clock, sweep_interval=0)
    try:
        queue = store.get_queue("app", "old")
        assert (queue.partitions, queue.ttl, queue.incarnation) == (2, 600, "inc1")
        assert (queue.visibility_timeout, queue.max_attempts, queue.dead_letter_queue) == (
            30,
            0,
            None,
        )
        assert (queue.fifo, dict(queue.attributes)) == (False, {})
        query = ReadQuery(partitions=[1, 2], now_micros=clock.now_micros())
        (message,) = store.read_messages(queue, query)
        assert (message.id, message.body, message.priority, message.attributes) == (
            message_id,
            '{"v": 1}',
            0,
            None,
        )
        now = clock.now_micros()
        got = store.reserve(
            queue,
            "default",
            partitions=[1, 2],
            limit=5,
            visibility_timeout=30,
            now_micros=now,
            settled_micros=now,
        )
        assert [(d.message.id, d.attempts) for d in got.deliveries] == [(message_id, 1)]
    finally:
        store.close()


def test_schema_upgrade_takes_a_version_1_file_to_the_latest(
    tmp_path, v1_file, applications_file, capsys, clock
):
    path, message_id = v1_file
    ini = write_ini(tmp_path / "production.ini", path, applications_file)
    assert main(["schema", "show", "-c", ini]) == 0
    assert f"schema version 1 of {SCHEMA_VERSION}" in capsys.readouterr().out

    assert main(["schema", "upgrade", "-c", ini]) == 0
    out = capsys.readouterr().out
    assert all(f"applied: version {v}:" in out for v in range(2, SCHEMA_VERSION + 1))
    assert f"({SCHEMA_VERSION - 1} step(s) applied)" in out
    assert main(["schema", "show", "-c", ini]) == 0
    assert f"schema version {SCHEMA_VERSION} of {SCHEMA_VERSION}" in capsys.readouterr().out

    assert main(["schema", "upgrade", "-c", ini]) == 0
    assert "(0 step(s) applied)" in capsys.readouterr().out
    check_migrated(path, message_id, clock)


def test_opening_a_version_1_file_migrates_it(v1_file, clock):
    path, message_id = v1_file
    check_migrated(path, message_id, clock)
    assert schema_version({"queuey.sqlite.path": str(path)}) == (
        f"{SCHEMA_VERSION} of {SCHEMA_VERSION}"
    )


def test_show_does_not_create_a_file(tmp_path):
    settings = {"queuey.sqlite.path": str(tmp_path / "none.sqlite3")}
    assert schema_version(settings) == f"0 of {SCHEMA_VERSION}"
    assert not (tmp_path / "none.sqlite3").exists()
    assert len(upgrade_schema(settings)) == SCHEMA_VERSION
    assert upgrade_schema(settings) == []


def test_a_newer_file_is_refused(tmp_path, clock):
    path = tmp_path / "future.sqlite3"
    SQLiteStorage(path, clock, sweep_interval=0).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE state SET value = 99 WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StorageUnavailable, match="schema version 99 is newer"):
        SQLiteStorage(path, clock, sweep_interval=0)


def open_together(path, clock, count: int = 4) -> None:
    """Open ``count`` storages on ``path`` at once, as API processes starting
    together would; every one must open."""
    barrier = threading.Barrier(count)
    opened: list[SQLiteStorage] = []
    errors: list[Exception] = []

    def open_it() -> None:
        barrier.wait()
        try:
            opened.append(SQLiteStorage(path, clock, sweep_interval=0))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for store in opened:
        store.close()
    assert errors == [] and len(opened) == count


def test_storages_opening_an_old_file_at_once_migrate_it_once(v1_file, clock):
    path, message_id = v1_file
    open_together(path, clock)
    check_migrated(path, message_id, clock)


def test_storages_creating_a_new_file_at_once_all_open(tmp_path, clock):
    """The switch to WAL mode of a new file is retried, not failed, when another
    opener holds the file at that moment."""
    for attempt in range(10):
        path = tmp_path / f"new-{attempt}.sqlite3"
        open_together(path, clock, count=6)
        assert schema_version({"queuey.sqlite.path": str(path)}) == (
            f"{SCHEMA_VERSION} of {SCHEMA_VERSION}"
        )


def test_queuey_sqlite_path_in_the_environment_names_the_file(tmp_path, monkeypatch):
    """As every key is overridden by its environment variable, named in the ini or not."""
    chosen = tmp_path / "from-env.sqlite3"
    monkeypatch.setenv("QUEUEY_SQLITE_PATH", str(chosen))
    upgrade_schema({"queuey.storage.backend": "queuey.storage.sqlite"})
    assert chosen.exists()
    assert schema_version({}) == f"{SCHEMA_VERSION} of {SCHEMA_VERSION}"

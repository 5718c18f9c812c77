import pytest

from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.storage.sqlite import SQLiteStorage
from queuey.storage.testing import StorageSuite


class TestSQLiteContract(StorageSuite):
    @pytest.fixture
    def storage(self, tmp_path, clock):
        store = SQLiteStorage(tmp_path / "queuey.sqlite3", clock)
        yield store
        store.close()


def test_messages_survive_reopening(tmp_path, clock):
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    stored = store.put_messages(queue, [NewMessage('{"x": 1}', 1, 60)])
    store.close()
    reopened = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    got = reopened.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert [m.id for m in got] == [stored[0].id]
    assert reopened._db.reader().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reopened.close()


def test_two_processes_sharing_a_file_keep_ids_increasing(tmp_path, clock):
    """Two storage objects on one file (as two API processes would be) never go backwards."""
    first = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    second = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    queue = first.create_queue(QueueMeta(application="a", name="q"))
    stamps = []
    for i in range(50):
        store = first if i % 2 else second
        stamps.append(store.put_messages(queue, [NewMessage("{}", 1, 60)])[0].timestamp)
    assert stamps == sorted(stamps) and len(set(stamps)) == 50
    first.close()
    second.close()


def test_sweep_removes_expired_rows(tmp_path, clock):
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock)
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    store.put_messages(queue, [NewMessage("{}", 1, 1), NewMessage("{}", 1, 100)])
    clock.advance(2)
    assert store.sweep_expired() == 1
    store.close()

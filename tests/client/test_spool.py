"""The producer's spool against the real app: durable before accepted, bounded,
resent after outages with the same ``dedup_id`` s, replayed after a restart,
torn tails dropped and counted, compacted, refused messages moved aside."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter

import pytest

from queuey.cli import main as cli_main
from queuey.client import QueueyClient, Spool, SpoolFull, SpoolLocked, spoolfile
from queuey.client import spool as spool_module
from tests.support import wait_until


class Waits:
    """The sender's ``pause``: records each backoff and waits a sliver of it."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.seen.append(seconds)
        time.sleep(min(seconds, 0.01))


def status(*argv: str) -> int:
    """``queuey spool status ARGV``; the CLI quiets the client's logger, which
    is put back for the tests that follow."""
    logger = logging.getLogger("queuey.client")
    level = logger.level
    try:
        return cli_main(["spool", "status", *argv])
    finally:
        logger.setLevel(level)


def keys_of(client: QueueyClient, queue: str) -> list[int]:
    return [m.body["n"] for m in client.iter_messages(queue, since_timestamp="0")]


def test_a_post_returns_only_after_its_record_is_synced_and_syncs_are_shared(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fdatasync

    def slow_sync(fd: int) -> None:
        time.sleep(0.005)
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(spool_module.os, "fdatasync", slow_sync)
    path = tmp_path / "producer.spool"
    spool = Spool(None, path, start=False)
    spool.post("q", {"n": 0})
    assert synced and synced[-1] == path.stat().st_size  # the sync covered the record
    assert len(spoolfile.scan(path).pending) == 1

    def poster(start: int) -> None:
        for n in range(start, start + 50):
            spool.post("q", {"n": n})

    threads = [threading.Thread(target=poster, args=(1 + 50 * i,)) for i in range(8)]
    before = len(synced)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    syncs = len(synced) - before
    print(f"400 posts from 8 threads: {syncs} fsyncs")
    assert syncs < 200
    assert len(spoolfile.scan(path).pending) == 401
    spool.close()


def test_a_full_spool_refuses_a_post_and_drops_nothing(tmp_path, client):
    client.create_queue("full", partitions=1)
    spool = Spool(client, tmp_path / "s", max_bytes=2000, start=False)
    accepted = 0
    with pytest.raises(SpoolFull) as refused:
        for n in range(100):
            spool.post("full", {"n": n, "pad": "x" * 50})
            accepted += 1
    assert 0 < accepted < 100 and refused.value.error_msg == {"spool": "full"}
    assert spool.stats().spooled == accepted
    spool.start()
    assert spool.flush(10)
    spool.post("full", {"n": accepted, "pad": ""})  # room again
    assert spool.flush(10)
    spool.close()
    assert keys_of(client, "full") == list(range(accepted + 1))


def test_the_sender_backs_off_with_a_cap_while_the_service_fails_and_resumes_in_order(
    tmp_path, client, faulty_server
):
    client.create_queue("outage", partitions=3)
    injector = faulty_server.injector
    injector.fail("POST", "/queue/outage/batch", after=True)  # stored, answer lost
    poster = QueueyClient(
        faulty_server.url, faulty_server.application, faulty_server.key, retries=0
    )
    waits = Waits()
    spool = Spool(
        poster, tmp_path / "s", backoff=0.05, max_backoff=0.4, batch_messages=7, pause=waits
    )
    for n in range(30):
        spool.post("outage", {"n": n}, partition_key="one-key")
    wait_until(lambda: len(waits.seen) >= 12, what="a dozen failed sends")
    assert spool.stats().sent == 0 and "503" in spool.stats().last_error
    injector.heal()
    assert spool.flush(15)
    stats = spool.stats()
    spool.close()
    stored = keys_of(client, "outage")
    print(f"failed sends {len(waits.seen)}, longest wait {max(waits.seen):.2f}s, {stats}")
    assert max(waits.seen) <= 0.4
    assert stored == list(range(30))  # stored once each, in spool order
    assert stats.sent == 30 and stats.spooled == 0 and stats.last_error is None


def test_a_reopened_spool_replays_what_was_not_acknowledged(tmp_path, client):
    client.create_queue("replay", partitions=2)
    path = tmp_path / "s"
    first = Spool(client, path, start=False)
    for n in range(40):
        first.post("replay", {"n": n}, partition=1 + n % 2)
    with pytest.raises(SpoolLocked):
        Spool(client, path)
    first.close()  # like a producer that died: nothing sent
    again = Spool(client, path, linger=0)
    assert again.replayed == 40
    assert again.flush(10)
    again.post("replay", {"n": 40}, partition=1)
    assert again.flush(10)
    again.close()
    stored = keys_of(client, "replay")
    assert sorted(stored) == list(range(41))
    image = spoolfile.scan(path)
    assert image.sent == 41 and not image.pending


def test_a_torn_last_record_is_dropped_kept_aside_and_counted(tmp_path, client, capsys):
    client.create_queue("torn", partitions=1)
    path = tmp_path / "s"
    spool = Spool(client, path, start=False)
    for n in range(3):
        spool.post("torn", {"n": n})
    spool.close()
    whole = path.read_bytes()
    record = spoolfile.message_record(99, 0.0, "torn", {"body": {"n": 99}})
    path.write_bytes(whole + record[: len(record) // 2])  # a write cut by a crash

    assert status(str(path), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spooled"] == 3 and shown["tail_bytes"] == len(record) // 2
    assert path.read_bytes() == whole + record[: len(record) // 2]  # status wrote nothing

    spool = Spool(client, path, linger=0)
    assert spool.replayed == 3 and spool.stats().torn == 1
    assert (tmp_path / "s.torn").read_bytes() == record[: len(record) // 2]
    assert spool.flush(10)
    spool.close()
    assert keys_of(client, "torn") == [0, 1, 2]
    assert spoolfile.scan(path).torn == 1


def test_acknowledged_records_are_compacted_away_and_sequence_numbers_go_on(
    tmp_path, client, monkeypatch
):
    monkeypatch.setattr(spool_module, "COMPACT_MIN", 0)
    client.create_queue("compact", partitions=1)
    path = tmp_path / "s"
    spool = Spool(client, path, linger=0, start=False)
    ids = [spool.post("compact", {"n": n, "pad": "y" * 200}) for n in range(50)]
    grown = path.stat().st_size
    spool.start()
    assert spool.flush(10)
    spool.close()
    assert path.stat().st_size < grown / 10
    image = spoolfile.scan(path)
    assert image.sent == 50 and not image.pending and image.next_seq == 50
    again = Spool(client, path, linger=0)
    ids.append(again.post("compact", {"n": 50, "pad": ""}))
    assert again.flush(10)
    again.close()
    assert len(set(ids)) == 51 and ids[-1].endswith("-50")
    assert keys_of(client, "compact") == list(range(51))


def test_messages_refused_for_good_are_moved_aside_and_the_rest_goes_on(tmp_path, client):
    client.create_queue("picky", partitions=2)
    refused = []
    spool = Spool(client, tmp_path / "s", on_reject=refused.append, start=False)
    for n in range(10):
        spool.post("picky", {"n": n}, partition=5 if n == 4 else 1)  # 5 > 2 partitions
    spool.post("missing", {"n": 100})
    with pytest.raises(ValueError, match="priority"):
        spool.post("picky", {"n": 1}, priority=10)
    with pytest.raises(ValueError, match="body"):
        spool.post("picky", ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue"):
        spool.post("no spaces", {"n": 1})
    spool.start()
    assert spool.flush(10)
    stats = spool.stats()
    spool.close()
    assert keys_of(client, "picky") == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert stats.rejected == 2 and stats.sent == 9
    assert Counter(r.status for r in refused) == {400: 1, 404: 1}
    lines = [json.loads(x) for x in (tmp_path / "s.rejected").read_text().splitlines()]
    aside = sorted((x["queue"], x["entry"]["body"]["n"], x["status"]) for x in lines)
    assert aside == [("missing", 100, 404), ("picky", 4, 400)]


def test_stats_and_the_status_command_tell_the_same_figures(tmp_path, client, capsys, clock):
    client.create_queue("seen", partitions=1)
    path = tmp_path / "s"
    spool = Spool(client, path, linger=0, clock=clock)
    for n in range(5):
        spool.post("seen", {"n": n})
    assert spool.flush(10)
    spool.sender.stop()
    spool.post("seen", {"n": 5})
    clock.advance(42)
    stats = spool.stats()
    assert (stats.spooled, stats.sent, stats.rejected, stats.torn) == (1, 5, 0, 0)
    assert stats.oldest_age == 42 and stats.bytes > 0 and stats.send_rate > 0
    assert status(str(path), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: shown[k] for k in ("spooled", "bytes", "sent", "rejected", "torn")} == {
        "spooled": 1,
        "bytes": stats.bytes,
        "sent": 5,
        "rejected": 0,
        "torn": 0,
    }
    assert shown["send_rate"] > 0
    assert status(str(path)) == 0
    assert "spooled" in capsys.readouterr().out
    spool.close()
    assert status(str(tmp_path / "nothing")) == 1

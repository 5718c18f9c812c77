"""``queuey stats``, ``peek`` and ``redrive`` against a live Queuey, and how every
remote command fails: one line on stderr and a non-zero status, no traceback."""

from __future__ import annotations

import json

from queuey.client.models import OutgoingMessage
from tests.support import free_port


def test_stats_lists_every_queue_with_its_counts(queuey, client):
    client.create_queue("orders", partitions=2)
    client.create_queue("empty")
    client.post_batch("orders", [{"n": n} for n in range(3)])
    (lease,) = client.reserve("orders")

    result = queuey("stats")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == [
        "queue",
        "messages",
        "in",
        "flight",
        "delayed",
        "dead-lettered",
        "oldest",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["orders"][:4] == ["3", "1", "0", "0"]
    assert rows["empty"] == ["0", "0", "0", "0", "-"]

    result = queuey("stats", "--json", "orders")
    assert result.code == 0, result.err
    (figures,) = json.loads(result.out)
    assert figures["queue"] == "orders"
    assert (figures["messages"], figures["in_flight"], figures["dead_lettered"]) == (3, 1, 0)
    assert 0 <= figures["oldest_age"] < 60
    assert lease.body["n"] in {0, 1, 2}


def test_peek_shows_the_newest_first_and_changes_nothing(queuey, client):
    client.create_queue("events", partitions=2)
    for n in range(5):
        client.post_batch(
            "events",
            [OutgoingMessage({"n": n, "text": "déjà"}, partition=1 + n % 2, attributes={"k": "v"})],
        )
    before = client.stats("events")

    result = queuey("peek", "events", "-n", "2")
    assert result.code == 0, result.err
    blocks = result.out.strip().split("\n\n")
    assert len(blocks) == 2
    heads = [block.splitlines()[0] for block in blocks]
    assert heads[0].startswith("1:") and '"k": "v"' in heads[0]
    assert json.loads(blocks[0].split("\n", 1)[1]) == {"n": 4, "text": "déjà"}
    assert '\n  "n": 4,' in blocks[0]  # pretty-printed
    assert json.loads(blocks[1].split("\n", 1)[1])["n"] == 3

    result = queuey("peek", "events", "--partition", "2")
    assert [json.loads(b.split("\n", 1)[1])["n"] for b in result.out.strip().split("\n\n")] == [
        3,
        1,
    ]
    assert client.stats("events") == before
    assert len(client.reserve("events", limit=10)) == 5


def test_redrive_moves_dead_letters_back(queuey, client):
    client.create_queue("jobs", max_attempts=1, visibility_timeout=30)
    client.post_batch("jobs", [{"n": n} for n in range(3)])
    leases = client.reserve("jobs", limit=3)
    assert client.release("jobs", [m.receipt for m in leases]).dead_lettered == 3
    assert client.reserve("jobs", limit=3) == []
    assert queuey("stats", "--json", "jobs-dead").out.count('"messages": 3') == 1

    result = queuey("redrive", "jobs", "--limit", "2")
    assert result.code == 0, result.err
    assert result.out.startswith("2 dead letter(s) moved back from jobs-dead")
    result = queuey("redrive", "jobs")
    assert result.out.startswith("1 dead letter(s) moved back from jobs-dead")
    assert sorted(m.body["n"] for m in client.reserve("jobs", limit=10)) == [0, 1, 2]
    assert queuey("redrive", "jobs").out.startswith("0 dead letter(s)")


def test_a_wrong_key_is_one_line_and_a_failure(queuey, client):
    client.create_queue("orders", type="private")  # a public queue is readable without a key
    for argv in (
        ["stats"],
        ["peek", "orders"],
        ["export", "orders", "-o", "-"],
        ["redrive", "orders"],
    ):
        result = queuey(*argv, key="not-the-key")
        assert result.code == 1, argv
        assert result.err.startswith(f"queuey {argv[0]}: not authorized (HTTP 401")
        assert result.err.count("\n") == 1
        assert "Traceback" not in result.err


def test_errors_of_the_service_and_the_network_are_one_line(queuey, monkeypatch):
    result = queuey("peek", "missing")
    assert result.code == 1
    assert result.err.startswith("queuey peek: GET /queue/missing: HTTP 404")
    assert result.err.count("\n") == 1

    result = queuey("peek", "orders", "--url", f"http://127.0.0.1:{free_port()}")
    assert result.code == 1
    assert result.err.startswith("queuey peek: cannot connect to http://127.0.0.1:")
    assert result.err.count("\n") == 1

    monkeypatch.delenv("QUEUEY_APPLICATION")
    monkeypatch.setattr("os.environ", {})
    from queuey.cli import main

    assert main(["stats"]) == 2


def test_the_key_may_come_from_a_file(queuey, client, server, tmp_path):
    client.create_queue("orders")
    key_file = tmp_path / "key"
    key_file.write_text(server.key + "\n", encoding="utf-8")
    result = queuey("stats", "orders", "--key-file", str(key_file), key="wrong")
    assert result.code == 0, result.err
    result = queuey("stats", "--key-file", str(tmp_path / "absent"))
    assert result.code == 1
    assert "cannot read the key file" in result.err

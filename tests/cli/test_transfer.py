"""``queuey export`` and ``queuey import`` against a live Queuey: round trips,
an export resumed after a cut, an import re-run after a crash, bad lines."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from queuey.cli.transfer import ImportProgress
from queuey.client.errors import Unavailable
from queuey.client.http import QueueyClient
from queuey.client.models import OutgoingMessage


def fill(client: QueueyClient, queue: str, count: int, partitions: int) -> None:
    """``count`` messages spread over the partitions, with attributes on some."""
    for start in range(0, count, 1000):
        client.post_batch(
            queue,
            [
                OutgoingMessage(
                    {"n": n, "text": "zürich ✓", "nested": {"list": [n, None, True]}},
                    partition=1 + n % partitions,
                    attributes={"kind": f"k{n % 3}"} if n % 2 else None,
                )
                for n in range(start, min(count, start + 1000))
            ],
        )


def contents(client: QueueyClient, queue: str) -> dict[int, list]:
    """Per partition, in id order: (body, attributes)."""
    found = defaultdict(list)
    for m in client.iter_messages(queue):
        found[m.partition].append((m.body, m.attributes))
    for partition in found:
        found[partition].sort(key=lambda item: item[0]["n"])
    return dict(found)


def ids_in_order(client: QueueyClient, queue: str, partitions: int) -> list[str]:
    return [
        m.message_id
        for p in range(1, partitions + 1)
        for m in client.iter_messages(queue, partitions=[p])
    ]


def lines_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def round_trip(queuey, client, tmp_path, count=2500, partitions=3):
    client.create_queue("source", partitions=partitions)
    client.create_queue("copy", partitions=partitions)
    fill(client, "source", count, partitions)
    exported = tmp_path / "source.jsonl"

    result = queuey("export", "source", "-o", str(exported))
    assert result.code == 0, result.err
    assert f"exported {count} message(s) of source" in result.err
    lines = lines_of(exported)
    assert len(lines) == count
    assert lines[0].keys() == {"id", "partition", "timestamp", "priority", "attributes", "body"}
    assert [line["id"] for line in lines] == ids_in_order(client, "source", partitions)

    result = queuey("import", "copy", "-i", str(exported))
    assert result.code == 0, result.err
    assert f"imported {count} message(s) into copy" in result.err
    assert contents(client, "copy") == contents(client, "source")
    # Each partition keeps its order.
    for p in range(1, partitions + 1):
        copied = [m.body["n"] for m in client.iter_messages("copy", partitions=[p])]
        assert copied == sorted(copied)
    return exported


def test_export_then_import_gives_the_same_messages(queuey, client, tmp_path):
    exported = round_trip(queuey, client, tmp_path)
    # Imported again at once: the dedup window drops every repeat.
    (tmp_path / "source.jsonl.import-progress").unlink()
    result = queuey("import", "copy", "-i", str(exported), "-q")
    assert result.code == 0, result.err
    assert client.stats("copy").messages == 2500


def test_export_keeps_priorities(queuey, client, tmp_path):
    client.create_queue("source")
    client.post_batch("source", [OutgoingMessage({"n": 1}, priority=7)])
    exported = tmp_path / "out.jsonl"
    assert queuey("export", "source", "-o", str(exported)).code == 0
    assert lines_of(exported)[0]["priority"] == 7


def test_export_to_stdout(queuey, client):
    client.create_queue("source", partitions=2)
    fill(client, "source", 5, 2)
    result = queuey("export", "source", "-o", "-")
    assert result.code == 0, result.err
    assert sorted(json.loads(line)["body"]["n"] for line in result.out.splitlines()) == list(
        range(5)
    )


@pytest.mark.parametrize("cut", ["mid-line", "line-end", "first-line", "empty"])
def test_a_resumed_export_has_every_message_once(queuey, client, tmp_path, cut):
    client.create_queue("source", partitions=3)
    fill(client, "source", 2500, 3)
    full = tmp_path / "full.jsonl"
    assert queuey("export", "source", "-o", str(full), "-q").code == 0
    text = full.read_bytes()
    # Cut inside partition 2 (past a page boundary of partition 1).
    boundary = [i for i, c in enumerate(text) if c == ord("\n")][1200]
    at = {"mid-line": boundary + 37, "line-end": boundary + 1, "first-line": 20, "empty": 0}[cut]
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(text[:at])

    result = queuey("export", "source", "-o", str(partial), "--resume", "-q")
    assert result.code == 0, result.err
    assert partial.read_bytes() == text


def test_resume_without_a_file_starts_one(queuey, client, tmp_path):
    client.create_queue("source")
    fill(client, "source", 3, 1)
    out = tmp_path / "new.jsonl"
    assert queuey("export", "source", "-o", str(out), "--resume", "-q").code == 0
    assert len(lines_of(out)) == 3
    result = queuey("export", "source", "-o", "-", "--resume")
    assert result.code == 2
    assert "--resume needs an output file" in result.err


def test_an_import_rerun_after_a_crash_duplicates_nothing(queuey, client, tmp_path, monkeypatch):
    client.create_queue("source", partitions=2)
    client.create_queue("copy", partitions=2)
    fill(client, "source", 1000, 2)
    exported = tmp_path / "source.jsonl"
    assert queuey("export", "source", "-o", str(exported), "-q").code == 0
    progress = ImportProgress.path_for(exported)

    # Crash 1: the service stops answering after two batches.
    real_post = QueueyClient.post_batch
    calls = 0

    def failing_post(self, queue, messages):
        nonlocal calls
        calls += 1
        if calls > 2:
            raise Unavailable("POST /queue/copy/batch: cannot connect to x (refused)")
        return real_post(self, queue, messages)

    monkeypatch.setattr(QueueyClient, "post_batch", failing_post)
    result = queuey("import", "copy", "-i", str(exported), "--batch-size", "150", "-q")
    assert result.code == 1
    assert "rerun the same command to go on from line 301" in result.err
    assert ImportProgress.load(progress).line == 300
    assert client.stats("copy").messages == 300

    # Crash 2: a batch is stored, then the process dies before recording it.
    monkeypatch.setattr(QueueyClient, "post_batch", real_post)
    real_save = ImportProgress.save

    def dying_save(self, path):
        if self.imported > 600:
            raise KeyboardInterrupt
        real_save(self, path)

    monkeypatch.setattr(ImportProgress, "save", dying_save)
    result = queuey("import", "copy", "-i", str(exported), "--batch-size", "150", "-q")
    assert result.code == 130
    assert client.stats("copy").messages == 750  # stored, recorded up to 600
    assert ImportProgress.load(progress).line == 600

    monkeypatch.setattr(ImportProgress, "save", real_save)
    result = queuey("import", "copy", "-i", str(exported), "--batch-size", "150")
    assert result.code == 0, result.err
    assert contents(client, "copy") == contents(client, "source")
    assert client.stats("copy").messages == 1000

    result = queuey("import", "copy", "-i", str(exported))
    assert result.code == 0
    assert "imported into copy already" in result.err
    assert client.stats("copy").messages == 1000


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
        (b"\xff\xfe", "not JSON in UTF-8"),
        ('["a"]', "not a JSON object"),
        ('{"body": 3}', "body must be a JSON object"),
        ('{"body": {}, "partition": 0}', "partition must be a whole number from 1 to 999"),
        ('{"body": {}, "attributes": {"a": 1}}', "attributes must be an object of strings"),
    ],
)
def test_a_bad_line_is_named_and_nothing_is_posted(queuey, client, tmp_path, line, why):
    client.create_queue("copy")
    source = tmp_path / "in.jsonl"
    good = json.dumps({"body": {"n": 1}})
    bad = line if isinstance(line, bytes) else line.encode()
    source.write_bytes(f"{good}\n{good}\n\n".encode() + bad + f"\n{good}\n".encode())
    result = queuey("import", "copy", "-i", str(source))
    assert result.code == 1
    assert result.err == f"queuey import: {source} line 4: {why}\n"
    assert client.stats("copy").messages == 0


def test_a_line_the_service_refuses_is_named(queuey, client, tmp_path):
    client.create_queue("copy", partitions=2)
    source = tmp_path / "in.jsonl"
    lines = [{"body": {"n": n}, "partition": 3 if n == 4 else 1} for n in range(6)]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = queuey("import", "copy", "-i", str(source), "--batch-size", "3")
    assert result.code == 1
    assert result.err.startswith(f"queuey import: {source} line 5: partition: ")
    assert result.err.count("\n") == 1
    assert ImportProgress.load(ImportProgress.path_for(source)).line == 3

    # Re-run: it goes on from line 4 (lines without ids have no dedup_id to
    # make a --restart safe).
    result = queuey("import", "copy", "-i", str(source), "--ignore-partitions")
    assert result.code == 0, result.err
    assert client.stats("copy").messages == 6


@pytest.mark.cassandra
def test_round_trip_on_cassandra(make_live_server, test_apps, monkeypatch, capsys, tmp_path):
    from queuey.cli import main
    from tests.support import wait_until

    server = make_live_server("cassandra")
    monkeypatch.setenv("QUEUEY_URL", server.url)
    monkeypatch.setenv("QUEUEY_APPLICATION", server.application)
    monkeypatch.setenv("QUEUEY_KEY", server.key)
    with QueueyClient(server.url, server.application, server.key) as client:
        client.create_queue("source", partitions=3)
        client.create_queue("copy", partitions=3)
        fill(client, "source", 1200, 3)
        # Reads see a message once the read delay (6 s here) is past.
        wait_until(lambda: len(list(client.iter_messages("source"))) == 1200, timeout=30)
        exported = tmp_path / "source.jsonl"
        assert main(["export", "source", "-o", str(exported), "-q"]) == 0
        assert len(lines_of(exported)) == 1200
        assert main(["import", "copy", "-i", str(exported), "-q"]) == 0, capsys.readouterr().err
        wait_until(lambda: len(list(client.iter_messages("copy"))) == 1200, timeout=30)
        assert contents(client, "copy") == contents(client, "source")

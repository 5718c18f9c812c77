"""``spark.readStream.format("queuey")``: offsets, admission control, restarts.

The end-to-end tests run real streaming queries on local Spark with a
checkpoint directory and a sink that is idempotent per batch id (each batch
overwrites its own file), stop and restart them while the queue grows, and
check that the union of everything delivered is every message exactly once.
The reader itself is driven without Spark in ``test_stream_reader.py`` and
``test_stream_admission.py``.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from pathlib import Path

import pytest

from queuey.clock import SYSTEM_CLOCK
from queuey.model import NewMessage
from queuey.storage import load_backend
from tests.spark.conftest import needs_available_now
from tests.support import wait_until

pytestmark = pytest.mark.spark


class BatchFiles:
    """A foreachBatch sink writing ``batch-<id>.json`` (overwritten on replay)."""

    def __init__(self, directory: Path, fail_once_on: int | None = None) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fail_once_on = fail_once_on
        self.calls: list[int] = []

    def __call__(self, frame, batch_id: int) -> None:
        self.calls.append(batch_id)
        rows = [r.asDict() for r in frame.select("message_id", "partition").collect()]
        if batch_id == self.fail_once_on:
            self.fail_once_on = None
            raise RuntimeError(f"sink failure in batch {batch_id}")
        path = self.directory / f"batch-{batch_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(path)

    def delivered(self) -> list[str]:
        out = []
        for path in sorted(self.directory.glob("batch-*.json")):
            out += [row["message_id"] for row in json.loads(path.read_text())]
        return out

    def batch_sizes(self) -> dict[int, int]:
        return {
            int(p.stem.split("-")[1]): len(json.loads(p.read_text()))
            for p in self.directory.glob("batch-*.json")
        }


def stream(spark, target, queue: str, **options):
    reader = spark.readStream.format("queuey").options(**target.options()).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_available_now(frame, checkpoint: Path, sink: BatchFiles):
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the availableNow query did not stop"
    return query


def input_rows(query) -> list[int]:
    """Rows of each micro-batch that read anything, in batch order."""
    progress = sorted(query.recentProgress, key=lambda p: p["batchId"])
    return [p["numInputRows"] for p in progress if p["numInputRows"]]


@needs_available_now
def test_exactly_once_across_restarts(spark, target, tmp_path):
    meta = target.queue(partitions=4)
    posted = target.post_many(meta, 50)
    sink = BatchFiles(tmp_path / "out")
    checkpoint = tmp_path / "checkpoint"
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=30)

    # availableNow drains the backlog in micro-batches of at most 30 (PySpark 4.2+).
    assert input_rows(run_available_now(frame, checkpoint, sink)) == [30, 20]
    assert len(sink.delivered()) == 50

    target.clock.advance(1)
    posted += target.post_many(meta, 41)
    assert input_rows(run_available_now(frame, checkpoint, sink)) == [30, 11]
    assert input_rows(run_available_now(frame, checkpoint, sink)) == []  # nothing new

    delivered = sink.delivered()
    assert len(delivered) == len(set(delivered)) == 91
    assert set(delivered) == {m.id.hex for m in posted}
    assert max(sink.batch_sizes().values()) <= 30


@needs_available_now
def test_a_failed_batch_is_replayed_with_the_same_messages(spark, target, tmp_path):
    meta = target.queue(partitions=3)
    posted = target.post_many(meta, 40)
    checkpoint = tmp_path / "checkpoint"
    sink = BatchFiles(tmp_path / "out", fail_once_on=1)
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=25)

    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="sink failure in batch 1"):
        query.awaitTermination(120)
    assert sink.batch_sizes() == {0: 25}
    # Batch 1's offsets are in the checkpoint but it never committed. More
    # messages arrive; the restarted query first replays batch 1 exactly.
    target.clock.advance(1)
    posted += target.post_many(meta, 30)
    assert input_rows(run_available_now(frame, checkpoint, sink)) == [15, 25, 5]

    delivered = sink.delivered()
    assert len(delivered) == len(set(delivered)) == 70
    assert set(delivered) == {m.id.hex for m in posted}
    assert sink.calls.count(1) == 2  # failed once, replayed once
    assert sink.batch_sizes()[1] == 15


@pytest.mark.slow
def test_processing_time_query_follows_concurrent_writers(spark, target, tmp_path):
    """Three writers, each with its own backend instance and id generator (as three
    API nodes would be), post on the real clock while the query runs; the query
    is stopped and restarted mid-way. Every message arrives exactly once."""
    meta = target.queue(partitions=3)
    sink = BatchFiles(tmp_path / "out")
    checkpoint = tmp_path / "checkpoint"
    frame = stream(spark, target, meta.name, maxMessagesPerTrigger=40)
    posted: list[str] = []
    lock = threading.Lock()

    def writer(seconds: float) -> None:
        storage = load_backend(
            target.settings["queuey.storage.backend"], target.settings, SYSTEM_CLOCK
        )
        try:
            deadline = time.monotonic() + seconds
            i = 0
            while time.monotonic() < deadline:
                batch = [
                    NewMessage(json.dumps({"i": i + k}), (i + k) % 3 + 1, 3600) for k in range(5)
                ]
                stored = storage.put_messages(meta, batch)
                with lock:
                    posted.extend(m.id.hex for m in stored)
                i += 5
                time.sleep(0.02)
        finally:
            storage.close()

    def write_concurrently(seconds: float) -> None:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(writer, seconds) for _ in range(3)]:
                future.result()

    def start():
        return (
            frame.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    query = start()
    try:
        write_concurrently(3.0)
        wait_until(lambda: len(sink.delivered()) >= len(posted) // 2, 120, "half the messages")
    finally:
        query.stop()
    write_concurrently(1.0)
    query = start()
    try:
        wait_until(lambda: len(sink.delivered()) >= len(posted), 120, "every message")
    finally:
        query.stop()
    # From where the checkpoint stands nothing new arrives; a batch the stop cut
    # off before its commit is replayed into its own file.
    run_available_now(frame, checkpoint, sink)
    delivered = sink.delivered()
    assert len(posted) > 100
    assert len(delivered) == len(set(delivered))
    assert set(delivered) == set(posted)
    assert max(sink.batch_sizes().values()) <= 40

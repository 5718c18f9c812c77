"""Spark read benchmark: a queue read into a DataFrame versus a plain driver loop.

    python bench/spark.py [--backend cassandra|sqlite] [--messages 200000] [--partitions 16]

Fills a queue (on the harness's Cassandra node by default) with ``--messages``
messages of about 200 bytes over ``--partitions`` partitions, then measures

* ``spark``: ``spark.read.format("queuey")...load().count()`` on ``local[2]``
  (every row is read from the store by the executors and handed to Spark);
* ``spark_rdd``: the same through ``queuey.spark.queue_rdd(...).count()``
  (rows stay in the Python workers);
* ``driver_loop``: one Python process paging through every partition with
  ``Storage.read_messages`` (1000 rows a page), the way a script without Spark
  would read the same rows.

Each is run ``--runs`` times; the best run counts (the first Spark run also
pays for starting its Python workers and their connections, reported as
``spark_first_run_s``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queuey.clock import ManualClock  # noqa: E402
from queuey.spark import StorageConnection, local_session, queue_rdd  # noqa: E402
from queuey.storage import NewMessage, QueueMeta, ReadQuery, load_backend  # noqa: E402

APPLICATION = "bench"
BODY = {
    "signature": "js::RunScript | EnterBaseline",
    "product": "Firefox",
    "version": "146.0",
    "build": "20261121000000",
    "platform": "Windows NT 10.0",
}


def store_settings(backend: str, workdir: Path) -> dict[str, str]:
    if backend == "sqlite":
        return {
            "queuey.storage.backend": "queuey.storage.sqlite",
            "queuey.sqlite.path": str(workdir / "bench.sqlite3"),
        }
    from queuey.harness import cassandra

    cluster = cassandra.ensure_running()
    return {
        "queuey.storage.backend": "queuey.storage.cassandra",
        "queuey.cassandra.contact_points": ",".join(cluster.contact_points),
        "queuey.cassandra.port": str(cluster.port),
        "queuey.cassandra.keyspace": "queuey_bench_spark",
        "queuey.cassandra.create_schema": "true",
        "queuey.cassandra.request_timeout": "10",
    }


def fill(storage, meta: QueueMeta, count: int, batch: int = 200, threads: int = 8) -> float:
    """Post ``count`` messages, each batch into one partition; returns seconds taken."""

    def post(start: int) -> None:
        partition = (start // batch) % meta.partitions + 1
        messages = [
            NewMessage(json.dumps({**BODY, "n": i}), partition, meta.ttl)
            for i in range(start, min(count, start + batch))
        ]
        storage.put_messages(meta, messages)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(post, s) for s in range(0, count, batch)]:
            future.result()
    return time.perf_counter() - started


def driver_loop(storage, meta: QueueMeta) -> int:
    """Every message of every partition, one page after another, in this process."""
    now = time.time_ns() // 1000
    total = 0
    for partition in range(1, meta.partitions + 1):
        after = None
        while True:
            page = storage.read_messages(
                meta,
                ReadQuery(
                    partitions=[partition],
                    now_micros=now,
                    limit=1000,
                    order="ascending",
                    after_id=after,
                ),
            )
            total += len(page)
            if len(page) < 1000:
                break
            after = page[-1].id
    return total


def timed(fn, runs: int) -> tuple[list[float], int]:
    times, result = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return times, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["cassandra", "sqlite"], default="cassandra")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument(
        "--slices", type=int, default=None, help="time slices per partition (default: auto)"
    )
    parser.add_argument("--page-size", type=int, default=1000, help="rows per storage read")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="queuey-bench-spark-") as tmp:
        settings = store_settings(args.backend, Path(tmp))
        # Written ten minutes in the past so that every row is older than the
        # store's read delay and the Spark read sees all of them.
        clock = ManualClock()
        clock.advance(-600)
        storage = load_backend(settings["queuey.storage.backend"], settings, clock)
        meta = storage.create_queue(
            QueueMeta(
                APPLICATION, f"spark{uuid.uuid4().hex[:8]}", partitions=args.partitions, ttl=3600
            )
        )
        try:
            fill_s = fill(storage, meta, args.messages)
            loop_times, loop_count = timed(lambda: driver_loop(storage, meta), args.runs)

            spark = local_session(
                "queuey-bench-spark",
                "local[2]",
                python=sys.executable,
                conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"},
            )
            try:
                executor_settings = {**settings, "queuey.cassandra.create_schema": "false"}
                reader = (
                    spark.read.format("queuey")
                    .options(**executor_settings)
                    .option("application", APPLICATION)
                    .option("queue", meta.name)
                    .option("pageSize", str(args.page_size))
                )
                if args.slices is not None:
                    reader = reader.option("slicesPerPartition", str(args.slices))
                frame = reader.load()
                spark_times, spark_count = timed(frame.count, args.runs)
                tasks = frame.rdd.getNumPartitions()
                connection = StorageConnection.from_settings(executor_settings)
                rdd_times, rdd_count = timed(
                    lambda: queue_rdd(
                        spark.sparkContext,
                        connection,
                        APPLICATION,
                        meta.name,
                        slices_per_partition=args.slices,
                        page_size=args.page_size,
                    ).count(),
                    args.runs,
                )
            finally:
                spark.stop()
        finally:
            storage.delete_queue(APPLICATION, meta.name)
            storage.close()

    counts = {"driver_loop": loop_count, "dataframe": spark_count, "rdd": rdd_count}
    if set(counts.values()) != {args.messages}:
        print(f"count mismatch: {counts}", file=sys.stderr)
        return 1
    spark_rate = args.messages / min(spark_times)
    rdd_rate = args.messages / min(rdd_times)
    loop_rate = args.messages / min(loop_times)
    result = {
        "backend": args.backend,
        "messages": args.messages,
        "partitions": args.partitions,
        "spark_tasks": tasks,
        "fill_msgs_per_s": round(args.messages / fill_s),
        "spark_local2_msgs_per_s": round(spark_rate),
        "spark_first_run_s": round(spark_times[0], 2),
        "driver_loop_msgs_per_s": round(loop_rate),
        "spark_over_driver_loop": round(spark_rate / loop_rate, 2),
        "spark_rdd_local2_msgs_per_s": round(rdd_rate),
        "spark_rdd_over_driver_loop": round(rdd_rate / loop_rate, 2),
        "page_size": args.page_size,
        "runs": args.runs,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

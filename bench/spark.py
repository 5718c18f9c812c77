"""Spark read benchmark: a queue read into a DataFrame versus a plain driver loop.

    python bench/spark.py [--backend cassandra|sqlite] [--messages 200000] [--partitions 16]

Fills a queue (on the harness's Cassandra node by default) with ``--messages``
messages of about 200 bytes over ``--partitions`` partitions, then measures

* ``spark``: ``spark.read.format("queuey")...load().count()`` on ``local[2]``
  (every row is read from the store by the executors and handed to Spark);
* ``spark_rdd``: the same through ``queuey.spark.queue_rdd(...).count()``
  (rows stay in the Python workers);
* ``driver_loop``: one Python process paging through every partition with
  ``Storage.read_messages`` (``--page-size`` rows a page, as Spark reads), the
  way a script without Spark would read the same rows;
* ``where``: the DataFrame read with a ``where`` on ``timestamp`` selecting a
  tenth of the queue, pushed down to the store (PySpark 4.1+), and what the
  store served for it and for the whole queue (rows and bytes, counted by the
  data source's reader run in this process, as Spark's executors run it).

Each is run ``--runs`` times and the median counts (the first Spark run also
pays for starting its Python workers and their connections, reported as
``spark_first_run_s``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queuey import ids  # noqa: E402
from queuey.clock import ManualClock  # noqa: E402
from queuey.model import NewMessage, QueueMeta, ReadQuery  # noqa: E402
from queuey.spark import StorageConnection, local_session, queue_rdd  # noqa: E402
from queuey.spark.slices import DEFAULT_PAGE_SIZE  # noqa: E402
from queuey.storage import load_backend  # noqa: E402

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
    from harness import cassandra

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


def driver_loop(storage, meta: QueueMeta, page_size: int) -> int:
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
                    limit=page_size,
                    order="ascending",
                    after_id=after,
                ),
            )
            total += len(page)
            if len(page) < page_size:
                break
            after = page[-1].id
    return total


def served_by_reader(options: dict[str, str], where: list) -> dict[str, int]:
    """Rows and bytes the store serves for a read, reading it in this process the
    way Spark's planner and executors call the data source's reader."""
    from queuey.spark.arrow import DEFAULT_SCHEMA
    from queuey.spark.datasource import QueueyDataSource
    from queuey.spark.sources import served

    reader = QueueyDataSource(options).reader(DEFAULT_SCHEMA)
    left = list(reader.pushFilters(where)) if where else []
    served.reset()
    rows = sum(b.num_rows for part in reader.partitions() for b in reader.read(part))
    return {
        "rows": rows,
        "served_rows": served.rows,
        "served_bytes": served.bytes,
        "filters_left_to_spark": len(left),
    }


def profile_reads(storage, meta: QueueMeta, options: dict[str, str], page_size: int) -> None:
    """Where a single process spends its time reading the queue: the plain loop
    (``Message`` objects) and the data source's read (column pages to Arrow)."""
    import cProfile
    import pstats

    for label, run in (
        ("driver loop (Storage.read_messages)", lambda: driver_loop(storage, meta, page_size)),
        ("data source read (scan pages -> Arrow)", lambda: served_by_reader(options, [])),
    ):
        profiler = cProfile.Profile()
        started = time.process_time()
        profiler.runcall(run)
        print(f"\n== {label}: {time.process_time() - started:.2f} s CPU", file=sys.stderr)
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(12)


def timed(fn, runs: int) -> tuple[list[float], int]:
    times, result = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return times, result


def window(storage, meta: QueueMeta) -> tuple[datetime, datetime]:
    """The first tenth of the queue's time span (the fill is spread evenly in time)."""
    now = time.time_ns() // 1000
    first, last = [], []
    for partition in range(1, meta.partitions + 1):
        query = ReadQuery(partitions=[partition], now_micros=now, limit=1)
        first += storage.read_messages(meta, replace(query, order="ascending"))
        last += storage.read_messages(meta, replace(query, order="descending"))
    lo = min(m.timestamp for m in first)
    hi = max(m.timestamp for m in last)
    cut = lo + (hi - lo) // 10
    return ids.micros_to_datetime(lo), ids.micros_to_datetime(cut)


def pushed_where(start: datetime, end: datetime) -> list:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    return [GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["cassandra", "sqlite"], default="cassandra")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument(
        "--slices", type=int, default=None, help="time slices per partition (default: auto)"
    )
    parser.add_argument(
        "--page-size", type=int, default=DEFAULT_PAGE_SIZE, help="rows per storage read"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile the driver loop and the data source's read in this process "
        "(printed to stderr)",
    )
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
            loop_times, loop_count = timed(
                lambda: driver_loop(storage, meta, args.page_size), args.runs
            )

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
                # A tenth of the queue by time, the first tenth of the fill.
                start, end = window(storage, meta)
                chosen = frame.where((frame.timestamp >= start) & (frame.timestamp < end))
                where_times, where_count = timed(chosen.count, args.runs)
                # Spark's own cost per query, whatever it reads: the same read of
                # an empty queue (planning, scheduling, Python workers, hand-off).
                empty = storage.create_queue(replace(meta, name=f"{meta.name}e"))
                empty_frame = reader.option("queue", empty.name).load()
                empty_times, _ = timed(empty_frame.count, args.runs)
                storage.delete_queue(APPLICATION, empty.name)
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
            options = {**executor_settings, "application": APPLICATION, "queue": meta.name}
            served_all = served_by_reader(options, [])
            served_where = served_by_reader(options, pushed_where(start, end))
            if args.profile:
                profile_reads(storage, meta, options, args.page_size)
        finally:
            storage.delete_queue(APPLICATION, meta.name)
            storage.close()

    counts = {"driver_loop": loop_count, "dataframe": spark_count, "rdd": rdd_count}
    if set(counts.values()) != {args.messages}:
        print(f"count mismatch: {counts}", file=sys.stderr)
        return 1
    spark_rate = args.messages / statistics.median(spark_times)
    rdd_rate = args.messages / statistics.median(rdd_times)
    loop_rate = args.messages / statistics.median(loop_times)
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
        "spark_best_msgs_per_s": round(args.messages / min(spark_times)),
        "driver_loop_best_msgs_per_s": round(args.messages / min(loop_times)),
        "spark_empty_queue_s": round(statistics.median(empty_times), 3),
        "where_tenth_rows": where_count,
        "where_tenth_s": round(statistics.median(where_times), 3),
        "whole_queue_s": round(statistics.median(spark_times), 3),
        "served_whole_queue": served_all,
        "served_where_tenth": served_where,
        "pyspark": pyspark.__version__,
        "page_size": args.page_size,
        "runs": args.runs,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

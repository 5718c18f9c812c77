"""Per-hour message counts by a body field, over one queue, with Spark.

    python examples/hourly_counts.py --queue crashes --field signature
    python examples/hourly_counts.py --queue crashes --field signature \\
        --url http://127.0.0.1:5000 --key demo-key

By default the executors read the store configured in ``development.ini``
directly (the embedded SQLite file); with ``--url`` they page through the HTTP
API instead. ``--since`` / ``--until`` (seconds since the epoch or ISO 8601
with a zone) limit the messages read: ``since < timestamp <= until``.

Prints one line per (hour, value) with its count, oldest hour first, and the
total. Used in ``docs/spark.rst``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queuey.spark import local_session  # noqa: E402


def hourly_counts(spark, options: dict[str, str], field: str):
    """A DataFrame of (hour, <field>, messages), oldest hour first.

    Only the declared columns are produced: ``timestamp`` from the message and
    ``field`` straight out of each JSON body (null where it is missing).
    """
    from pyspark.sql import functions as F

    messages = (
        spark.read.format("queuey")
        .options(**options)
        .schema(f"timestamp TIMESTAMP, `{field}` STRING")
        .load()
    )
    return (
        messages.groupBy(F.date_trunc("hour", "timestamp").alias("hour"), F.col(field))
        .agg(F.count("*").alias("messages"))
        .orderBy("hour", F.desc("messages"), field)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", required=True)
    parser.add_argument("--field", required=True, help="the body field to count by")
    parser.add_argument("--application", default="demo")
    parser.add_argument(
        "--config",
        default=str(ROOT / "development.ini"),
        help="ini file whose [app:main] configures the store",
    )
    parser.add_argument("--url", help="read through the HTTP API at this URL instead")
    parser.add_argument("--key", help="the application key (HTTP, private queues)")
    parser.add_argument("--since")
    parser.add_argument("--until")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)

    options = {"queue": args.queue, "application": args.application}
    if args.url:
        options["url"] = args.url
        if args.key:
            options["key"] = args.key
    else:
        options["config"] = str(Path(args.config).resolve())
    for name in ("since", "until"):
        if getattr(args, name):
            options[name] = getattr(args, name)

    spark = local_session(
        "queuey-hourly-counts",
        args.master,
        conf={"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "8"},
    )
    try:
        total = 0
        for row in hourly_counts(spark, options, args.field).toLocalIterator():
            hour = row["hour"].strftime("%Y-%m-%d %H:00Z")
            print(f"{hour}  {row['messages']:>8}  {row[args.field]}")
            total += row["messages"]
        print(f"total {total}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

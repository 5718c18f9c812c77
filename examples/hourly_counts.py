"""Per-hour message counts by a body field, over one queue, with Spark.

    python examples/hourly_counts.py --queue crashes --field signature
    python examples/hourly_counts.py --queue crashes --field signature \\
        --url http://127.0.0.1:5000 --key demo-key

By default the executors read the store configured in ``development.ini``
directly (the embedded SQLite file); with ``--url`` they page through the HTTP
API instead. ``--since`` / ``--until`` (seconds since the epoch or ISO 8601
with a zone) limit the messages read: ``since < timestamp <= until``, written
as a ``where`` on ``timestamp`` that PySpark 4.1+ pushes down to the store,
so only those hours are read.

Prints one line per (hour, value) with its count, oldest hour first, and the
total. Used in ``docs/spark.rst``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queuey import ids  # noqa: E402
from queuey.spark import local_session  # noqa: E402


def hourly_counts(
    spark,
    options: dict[str, str],
    field: str,
    since: datetime | None = None,
    until: datetime | None = None,
):
    """A DataFrame of (hour, <field>, messages), oldest hour first.

    Only the declared columns are produced: ``timestamp`` from the message and
    ``field`` straight out of each JSON body (null where it is missing).
    ``since < timestamp <= until`` is a ``where``: the data source reads only
    that range from the store (filter push-down, PySpark 4.1+).
    """
    from pyspark.sql import functions as F

    messages = (
        spark.read.format("queuey")
        .options(**options)
        .schema(f"timestamp TIMESTAMP, `{field}` STRING")
        .load()
    )
    if since is not None:
        messages = messages.where(F.col("timestamp") > F.lit(since))
    if until is not None:
        messages = messages.where(F.col("timestamp") <= F.lit(until))
    return (
        messages.groupBy(F.date_trunc("hour", "timestamp").alias("hour"), F.col(field))
        .agg(F.count("*").alias("messages"))
        .orderBy("hour", F.desc("messages"), field)
    )


def instant(text: str) -> datetime:
    """Seconds since the epoch or ISO 8601 with a zone, as an aware datetime."""
    try:
        return ids.micros_to_datetime(ids.seconds_to_micros(text))
    except ValueError:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            raise argparse.ArgumentTypeError(f"{text!r} has no time zone") from None
        return parsed


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
    parser.add_argument("--since", type=instant)
    parser.add_argument("--until", type=instant)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)

    options = {"queue": args.queue, "application": args.application}
    if args.url:
        options["url"] = args.url
        if args.key:
            options["key"] = args.key
    else:
        options["config"] = str(Path(args.config).resolve())

    spark = local_session(
        "queuey-hourly-counts",
        args.master,
        conf={"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "8"},
    )
    try:
        total = 0
        counts = hourly_counts(spark, options, args.field, args.since, args.until)
        for row in counts.toLocalIterator():
            hour = row["hour"].strftime("%Y-%m-%d %H:00Z")
            print(f"{hour}  {row['messages']:>8}  {row[args.field]}")
            total += row["messages"]
        print(f"total {total}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

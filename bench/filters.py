"""What a subscription's filter costs, through the storage interface (no HTTP).

    python bench/filters.py [--messages 20000] [--partitions 4] [--runs 3]
                            [--cassandra-port 19042 | --no-cassandra]

It measures:

* ``match_ns``: one message's check against a typical filter (5 attribute
  keys: exact values, a prefix, a numeric range, ``exists``,
  ``anything-but``), median nanoseconds, the message's attributes included
  as a filter sees them;
* ``drain``: a queue of ``--messages`` messages (each with 6 attributes)
  drained by one loop of ``reserve(limit=100)`` then ``ack`` of what came,
  for a subscription without a filter, one whose filter takes half the
  messages and one whose filter takes 1 in 100: messages **walked** per
  second (every message of the queue, taken or walked past) and messages
  delivered per second, medians of ``--runs``, on SQLite and (when the harness
  node answers) on Cassandra.

Prints one JSON object (``bench/run.py`` collects it).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import time
import timeit
import uuid
from pathlib import Path

from cassandra import DriverException

from queuey.clock import SYSTEM_CLOCK
from queuey.model import NewMessage, QueueMeta
from queuey.model.filters import parse_filter
from queuey.model.subscriptions import filter_attributes, filter_key

READ_DELAY = 2.5  # seconds: Cassandra's write timeout (2) plus allowed skew
TYPICAL = {
    "colour": ["red", "blue"],
    "region": [{"prefix": "eu-"}],
    "size": [{"numeric": [">=", 0, "<", 1000]}],
    "customer": [{"exists": True}],
    "tier": [{"anything-but": ["free", "trial"]}],
}
FILTERS = {
    "none": None,
    "half": {"parity": ["even"]},
    "one_in_100": {"bucket": ["0"]},
}


def attributes(n: int) -> dict[str, str]:
    return {
        "colour": ("red", "blue", "green")[n % 3],
        "region": f"eu-{n % 7}",
        "size": str(n % 2000),
        "customer": f"c{n}",
        "tier": ("gold", "free")[n % 2],
        "parity": ("even", "odd")[n % 2],
        "bucket": str(n % 100),
    }


def match_ns() -> float:
    flt = parse_filter(TYPICAL)
    sample = [attributes(n) for n in range(1000)]

    def run() -> None:
        for attrs in sample:
            flt.matches(filter_attributes(attrs))

    times = timeit.repeat(run, number=5, repeat=5)
    return round(min(times) / (5 * len(sample)) * 1e9)


def drain(store, messages: int, partitions: int, flt: dict | None) -> dict:
    queue = store.create_queue(
        QueueMeta(
            application="bench-" + uuid.uuid4().hex[:8], name="q", partitions=partitions, ttl=3600
        )
    )
    if flt is not None:
        queue = store.update_queue(
            queue.application,
            queue.name,
            attributes_set={filter_key("bench"): parse_filter(flt).text},
        )
    for start in range(0, messages, 100):
        store.put_messages(
            queue,
            [
                NewMessage("{}", n % partitions + 1, 3600, attributes=attributes(n))
                for n in range(start, start + 100)
            ],
        )
    time.sleep(store.write_timeout_seconds and READ_DELAY)
    delivered = 0
    empty = 0
    started = time.perf_counter()
    while empty < 2:
        now = SYSTEM_CLOCK.now_micros()
        got = store.reserve(
            queue,
            "bench",
            partitions=list(range(1, partitions + 1)),
            limit=100,
            visibility_timeout=60,
            now_micros=now,
            settled_micros=now - int(READ_DELAY * 1e6),
        ).deliveries
        if got:
            store.ack(queue, "bench", [d.receipt for d in got], SYSTEM_CLOCK.now_micros())
            delivered += len(got)
            empty = 0
        else:
            empty += 1
    elapsed = time.perf_counter() - started
    store.delete_queue(queue.application, queue.name)
    return {
        "walked_per_s": round(messages / elapsed),
        "delivered_per_s": round(delivered / elapsed),
        "delivered": delivered,
    }


def medians(runs: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def backend_runs(make_store, args) -> dict:
    out = {}
    for label, flt in FILTERS.items():
        runs = []
        for _ in range(args.runs):
            store = make_store()
            try:
                runs.append(drain(store, args.messages, args.partitions, flt))
            finally:
                store.close()
        out[label] = medians(runs)
    return out


def sqlite_store(directory: Path):
    from queuey.storage.sqlite.config import load_from_config, upgrade_schema

    path = directory / f"{uuid.uuid4().hex}.sqlite3"
    settings = {"queuey.sqlite.path": str(path), "queuey.sqlite.sweep_interval": "0"}
    upgrade_schema(settings)
    return load_from_config(settings, SYSTEM_CLOCK)


def cassandra_store(port: int, keyspace: str):
    from queuey.storage.cassandra import load_from_config

    return load_from_config(
        {
            "queuey.cassandra.contact_points": "127.0.0.1",
            "queuey.cassandra.port": str(port),
            "queuey.cassandra.keyspace": keyspace,
            "queuey.cassandra.create_schema": "true",
        },
        SYSTEM_CLOCK,
    )


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cassandra-port", type=int, default=19042)
    parser.add_argument("--no-cassandra", action="store_true")
    args = parser.parse_args()
    result: dict = {"benchmark": "filters", "match_ns": match_ns(), "messages": args.messages}
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite"] = backend_runs(lambda: sqlite_store(Path(tmp)), args)
    if not args.no_cassandra and answers(args.cassandra_port):
        keyspace = "bench_filters_" + uuid.uuid4().hex[:8]
        result["cassandra"] = backend_runs(
            lambda: cassandra_store(args.cassandra_port, keyspace), args
        )
        store = cassandra_store(args.cassandra_port, keyspace)
        try:
            store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        except DriverException as exc:  # the figures stand; the keyspace is left behind
            result["cleanup_error"] = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            store.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

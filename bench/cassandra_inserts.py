"""The floor under a Cassandra post: the Python driver's own inserts, no Queuey.

    python bench/cassandra_inserts.py [--inserts 3000] [--in-flight 1,8,64]

On the harness's single Cassandra node (started if it is not running), a
table shaped like Queuey's ``messages`` (one partition per queue partition and
bucket, a ~200-byte body, a TTL) takes ``--inserts`` prepared ``INSERT``\\ s
from ``execute_concurrent_with_args`` with each ``--in-flight`` count, after
an uncounted round of :data:`WARM_UP` inserts that warms the node's JIT up.
For each: inserts a second, and the CPU the node's JVM and this process spent
per insert. A single Queuey
post is one such ``INSERT`` plus the API's work, so these rates bound what a
single post can reach on the box. Prints one JSON object; not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200  # noqa: E402
from bench.servers import store_processes, tree_cpu  # noqa: E402

KEYSPACE = "queuey_bench_inserts"
#: Inserts of the uncounted first round.
WARM_UP = 20_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inserts", type=int, default=3000)
    parser.add_argument("--in-flight", default="1,8,64")
    args = parser.parse_args()
    from cassandra.cluster import Cluster
    from cassandra.concurrent import execute_concurrent_with_args

    from harness import cassandra

    node = cassandra.ensure_running(1)
    jvm = store_processes("cassandra")
    me = psutil.Process()
    cluster = Cluster(list(node.contact_points), port=node.port)
    try:
        session = cluster.connect()
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=120)
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute(
            f"CREATE TABLE {KEYSPACE}.messages (incarnation text, partition int, "
            "bucket bigint, id timeuuid, body text, expires bigint, "
            "PRIMARY KEY ((incarnation, partition, bucket), id))"
        )
        insert = session.prepare(
            f"INSERT INTO {KEYSPACE}.messages (incarnation, partition, bucket, id, body, "
            "expires) VALUES (?, ?, ?, ?, ?, ?) USING TTL 3600"
        )
        body = json.dumps(BODY_200)

        def rows(count: int) -> list[tuple]:
            return [("inc", i % 8, 1, uuid.uuid1(), body, 0) for i in range(count)]

        # Uncounted: a fresh node's JIT costs several times the CPU per write.
        warm = rows(max(WARM_UP, args.inserts))
        execute_concurrent_with_args(session, insert, warm, concurrency=64)
        results = {}
        for in_flight in (int(n) for n in args.in_flight.split(",")):
            batch = rows(args.inserts)
            jvm_before = sum(tree_cpu(p) for p in jvm)
            me_before = sum(me.cpu_times()[:2])
            started = time.perf_counter()
            execute_concurrent_with_args(session, insert, batch, concurrency=in_flight)
            took = time.perf_counter() - started
            results[str(in_flight)] = {
                "inserts_per_second": round(args.inserts / took),
                "jvm_cpu_us_per_insert": round(
                    1e6 * (sum(tree_cpu(p) for p in jvm) - jvm_before) / args.inserts
                ),
                "driver_cpu_us_per_insert": round(
                    1e6 * (sum(me.cpu_times()[:2]) - me_before) / args.inserts
                ),
            }
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=120)
    finally:
        cluster.shutdown()
    out = {"benchmark": "cassandra_inserts", "inserts": args.inserts, "in_flight": results}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

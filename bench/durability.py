"""What a durable commit log costs: Cassandra writes per commit-log sync mode.

    python bench/durability.py [--modes periodic,group:10,batch] [--runs 3] [--seconds 5]

For each mode a fresh single node of its own (ports 19342/17300/17399 by
default, a temporary directory) takes:

* ``api_msgs_per_s``: four HTTP clients, each posting batches of 20 messages to
  a ``strong`` queue one after another, through the real API (waitress in this
  process), as acknowledged messages per second;
* ``single_write_ms``: through the driver alone, one writer's median latency
  for a single-row insert (what waiting for the commit log costs one write).

Each figure is the median of ``--runs`` runs. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests
from cassandra.cluster import Cluster
from webtest.http import StopableWSGIServer

import queuey

# The harness runs from the checkout (harness/ beside the package), not installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import cassandra  # noqa: E402

WRITERS = 4
BATCH = 20
SINGLE_WRITES = 200
BODY = b"x" * 200


def _connect(cluster: cassandra.CassandraCluster) -> Cluster:
    return Cluster(
        cluster.contact_points,
        port=cluster.port,
        protocol_version=cassandra.PROTOCOL_VERSION,
        connection_class=cassandra.connection_class(),
    )


def _single_write_ms(session, insert) -> float:
    key = f"single-{uuid.uuid4().hex[:8]}"
    latencies = []
    for _ in range(SINGLE_WRITES):
        started = time.perf_counter()
        session.execute(insert, (key, uuid.uuid1(), BODY), timeout=30)
        latencies.append((time.perf_counter() - started) * 1000)
    return statistics.median(latencies)


APPLICATIONS = """
[application:bench]
keys = plain:bench-key
allow = 127.0.0.0/8
max_requests_per_second = 0
"""
HEADERS = {"X-Application-Name": "bench", "ApplicationKey": "bench-key"}


def _api_msgs_per_s(node: cassandra.CassandraCluster, workdir: Path, runs: int, seconds: float):
    """Acknowledged messages per second through the API, one figure per run."""
    apps = workdir / "applications.ini"
    apps.write_text(APPLICATIONS)
    app = queuey.main(
        {},
        **{
            "queuey.applications": str(apps),
            "queuey.storage.backend": "queuey.storage.cassandra",
            "queuey.cassandra.contact_points": ",".join(node.contact_points),
            "queuey.cassandra.port": str(node.port),
            "queuey.cassandra.keyspace": "bench_api",
            "queuey.cassandra.create_schema": "true",
            "queuey.cassandra.request_timeout": "5",
            "queuey.read_delay": "6",
        },
    )
    server = StopableWSGIServer.create(app, host="127.0.0.1", threads=8)
    url = f"http://127.0.0.1:{server.effective_port}"
    try:
        created = requests.post(
            f"{url}/queue",
            json={"queue_name": "bench", "partitions": 4, "consistency": "strong"},
            headers=HEADERS,
            timeout=30,
        )
        created.raise_for_status()
        body = {"messages": [{"body": {"n": i, "pad": "x" * 100}} for i in range(BATCH)]}

        def run(duration: float) -> float:
            counts = [0] * WRITERS
            stop = time.monotonic() + duration

            def client(index: int) -> None:
                with requests.Session() as http:
                    while time.monotonic() < stop:
                        r = http.post(
                            f"{url}/queue/bench/batch", json=body, headers=HEADERS, timeout=30
                        )
                        if r.status_code == 201:
                            counts[index] += BATCH

            threads = [threading.Thread(target=client, args=(i,)) for i in range(WRITERS)]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return sum(counts) / (time.monotonic() - started)

        run(2.0)  # warm up
        return [run(seconds) for _ in range(runs)]
    finally:
        server.shutdown()
        app.registry.queuey.storage.close()


def bench_mode(mode: str, runs: int, seconds: float, ports: dict[str, int]) -> dict:
    with tempfile.TemporaryDirectory(prefix="queuey-durability-") as tmp:
        try:
            node = cassandra.ensure_running(1, base_dir=tmp, commitlog=mode, **ports)
            client = _connect(node)
            try:
                session = client.connect()
                session.execute(
                    "CREATE KEYSPACE bench WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}"
                )
                session.execute(
                    "CREATE TABLE bench.messages (k text, id timeuuid, body blob, "
                    "PRIMARY KEY (k, id))"
                )
                insert = session.prepare(
                    "INSERT INTO bench.messages (k, id, body) VALUES (?, ?, ?)"
                )
                _single_write_ms(session, insert)  # warm up the JIT and the pool
                latency = [_single_write_ms(session, insert) for _ in range(runs)]
            finally:
                client.shutdown()
            api = _api_msgs_per_s(node, Path(tmp), runs, seconds)
        finally:
            cassandra.stop(1, base_dir=tmp)
    return {
        "api_msgs_per_s": round(statistics.median(api)),
        "api_msgs_per_s_runs": [round(x) for x in api],
        "single_write_ms": round(statistics.median(latency), 2),
        "single_write_ms_runs": [round(x, 2) for x in latency],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="periodic,group:10,group:2,batch")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=19342)
    parser.add_argument("--storage-port", type=int, default=17300)
    parser.add_argument("--jmx-port", type=int, default=17399)
    args = parser.parse_args()
    ports = {"port": args.port, "storage_port": args.storage_port, "jmx_port": args.jmx_port}
    results = {
        mode: bench_mode(mode, args.runs, args.seconds, ports) for mode in args.modes.split(",")
    }
    print(json.dumps({"commitlog": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Work-queue benchmark: reserve + ack end to end against real Queuey API nodes.

    python bench/workqueue.py [--backend sqlite|cassandra|both] [--messages 20000]
                              [--batches 10,100] [--consumers 4] [--latency-messages 300]
                              [--cassandra-designs owned] [--single-posts 2000]

API nodes are ``pserve`` with granian, 2 worker processes each (the settings of
``bench/servers.py``). SQLite runs on one node (its store is one machine's
file); Cassandra on **two nodes sharing one keyspace** (``queuey_bench``, the
harness node, read delay 2 s), started afresh for each work-queue design of
``--cassandra-designs`` (``queuey.cassandra.work_queue``). Consumers and
producers are spread round-robin over the nodes. Every measurement uses a fresh
8-partition queue whose visibility timeout (120 s) is far longer than a batch
takes, and the ``default`` subscription:

* ``reserve_ack_batch_<n>``: a queue filled with ``--messages`` ~200-byte
  messages (batches of 100, 4 writers) is drained by ``--consumers`` threads,
  each looping ``reserve`` (``limit`` n, ``wait`` 1 s) then ``ack`` of every
  receipt it got, after the fill has passed the read delay. Messages/s from
  the first reserve to the last successful ack, with the duplicates and
  redeliveries seen (0 expected) and the messages not delivered when
  ``--timeout`` ran out;
* ``single_post_reserve_ack`` (Cassandra): the same with ``--single-posts``
  messages posted one per request, drained in batches of the largest
  ``--batches``: the cost of the single-post path;
* ``post_to_delivery``: ``--consumers`` threads long-poll ``reserve``
  (``limit`` 1, ``wait`` 5 s) while one producer posts one message at a time
  (to each node in turn) and waits for its delivery before the next: p50/p99
  from just before the POST is sent to the moment a consumer holds the message.

Where a drain's CPU went (``drain_cpu``): the CPU seconds of the API nodes
(every process), Cassandra's JVM and this load generator between the first
reserve and the last ack, per message, and the rate the machine's cores
would allow if that CPU were all that bound it (``cpu_bound_msgs_per_s``).

What each delivered message costs Cassandra: both nodes' ``/metrics``
(``queuey_cassandra_requests_total``, every process of a node: its workers and
its refresher) are scraped before the fill, after it and after the drain.
``cql_per_delivered_message`` is the requests of each kind over the whole of
post + reserve + ack divided by the messages delivered; ``cql_requests`` has
the raw counts of each phase and ``cql_after_drain_idle`` what the nodes sent
in the ``IDLE_AFTER`` seconds after (background work, not in the figures).

Prints one JSON object on stdout; progress on stderr. Servers and load share
the machine's cores. Not a test: run it on a quiet machine and compare medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200  # noqa: E402
from bench.scrape import request_counts  # noqa: E402
from bench.servers import CpuMeter, Server, storage_settings, store_processes  # noqa: E402
from bench.workqueue_load import (  # noqa: E402
    FILL_BATCH,
    PARTITIONS,
    VISIBILITY_TIMEOUT,
    DrainState,
    bench_latency,
    consume,
    create_queue,
    fill,
    percentiles,
)

#: API nodes per backend: SQLite is one machine's file; Cassandra is shared.
NODES = {"sqlite": 1, "cassandra": 2}
WORKERS_PER_NODE = 2
DESIGNS = ("owned",)  # lwt was removed
#: Seconds of idle after a drain whose requests are reported apart.
IDLE_AFTER = 2.0
KINDS = ("read", "write", "lwt")


def log(message: str) -> None:
    print(f"[workqueue] {message}", file=sys.stderr, flush=True)


def cql_counts(ports: list[int]) -> dict[str, float]:
    """The CQL requests every node has sent so far, by kind, summed (``{}`` on SQLite)."""
    total: dict[str, float] = {}
    for port in ports:
        for kind, count in request_counts(port).items():
            total[kind] = total.get(kind, 0) + count
    return total


def since(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {kind: int(after[kind] - before.get(kind, 0)) for kind in sorted(after)}


def per_message(sent: dict[str, int], delivered: int) -> dict[str, float | None]:
    return {k: round(sent.get(k, 0) / delivered, 4) if delivered else None for k in KINDS}


def bench_reserve_ack(
    ports: list[int],
    messages: int,
    batch: int,
    args: argparse.Namespace,
    settle: float,
    meter: CpuMeter,
    per_post: int = FILL_BATCH,
) -> dict:
    queue = create_queue(ports[0])
    log(f"batch {batch}: filling {queue} with {messages} messages, {per_post} per post")
    counted = [cql_counts(ports)]
    fill_rate = fill(ports, queue, messages, per_post)
    counted.append(cql_counts(ports))
    time.sleep(settle)  # let the newest writes pass the configured read delay
    log(f"batch {batch}: draining with {args.consumers} consumers")
    state = DrainState(target=messages)
    cpu_before = meter.read()
    started = time.perf_counter()
    deadline = started + args.timeout
    threads = [
        threading.Thread(
            target=consume, args=(ports[i % len(ports)], queue, batch, state, deadline)
        )
        for i in range(args.consumers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = state.finished_at or time.perf_counter()
    cpu_after = meter.read()
    counted.append(cql_counts(ports))
    elapsed = finished - started
    figures = {
        "consumers": args.consumers,
        "batch": batch,
        "messages": messages,
        "messages_per_post": per_post,
        "acked": state.acked,
        "delivered": len(state.seen),
        "duplicates": state.duplicates,
        "redelivered": state.redelivered,
        "ack_failed": state.ack_failed,
        "not_delivered": messages - len(state.seen),
        "timed_out": state.finished_at is None and not state.errors,
        "empty_reserves": state.empty_reserves,
        "errors": state.errors[:5],
        "seconds": round(elapsed, 2),
        "per_second": round(state.acked / elapsed, 1),
        "fill_per_second": round(fill_rate, 1),
        "reserve": percentiles(state.reserve_latency),
        "ack": percentiles(state.ack_latency),
        "drain_cpu": CpuMeter.per_message(cpu_before, cpu_after, state.acked),
    }
    if counted[0]:
        time.sleep(IDLE_AFTER)
        delivered = len(state.seen)
        post, drain = since(counted[0], counted[1]), since(counted[1], counted[2])
        total = since(counted[0], counted[2])
        figures["cql_per_delivered_message"] = per_message(total, delivered)
        figures["cql_per_delivered_message_by_phase"] = {
            "post": per_message(post, delivered),
            "reserve_ack": per_message(drain, delivered),
        }
        figures["cql_requests"] = {"post": post, "reserve_ack": drain, "total": total}
        figures["cql_after_drain_idle"] = since(counted[2], cql_counts(ports))
    return figures


def read_delay(storage: str) -> float:
    """The read delay in a node's storage settings (``bench/servers.py``)."""
    found = re.search(r"queuey\.read_delay = ([\d.]+)", storage)
    return float(found.group(1)) if found else 0.0


def bench_backend(
    backend: str, design: str | None, args: argparse.Namespace, workdir: Path
) -> dict:
    storage = storage_settings(backend, workdir)  # on Cassandra, a fresh keyspace
    if design is not None:
        storage += f"queuey.cassandra.work_queue = {design}\n"
    settle = read_delay(storage) + 0.5
    label = backend if design is None else f"{backend}-{design}"
    servers: list[Server] = []
    try:
        for n in range(NODES[backend]):
            log(f"{label}: starting API node {n + 1} of {NODES[backend]}")
            servers.append(
                Server(
                    backend,
                    workdir,
                    workers=WORKERS_PER_NODE,
                    storage=storage,
                    name=f"{label}-node{n + 1}",
                )
            )
        ports = [server.port for server in servers]
        meter = CpuMeter(servers, store_processes(backend))
        results: dict = {
            "design": design,
            "api_nodes": len(servers),
            "workers_per_node": WORKERS_PER_NODE,
            "read_delay_s": read_delay(storage),
        }
        for batch in args.batches:
            results[f"reserve_ack_batch_{batch}"] = bench_reserve_ack(
                ports, args.messages, batch, args, settle, meter
            )
        if backend == "cassandra" and args.single_posts:
            results["single_post_reserve_ack"] = bench_reserve_ack(
                ports, args.single_posts, max(args.batches), args, settle, meter, per_post=1
            )
        log(f"{label}: post to delivery, {args.latency_messages} messages")
        results["post_to_delivery"] = bench_latency(
            ports, args.latency_messages, args.consumers, timeout=settle + 30
        )
        results["server_peak_rss_mb"] = round(sum(s.peak_rss for s in servers) / 2**20, 1)
        return results
    finally:
        for server in servers:
            server.stop()


def designs(text: str) -> list[str]:
    chosen = [d.strip() for d in text.split(",") if d.strip()]
    unknown = sorted(set(chosen) - set(DESIGNS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"designs are {', '.join(DESIGNS)}; not {unknown}")
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--batches", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100]
    )
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--latency-messages", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=600.0, help="per drain, seconds")
    parser.add_argument(
        "--cassandra-designs",
        type=designs,
        default=list(DESIGNS),
        help="work-queue designs to run on Cassandra (queuey.cassandra.work_queue)",
    )
    parser.add_argument(
        "--single-posts",
        type=int,
        default=2_000,
        help="messages of the single-post run on Cassandra (0: none)",
    )
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    runs: list[tuple[str, str | None]] = []
    for backend in backends:
        if backend == "cassandra":
            runs.extend(("cassandra", design) for design in args.cassandra_designs)
        else:
            runs.append((backend, None))
    out = {
        "benchmark": "workqueue",
        "cpus": os.cpu_count(),
        "cores": "the API nodes (granian, 2 worker processes and a refresher each), "
        "Cassandra's JVM and the load generator share the cores",
        "api_nodes": {backend: NODES[backend] for backend in backends},
        "message_bytes": len(json.dumps(BODY_200)),
        "visibility_timeout_s": VISIBILITY_TIMEOUT,
        "partitions": PARTITIONS,
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="queuey-workqueue-") as tmp:
        for backend, design in runs:
            key = backend if design is None else f"{backend}_{design}"
            out["results"][key] = bench_backend(backend, design, args, Path(tmp))
    print(json.dumps(out, indent=2))
    return 1 if any(failed(figures) for figures in out["results"].values()) else 0


def failed(figures: dict) -> bool:
    """Whether any measurement of one backend saw errors or did not finish in time."""
    return any(
        isinstance(f, dict) and (f.get("errors") or f.get("timed_out") or f.get("missed"))
        for f in figures.values()
    )


if __name__ == "__main__":
    sys.exit(main())

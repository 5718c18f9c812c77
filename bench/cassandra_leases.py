"""The Cassandra work-queue path through the storage interface alone (no HTTP).

    python bench/cassandra_leases.py [--port 19042] [--messages 20000] [--partitions 4]
                                     [--design owned]

On the harness Cassandra node (its own keyspace, dropped afterwards) it measures:

* ``lwt_ms``: one writer's lightweight transaction on one partition (the
  conditional single-partition batch every lease change is), p50 and p99, next
  to a plain write's;
* ``reserve_ack``: messages per second drained by a loop of ``reserve(limit)``
  then ``ack`` of what came, for 1 and 4 threads on one storage object and
  4 threads on each of two (two API nodes), with batches of 10 and 100, from a
  queue of ``--messages`` messages over ``--partitions`` partitions;
* ``reserve_ms`` / ``ack_ms``: median call latency in the 1-thread runs.

Prints one JSON object (``bench/run.py`` collects it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

from cassandra.query import BatchStatement, BatchType

from queuey.clock import SYSTEM_CLOCK
from queuey.errors import StorageUnavailable
from queuey.model import NewMessage, QueueMeta
from queuey.storage.cassandra import load_from_config
from queuey.storage.cassandra.session import P_WORK

READ_DELAY = 2.5  # seconds: the write timeout (2) plus allowed skew
#: (label, storage objects standing for API nodes, threads on each)
RUNS = (("1 thread", 1, 1), ("4 threads", 1, 4), ("2 nodes x 4 threads", 2, 4))


def settings(port: int, keyspace: str, design: str = "owned") -> dict[str, str]:
    return {
        "queuey.cassandra.work_queue": design,
        "queuey.cassandra.contact_points": "127.0.0.1",
        "queuey.cassandra.port": str(port),
        "queuey.cassandra.keyspace": keyspace,
        "queuey.cassandra.create_schema": "true",
    }


def lwt_latency(store, rounds: int = 500) -> dict:
    session = store.session
    ks = store.config.keyspace
    key = uuid.uuid4().hex
    cas = session.prepare(
        f"UPDATE {ks}.leases SET version = ? WHERE incarnation = ? AND subscription = 'b' "
        "AND partition = 1 IF version = ?"
    )
    plain = session.prepare(
        f"UPDATE {ks}.leases SET dead_lettered = ? WHERE incarnation = ? "
        "AND subscription = 'b' AND partition = 1"
    )

    def timed(run) -> list[float]:
        out = []
        for n in range(rounds):
            start = time.perf_counter()
            run(n)
            out.append((time.perf_counter() - start) * 1000)
        return sorted(out)

    def conditional(n: int) -> None:
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.add(cas, (n + 1, key, n or None))
        assert session.execute(batch, execution_profile=P_WORK).one()[0]

    lwt = timed(conditional)
    write = timed(lambda n: session.execute(plain, (n, key), execution_profile=P_WORK))
    pick = lambda xs, q: round(xs[int(q * (len(xs) - 1))], 2)  # noqa: E731
    return {
        "lwt_p50": pick(lwt, 0.5),
        "lwt_p99": pick(lwt, 0.99),
        "write_p50": pick(write, 0.5),
        "write_p99": pick(write, 0.99),
    }


def drain(stores, threads_per_store: int, batch: int, messages: int, partitions: int) -> dict:
    queue = stores[0].create_queue(
        QueueMeta(
            application="bench-" + uuid.uuid4().hex[:8],
            name="q",
            partitions=partitions,
            ttl=3600,
        )
    )
    for start in range(0, messages, 100):
        stores[0].put_messages(
            queue,
            [NewMessage("{}", n % partitions + 1, 3600) for n in range(start, start + 100)],
        )
    time.sleep(READ_DELAY)  # every message settled, as a live node's read delay would see it
    done = []
    reserve_ms: list[float] = []
    ack_ms: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    unavailable: list[int] = []

    def take(store) -> int:
        """One reserve and the ack of what it got; how many messages."""
        now = SYSTEM_CLOCK.now_micros()
        t0 = time.perf_counter()
        got = store.reserve(
            queue,
            "bench",
            partitions=list(range(1, partitions + 1)),
            limit=batch,
            visibility_timeout=60,
            now_micros=now,
            settled_micros=now - int(READ_DELAY * 1e6),
        ).deliveries
        t1 = time.perf_counter()
        if got:
            store.ack(queue, "bench", [d.receipt for d in got], SYSTEM_CLOCK.now_micros())
            t2 = time.perf_counter()
            with lock:
                reserve_ms.append((t1 - t0) * 1000)
                ack_ms.append((t2 - t1) * 1000)
        return len(got)

    def consume(store) -> None:
        total = 0
        try:
            while True:
                try:
                    got = take(store)
                except StorageUnavailable:  # a 503: the client retries
                    with lock:
                        unavailable.append(1)
                    continue
                if not got:
                    break
                total += got
        except Exception as exc:  # noqa: BLE001 - re-raised by the caller
            errors.append(exc)
        with lock:
            done.append(total)

    workers = [
        threading.Thread(target=consume, args=(store,))
        for store in stores
        for _ in range(threads_per_store)
    ]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return {
        "messages": sum(done),
        "seconds": round(elapsed, 2),
        "msgs_per_s": round(sum(done) / elapsed),
        "reserve_ms_p50": round(statistics.median(reserve_ms), 2),
        "ack_ms_p50": round(statistics.median(ack_ms), 2),
        "unavailable": len(unavailable),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=19042)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--design", choices=("owned",), default="owned")
    args = parser.parse_args()
    keyspace = "bench_leases_" + uuid.uuid4().hex[:8]
    conf = settings(args.port, keyspace, args.design)
    stores = [load_from_config(conf, SYSTEM_CLOCK), load_from_config(conf, SYSTEM_CLOCK)]
    try:
        result = {"design": args.design, "lwt_ms": lwt_latency(stores[0]), "reserve_ack": {}}
        for batch in (10, 100):
            for label, nodes, threads in (
                ("1 thread", 1, 1),
                ("4 threads", 1, 4),
                ("2 nodes x 4 threads", 2, 4),
            ):
                run = drain(stores[:nodes], threads, batch, args.messages, args.partitions)
                result["reserve_ack"][f"batch {batch}, {label}"] = run
        print(json.dumps(result, indent=2))
    finally:
        stores[0].session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
        for store in stores:
            store.close()


if __name__ == "__main__":
    main()

"""How far a queue's ``max_length`` and an application's ``max_messages`` hold
on real API nodes, where lengths are measured in the background.

    python bench/flow_lengths.py [--backend sqlite|cassandra|both] [--length 2000]
                                 [--seconds 25] [--writers 4] [--rate 400]

Each backend runs API nodes as shipped (``pserve`` with granian, 2 worker
processes each and the refresher process, as ``bench/servers.py`` starts
them; ``queuey.stats.interval`` 10 s): one on its SQLite file (a host's
server), two on Cassandra (the harness node, owned partitions: every process
of both nodes is counted live). Writers spread over the nodes. Settings are
given as a user would, when the queue is created (``POST /queue``).

* ``reject_new``: a queue is made with ``max_length`` = ``--length`` and
  ``--writers`` writers (spread over both nodes) post batches of 10 as fast
  as they can for ``--seconds``: the queue is flooded before its first
  measurement. Stored at the end (``GET /queue/{name}/stats``), over the
  length, when the first 507 came.
* ``reject_measured``: the same on a queue filled to half its length (or
  its first refusal) and measured (the nodes' ``queuey_queue_depth`` shows
  the fill) before the flood.
* ``drop_head``: ``--rate`` messages a second (batches of 10) for
  ``--seconds`` to a ``drop_head`` queue of ``--length``; its stored count
  sampled every 0.25 s: the largest and the mean, and the messages dropped
  (``queuey_flow_dropped_total``, both nodes summed).
* ``max_messages``: a second pair of nodes with ``queuey.limits.max_messages``
  = ``--length`` for the bench application; two queues, measured empty, then
  flooded as in ``reject_measured``: stored over both at the end.

Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200  # noqa: E402
from bench.flow_load import call, connect, expect, queue_name  # noqa: E402
from bench.servers import Server, storage_settings  # noqa: E402

BATCH = 10
DEADLINE = 60.0
#: The API nodes per backend, numbered.
NODES = {"sqlite": (1,), "cassandra": (1, 2)}


def log(message: str) -> None:
    print(f"[flow-lengths] {message}", file=sys.stderr, flush=True)


class Pair:
    """The API nodes on one fresh store (``extra``: more app settings lines)."""

    def __init__(self, backend: str, workdir: Path, extra: str = "") -> None:
        self.storage = storage_settings(backend, workdir) + extra
        self.servers = [
            Server(backend, workdir, workers=2, storage=self.storage, name=f"len-{backend}-{n}")
            for n in (NODES[backend])
        ]
        self.ports = [s.port for s in self.servers]

    def create(self, tag: str, **flow) -> str:
        name = queue_name(tag)
        conn = connect(self.ports[0])
        try:
            expect(conn, "POST", "/queue", {"queue_name": name, "partitions": 4, **flow})
        finally:
            conn.close()
        return name

    def stored(self, queue: str) -> int:
        conn = connect(self.ports[0])
        try:
            return expect(conn, "GET", f"/queue/{queue}/stats")["messages"]
        finally:
            conn.close()

    def metric(self, name: str, queue: str) -> list[float | None]:
        """The series of ``queue`` in each node's ``/metrics`` (None when absent)."""
        found = []
        for port in self.ports:
            conn = connect(port)
            try:
                conn.request("GET", "/metrics")
                text = conn.getresponse().read().decode()
            finally:
                conn.close()
            hit = re.search(rf'^{name}\{{[^}}]*queue="{queue}"[^}}]*\}} (\S+)$', text, re.M)
            found.append(float(hit.group(1)) if hit else None)
        return found

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def flood(ports: list[int], queues: list[str], writers: int, seconds: float, pace: float = 0.0):
    """``writers`` threads post batches of :data:`BATCH` round the ``queues``
    for ``seconds`` (each post ``pace`` s after the last when given):
    answers by status, messages accepted, seconds to the first 507."""
    statuses: Counter[int] = Counter()
    first_full: list[float] = []
    lock = threading.Lock()
    started = time.monotonic()
    batch = {"messages": [{"body": BODY_200} for _ in range(BATCH)]}

    def writer(n: int) -> None:
        conn = connect(ports[n % len(ports)])
        k = 0
        while time.monotonic() - started < seconds:
            queue = queues[(n + k) % len(queues)]
            k += 1
            status, _ = call(conn, "POST", f"/queue/{queue}/batch", batch)
            with lock:
                statuses[status] += 1
                if status == 507 and not first_full:
                    first_full.append(time.monotonic() - started)
            if pace:
                time.sleep(pace)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(statuses), statuses[201] * BATCH, (first_full or [None])[0]


def wait_measured(pair: Pair, queue: str, depth: int) -> float:
    started = time.monotonic()
    while any(found != depth for found in pair.metric("queuey_queue_depth", queue)):
        if time.monotonic() - started > DEADLINE:
            raise RuntimeError(f"{queue} not measured at {depth} within {DEADLINE}s")
        time.sleep(0.25)
    return time.monotonic() - started


def reject(pair: Pair, args, prefill: bool) -> dict:
    queue = pair.create("rej", max_length=args.length)
    waited = None
    if prefill:  # half its length, over the nodes in turn (a refusal ends it)
        conns = [connect(port) for port in pair.ports]
        batch = {"messages": [{"body": BODY_200} for _ in range(BATCH)]}
        try:
            for n in range(args.length // 2 // BATCH):
                if call(conns[n % len(conns)], "POST", f"/queue/{queue}/batch", batch)[0] != 201:
                    break
        finally:
            for conn in conns:
                conn.close()
        waited = wait_measured(pair, queue, pair.stored(queue))
    before = pair.stored(queue)
    statuses, accepted, first_full = flood(pair.ports, [queue], args.writers, args.seconds)
    stored = pair.stored(queue)
    log(f"reject {'measured' if prefill else 'new'}: {stored} stored of {args.length}")
    return {
        "max_length": args.length,
        "stored_before": before,
        "waited_for_measurement_s": None if waited is None else round(waited, 2),
        "answers": statuses,
        "accepted": accepted,
        "stored": stored,
        "over_by": stored - args.length,
        "first_507_s": None if first_full is None else round(first_full, 2),
    }


def drop_head(pair: Pair, args) -> dict:
    queue = pair.create("head", max_length=args.length, overflow="drop_head")
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(pair.stored(queue))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample)
    sampler.start()
    per_writer = args.writers / (args.rate / BATCH)
    try:
        statuses, accepted, _ = flood(pair.ports, [queue], args.writers, args.seconds, per_writer)
    finally:
        done.set()
        sampler.join()
    time.sleep(12)  # one more pass of each node's refresher
    dropped = sum(found or 0 for found in pair.metric("queuey_flow_dropped_total", queue))
    stored = pair.stored(queue)
    log(f"drop_head: largest {max(samples)} of {args.length}, dropped {dropped}")
    return {
        "max_length": args.length,
        "rate_per_s": round(accepted / args.seconds),
        "answers": statuses,
        "accepted": accepted,
        "largest_stored": max(samples),
        "mean_stored": round(sum(samples) / len(samples)),
        "stored_after_a_pass": stored,
        "dropped": dropped,
        "accounted": stored + dropped == accepted,
    }


def max_messages(backend: str, workdir: Path, args) -> dict:
    pair = Pair(backend, workdir, f"queuey.limits.max_messages = {args.length}\n")
    try:
        queues = [pair.create("quota"), pair.create("quota")]
        for queue in queues:
            wait_measured(pair, queue, 0)
        statuses, accepted, first_full = flood(pair.ports, queues, args.writers, args.seconds)
        stored = sum(pair.stored(q) for q in queues)
        log(f"max_messages: {stored} stored of {args.length}")
        return {
            "max_messages": args.length,
            "answers": statuses,
            "stored": stored,
            "over_by": stored - args.length,
            "first_507_s": None if first_full is None else round(first_full, 2),
        }
    finally:
        pair.stop()


def run(backend: str, args) -> dict:
    found: dict = {}
    with tempfile.TemporaryDirectory(prefix="queuey-lengths-") as tmp:
        pair = Pair(backend, Path(tmp))
        try:
            log(f"{backend}: reject_new")
            found["reject_new"] = reject(pair, args, prefill=False)
            log(f"{backend}: reject_measured")
            found["reject_measured"] = reject(pair, args, prefill=True)
            log(f"{backend}: drop_head")
            found["drop_head"] = drop_head(pair, args)
        finally:
            pair.stop()
    with tempfile.TemporaryDirectory(prefix="queuey-lengths-") as tmp:
        log(f"{backend}: max_messages")
        found["max_messages"] = max_messages(backend, Path(tmp), args)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "cassandra", "both"), default="both")
    parser.add_argument("--length", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=400.0)
    args = parser.parse_args()
    backends = ("sqlite", "cassandra") if args.backend == "both" else (args.backend,)
    result = {
        "nodes": "granian, 2 workers each; SQLite 1 node, Cassandra 2; stats.interval 10 s",
        "writers": args.writers,
        "batch": BATCH,
        "seconds": args.seconds,
    }
    for backend in backends:
        result[backend] = run(backend, args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

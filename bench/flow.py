"""Flow control measured on real API nodes: fair queues, rate limits, pause.

    python bench/flow.py [--backend sqlite|cassandra|both] [--only fairness,rate,pause]
                         [--flood 100000] [--seconds 60] [--rate 500] [--rate-seconds 30]
                         [--pause-trials 5]

Each backend runs **two API nodes** (``pserve`` with granian, 2 worker
processes each, as ``bench/servers.py`` starts them) on one store: one SQLite
file, or the harness Cassandra node (a fresh ``queuey_bench`` keyspace). The
settings are changed as a user would, through the REST routes
and messages carry their ``group``.

* ``fairness``: nine groups trickle 10 messages a second each (one message
  per post) while 4 consumers drain (``reserve`` limit 10, ``wait`` 1, then
  ``ack``); 2 s in, one more group posts ``--flood`` messages at once
  (batches of 100 from 4 writers). The trickle goes on for ``--seconds`` and
  until the flood is drained. Post -> delivery of the
  trickling groups' messages (from just before the post is sent to the moment
  a consumer holds the message), p50 / p99, on a fair queue and on a plain
  one, and ``unloaded``: the same trickle with no flood. ``while_flooded``
  keeps the messages posted between the flood's start and its last delivery.
  Goal: on the fair queue, ``while_flooded`` p99 within 2 s of the unloaded
  p99. On SQLite the load goes to one node (the real server), on Cassandra to
  both.
* ``rate``: a subscription ``rate`` of ``--rate`` messages a second on a
  queue filled beforehand; 4 consumers on both nodes reserve (``limit`` 100,
  ``wait`` 0) and ack as fast as they can for ``--rate-seconds``: the rate
  delivered and its error against the setting (goal: within 10 %), over the
  whole run (the first second's burst included) and after the first 5 s.
  Then ``post_rate``: 4 writers post batches of 10 as fast as they can for 10 s
  to a queue with ``post_rate`` = ``--rate``: the rate accepted and the posts
  refused (429).
* ``pause``: 4 consumers on both nodes reserve continuously (``limit`` 10,
  ``wait`` 1, releasing what they get so the queue never runs dry); the
  subscription is paused through node 1, then resumed through node 2, in
  ``--pause-trials`` trials. Messages any node handed out after the pause call
  returned, by when the reserve's answer came (0 -- 0.5 s, 0.5 -- 1 s, 1 -- 2 s,
  over 2 s after), and those handed out by a reserve *sent* more than
  ``queuey.metadata_cache_seconds`` (1 s) after it: the bound, goal 0.

Prints one JSON object on stdout (``bench/run.py`` collects it); progress on
stderr. The nodes, Cassandra's JVM and this load generator share the cores:
run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import BODY_200  # noqa: E402
from bench.flow_load import (  # noqa: E402
    TRICKLE_PER_S,
    Consumers,
    FlowDoor,
    ReserveLog,
    Trickle,
    call,
    connect,
    expect,
    flooder,
    queue_name,
    trickler,
)
from bench.servers import Server, fresh_keyspace, storage_settings  # noqa: E402
from bench.workqueue import read_delay  # noqa: E402
from bench.workqueue_load import create_queue, fill  # noqa: E402

MEASUREMENTS = ("fairness", "rate", "pause")
#: This run's keyspace (dropped at its end): a benchmark starting beside it
#: drops the keyspace it uses.
KEYSPACE = f"queuey_bench_flow_{os.getpid()}"
PARTITIONS = 8
TRICKLE_GROUPS = 9
FLOOD_AT = 2.0
#: The nodes' ``queuey.metadata_cache_seconds`` (the default): the pause bound.
CACHE_SECONDS = 1.0
PAUSE_WATCH = 3.0
BUCKETS = ((0.0, 0.5, "0-0.5s"), (0.5, 1.0, "0.5-1s"), (1.0, 2.0, "1-2s"), (2.0, 1e9, ">2s"))


def log(message: str) -> None:
    print(f"[flow] {message}", file=sys.stderr, flush=True)


class Nodes:
    """Two API nodes (granian, 2 workers each) on one store."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self.storage = storage_settings(backend, workdir, KEYSPACE)
        self.settle = read_delay(self.storage) + CACHE_SECONDS + 0.5
        self.servers: list[Server] = []
        for n in (1, 2):
            log(f"{backend}: starting API node {n}")
            self.servers.append(
                Server(
                    backend, workdir, workers=2, storage=self.storage, name=f"flow-{backend}-{n}"
                )
            )
        self.ports = [server.port for server in self.servers]

    def door(self) -> FlowDoor:
        return FlowDoor(self.ports[0])

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        if self.backend == "cassandra":
            from harness import cassandra

            cluster = cassandra.ensure_running(1)
            fresh_keyspace(cluster.contact_points, cluster.port, KEYSPACE)


# ---------------------------------------------------------------- fairness


def fairness_run(nodes: Nodes, ports: list[int], fair: bool, flood: int, seconds: float) -> dict:
    queue = queue_name("fair" if fair else "plain")
    conn = connect(ports[0])
    expect(conn, "POST", "/queue", {"queue_name": queue, "partitions": PARTITIONS})
    conn.close()
    if fair:
        door = nodes.door()
        door.set_queue(queue, fair=True)
        door.close()
    time.sleep(CACHE_SECONDS + 0.2)
    run = Trickle()
    reserves = ReserveLog()
    consumers = Consumers(ports, queue, reserves, limit=10, wait=1, on_batch=run.on_batch)
    consumers.start()
    started = time.perf_counter()
    stop = threading.Event()
    groups = [f"tenant{g}" for g in range(TRICKLE_GROUPS)]
    threads = [
        threading.Thread(target=trickler, args=(ports[i % len(ports)], queue, g, stop, run))
        for i, g in enumerate(groups)
    ]
    for thread in threads:
        thread.start()
    flood_started, flood_posting = None, None
    if flood:
        time.sleep(FLOOD_AT)
        flood_started = time.perf_counter()
        flood_posting = flooder(ports, queue, flood, run)
    # The trickle goes on for ``seconds`` and until the flood is drained.
    deadline = time.perf_counter() + nodes.settle + 120 + flood / 100
    while not (run.errors or reserves.errors) and time.perf_counter() < deadline:
        if time.perf_counter() >= started + seconds and run.flood_delivered >= flood:
            break
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join()
    deadline = time.perf_counter() + nodes.settle + 60
    while not (run.errors or reserves.errors) and time.perf_counter() < deadline:
        if run.all_delivered():
            break
        time.sleep(0.2)
    consumers.stop()
    figures: dict = {
        "fair": fair,
        "trickle": run.figures(),
        "duplicates": run.duplicates,
        "unavailable": {"posts": run.unavailable, "reserves_acks": reserves.unavailable},
        "reserves": len(reserves.reserves),
        "messages_per_reserve": round(reserves.delivered() / max(1, len(reserves.reserves)), 2),
        "errors": (run.errors + reserves.errors)[:5],
    }
    if flood:
        drained = run.flood_last - flood_started if run.flood_delivered >= flood else None
        figures["while_flooded"] = run.figures(flood_started, run.flood_last or float("inf"))
        figures["flood"] = {
            "messages": flood,
            "delivered": run.flood_delivered,
            "posted_in_s": round(flood_posting, 2),
            "drained_in_s": round(drained, 2) if drained else None,
            "drain_per_s": round(flood / drained) if drained else None,
        }
    return figures


def fairness(nodes: Nodes, args: argparse.Namespace) -> dict:
    ports = nodes.ports[:1] if nodes.backend == "sqlite" else nodes.ports
    out: dict = {"api_nodes_loaded": len(ports), "trickle": f"{TRICKLE_GROUPS} x {TRICKLE_PER_S}/s"}
    log(f"{nodes.backend}: fairness, unloaded")
    out["unloaded"] = fairness_run(nodes, ports, False, 0, min(args.seconds, 20))
    for fair in (True, False):
        log(f"{nodes.backend}: fairness, flood of {args.flood}, fair={fair}")
        out["fair_on" if fair else "fair_off"] = fairness_run(
            nodes, ports, fair, args.flood, args.seconds
        )
    base = out["unloaded"]["trickle"]["p99_ms"]
    loaded = out["fair_on"]["while_flooded"]["p99_ms"]
    out["goal"] = "fair_on while_flooded p99 <= unloaded p99 + 2000 ms"
    out["met"] = base is not None and loaded is not None and loaded <= base + 2000
    return out


# ---------------------------------------------------------------- rates


def subscription_rate(nodes: Nodes, rate: float, seconds: float) -> dict:
    queue = create_queue(nodes.ports[0])
    door = nodes.door()
    door.set_subscription(queue, "default", rate=rate)
    fill(nodes.ports, queue, int(rate * seconds * 1.5) + 1000)
    time.sleep(nodes.settle)
    reserves = ReserveLog()
    consumers = Consumers(nodes.ports, queue, reserves, limit=100, wait=0).start()
    started = time.perf_counter()
    time.sleep(seconds)
    ended = time.perf_counter()
    consumers.stop()
    door.close()
    whole = reserves.delivered(started, ended) / (ended - started)
    steady = reserves.delivered(started + 5, ended) / (ended - started - 5)
    return {
        "rate": rate,
        "seconds": seconds,
        "delivered_per_s": round(whole, 1),
        "error_pct": round((whole - rate) / rate * 100, 2),
        "after_5s_per_s": round(steady, 1),
        "after_5s_error_pct": round((steady - rate) / rate * 100, 2),
        "reserves_per_s": round(len(reserves.reserves) / seconds),
        "unavailable": reserves.unavailable,
        "errors": reserves.errors[:5],
        "met": abs(whole - rate) <= 0.1 * rate and not reserves.errors,
    }


def post_rate(nodes: Nodes, rate: float, seconds: float = 10.0) -> dict:
    queue = create_queue(nodes.ports[0])
    door = nodes.door()
    door.set_queue(queue, post_rate=rate)
    time.sleep(CACHE_SECONDS + 0.5)
    lock = threading.Lock()
    accepted: list[float] = []
    refused, errors = [0], []
    started = time.perf_counter()
    until = started + seconds

    def writer(port: int) -> None:
        conn = connect(port)
        batch = {"messages": [{"body": BODY_200} for _ in range(10)]}
        try:
            while time.perf_counter() < until:
                status, answer = call(conn, "POST", f"/queue/{queue}/batch", batch)
                now = time.perf_counter()
                with lock:
                    if status == 201:
                        accepted.extend([now] * 10)
                    elif status == 429:
                        refused[0] += 1
                    else:
                        errors.append(f"{status} {answer}"[:300])
                        return
        finally:
            conn.close()

    writers = [threading.Thread(target=writer, args=(p,)) for p in nodes.ports * 2]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    door.close()
    whole = sum(1 for at in accepted if at < until) / seconds
    steady = sum(1 for at in accepted if started + 2 <= at < until) / (seconds - 2)
    return {
        "post_rate": rate,
        "seconds": seconds,
        "accepted_per_s": round(whole, 1),
        "error_pct": round((whole - rate) / rate * 100, 2),
        "after_2s_per_s": round(steady, 1),
        "refused_posts_per_s": round(refused[0] / seconds, 1),
        "errors": errors[:5],
    }


def rates(nodes: Nodes, args: argparse.Namespace) -> dict:
    log(f"{nodes.backend}: subscription rate {args.rate}/s for {args.rate_seconds} s")
    out = {"subscription": subscription_rate(nodes, args.rate, args.rate_seconds)}
    log(f"{nodes.backend}: post_rate {args.rate}/s")
    out["post"] = post_rate(nodes, args.rate)
    return out


# ---------------------------------------------------------------- pause


def pause(nodes: Nodes, args: argparse.Namespace) -> dict:
    queue = create_queue(nodes.ports[0])
    door = nodes.door()
    fill(nodes.ports, queue, 2000)
    time.sleep(nodes.settle)
    reserves = ReserveLog()
    consumers = Consumers(nodes.ports, queue, reserves, limit=10, wait=1, finish="release")
    consumers.start()
    node_a, node_b = connect(nodes.ports[0]), connect(nodes.ports[1])
    buckets = {label: 0 for _, _, label in BUCKETS}
    after_bound, flowing_in = 0, []
    try:
        for trial in range(args.pause_trials):
            resumed = time.perf_counter()
            if trial:
                door.resume(queue, "default", conn=node_b)
            if not wait_flowing(reserves, resumed, 30):
                raise RuntimeError("deliveries did not resume on both nodes within 30 s")
            flowing_in.append(time.perf_counter() - resumed)
            time.sleep(0.5)
            door.pause(queue, "default", conn=node_a)
            paused = time.perf_counter()
            time.sleep(PAUSE_WATCH)
            with reserves.lock:
                late = [r for r in reserves.reserves if r.bodies and r.received > paused]
            for r in late:
                for low, high, label in BUCKETS:
                    if low <= r.received - paused < high:
                        buckets[label] += len(r.bodies)
                if r.sent > paused + CACHE_SECONDS:
                    after_bound += len(r.bodies)
    finally:
        consumers.stop()
        node_a.close()
        node_b.close()
        door.close()
    return {
        "trials": args.pause_trials,
        "handed_out_after_pause": buckets,
        "from_reserves_sent_after_bound": after_bound,
        "bound_s": CACHE_SECONDS,
        "resume_to_flowing_on_both_s": [round(s, 2) for s in flowing_in[1:]],
        "unavailable": reserves.unavailable,
        "errors": reserves.errors[:5],
        "met": after_bound == 0 and not reserves.errors,
    }


def wait_flowing(reserves: ReserveLog, since: float, timeout: float) -> bool:
    """Whether both nodes handed out a message after ``since`` within ``timeout``."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline and not reserves.errors:
        with reserves.lock:
            nodes = {r.node for r in reserves.reserves if r.bodies and r.received > since}
        if nodes == {0, 1}:
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------- main

RUNS = {"fairness": fairness, "rate": rates, "pause": pause}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--only", default=",".join(MEASUREMENTS))
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="of trickle per run")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--rate-seconds", type=float, default=30.0)
    parser.add_argument("--pause-trials", type=int, default=5)
    args = parser.parse_args()
    chosen = [m for m in args.only.split(",") if m]
    unknown = sorted(set(chosen) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"--only takes {', '.join(MEASUREMENTS)}; not {unknown}")
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    out: dict = {
        "benchmark": "flow",
        "cpus": os.cpu_count(),
        "api_nodes": 2,
        "workers_per_node": 2,
        "options": vars(args),
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="queuey-flow-") as tmp:
        for backend in backends:
            nodes = Nodes(backend, Path(tmp))
            try:
                found = out["results"][backend] = {}
                for name in chosen:
                    found[name] = RUNS[name](nodes, args)
                    # Each figure as it comes: a run cut short keeps what it measured.
                    log(f"{backend} {name}: {json.dumps(found[name])}")
            finally:
                nodes.stop()
    print(json.dumps(out, indent=2))
    return 1 if failed(out["results"]) else 0


def failed(figures) -> bool:
    """Whether any measurement saw errors (a goal missed is a figure, not a failure)."""
    if isinstance(figures, dict):
        return bool(figures.get("errors")) or any(failed(v) for v in figures.values())
    return False


if __name__ == "__main__":
    sys.exit(main())

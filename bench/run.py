"""Run every benchmark and print one JSON document (``make bench``).

    python bench/run.py ["script.py [its options]" ...]

Each benchmark is a script printing one JSON object on stdout; a failing one is
reported with its exit code and the tail of its stderr (and what it printed, if
that is JSON), and the others still run. When the work-queue, API and RabbitMQ
benchmarks ran, ``comparison`` holds Queuey's figures over RabbitMQ's from the
same run. When the work-queue benchmark ran on Cassandra (2 API nodes, one run
per work-queue design), ``comparison.workqueue_cassandra`` holds each design's
figures of the issue's goals (rate, reserve p50, post -> first delivery p50,
CQL requests per delivered message) and ``comparison.goals`` says which were met.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    "rabbitmq.py",
    "api.py",
    "cassandra_inserts.py",
    "soak.py",
    "consumers.py",
    "spark.py",
    "durability.py",
    "workqueue.py",
    "sqs.py",
    "scrape.py",
    "export.py",
    "isolation.py",
    "spool.py",
    "filters.py",
    "flow.py",
]
SHARING = (
    "one box: each benchmark runs its servers (Queuey's granian workers, the "
    "Cassandra and ZooKeeper JVMs, the RabbitMQ broker) and its load generator (wrk "
    "for Queuey, PerfTest for RabbitMQ) on the same {cpus} cores, one benchmark "
    "after another; the harness Cassandra node stays up (idle) during the others. "
    "Each figure says the CPU seconds its server and its load generator used"
)


def run(script: str, options: list[str]) -> dict:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *options],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = round(time.monotonic() - started, 1)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    if proc.returncode != 0:
        failed = {"error": f"exit {proc.returncode}", "stderr": proc.stderr[-2000:]}
        if result is not None:
            failed["partial"] = result
        else:
            failed["stdout"] = proc.stdout[-2000:]
        failed["seconds"] = elapsed
        return failed
    if result is None:
        return {"error": "no JSON on stdout", "stdout": proc.stdout[-2000:], "seconds": elapsed}
    result["seconds"] = elapsed
    return result


def ratio(queuey: float | None, rabbitmq: float | None) -> float | None:
    if not queuey or not rabbitmq:
        return None
    return round(queuey / rabbitmq, 3)


def figures_of(results: dict, name: str) -> dict:
    """A benchmark's ``results``, also from the partial output of one that failed."""
    result = results.get(name, {})
    return result.get("results") or result.get("partial", {}).get("results") or {}


#: The goals of the performance issue: (figure, backends, target ratio or rate).
GOALS = [
    ("single_post_over_confirmed_publish", "sqlite", "rate", 1.5),
    ("single_post_over_confirmed_publish", "cassandra", "rate", 1.0),
    ("batch_post_over_tx_publish", "sqlite", "rate", 3.0),
    ("batch_post_over_tx_publish", "cassandra", "rate", 3.0),
    ("reserve_ack_over_consume_ack", "sqlite", "rate", 1.0),
    ("reserve_ack_over_consume_ack", "cassandra", "rate", 1.0),
]
#: p99 of a single post no worse than RabbitMQ's confirmed publish: ratio <= 1.
P99_GOALS = [("single_post_over_confirmed_publish", backend) for backend in ("sqlite", "cassandra")]
CONSUMER_GROUP_GOAL = 30_000
#: The issue's goals for work queues on Cassandra, 2 API nodes (bench/workqueue.py),
#: per design: (figure, "min" or "max", target).
WORKQUEUE_GOALS = [
    ("reserve_ack_per_s", "min", 15_000),
    ("reserve_ack_over_consume_ack", "min", 0.4),
    ("reserve_p50_ms", "max", 5.0),
    ("post_to_delivery_p50_ms", "max", 10.0),
    ("lwt_per_delivered_message", "max", 0.01),
    ("write_per_delivered_message", "max", 1.5),
    ("single_post_lwt_per_delivered_message", "max", 0.01),
    ("single_post_write_per_delivered_message", "max", 1.5),
]


def reserve_ack_run(figures: dict) -> dict:
    """A work-queue result's main reserve+ack run: batches of 100, else the largest."""
    runs = {k: v for k, v in figures.items() if k.startswith("reserve_ack_batch_")}
    if not runs:
        return {}
    return runs.get("reserve_ack_batch_100") or max(runs.values(), key=lambda r: r["batch"])


def workqueue_cassandra(results: dict, consume: float | None) -> dict:
    """Per Cassandra work-queue design (2 API nodes): the figures of the issue's goals."""
    out = {}
    for key, figures in figures_of(results, "workqueue").items():
        if not key.startswith("cassandra"):
            continue
        run = reserve_ack_run(figures)
        cql = run.get("cql_per_delivered_message", {})
        single = figures.get("single_post_reserve_ack", {}).get("cql_per_delivered_message", {})
        out[key] = {
            "api_nodes": figures.get("api_nodes"),
            "batch": run.get("batch"),
            "reserve_ack_per_s": run.get("per_second"),
            "reserve_ack_over_consume_ack": ratio(run.get("per_second"), consume),
            "reserve_p50_ms": run.get("reserve", {}).get("p50_ms"),
            "post_to_delivery_p50_ms": figures.get("post_to_delivery", {}).get("p50_ms"),
            # Where the drain's CPU went (API nodes, Cassandra, load generator),
            # per message, and the rate the box's cores would bound it to.
            **run.get("drain_cpu", {}),
            **{f"{kind}_per_delivered_message": cql.get(kind) for kind in ("read", "write", "lwt")},
            **{
                f"single_post_{kind}_per_delivered_message": single.get(kind)
                for kind in ("read", "write", "lwt")
            },
        }
    return out


def workqueue_goals(designs: dict) -> list[dict]:
    found = []
    for key, figures in designs.items():
        for figure, sense, target in WORKQUEUE_GOALS:
            value = figures.get(figure)
            met = value is not None and (value >= target if sense == "min" else value <= target)
            found.append(
                {
                    "goal": f"workqueue {key} ({figures.get('api_nodes')} API nodes) {figure} "
                    f"{'>=' if sense == 'min' else '<='} {target}",
                    "value": value,
                    "met": met,
                }
            )
    return found


def compare(results: dict) -> dict:
    """Queuey / RabbitMQ for the figures that do the same job, from this run,
    and whether each goal was met."""
    peer = figures_of(results, "rabbitmq")
    if not peer:
        # Without RabbitMQ's figures, the work-queue goals that need none.
        designs = workqueue_cassandra(results, None)
        if not designs:
            return {}
        return {"workqueue_cassandra": designs, "goals": workqueue_goals(designs)}
    consume = peer["consume_ack"]["per_second"]
    confirmed = peer["confirmed_publish"]
    tx = peer.get("tx_publish", {})
    out: dict = {
        "rabbitmq": {
            "consume_ack_per_s": consume,
            "confirmed_publish_per_s": confirmed["per_second"],
            "confirmed_publish_p50_ms": confirmed["p50_ms"],
            "confirmed_publish_p99_ms": confirmed["p99_ms"],
            "tx_publish_per_s": tx.get("per_second"),
        },
        "single_post_over_confirmed_publish": {},
        "batch_post_over_tx_publish": {},
        "reserve_ack_over_consume_ack": {},
        "post_to_delivery_over_publish_to_delivery": {},
    }
    delivery = peer.get("publish_to_delivery", {})
    if delivery:
        out["rabbitmq"]["publish_to_delivery_p50_ms"] = delivery["p50_ms"]
        out["rabbitmq"]["publish_to_delivery_p99_ms"] = delivery["p99_ms"]
    for backend, figures in figures_of(results, "api").items():
        single = figures.get("single_post")
        if single:
            out["single_post_over_confirmed_publish"][backend] = {
                "rate": ratio(single["per_second"], confirmed["per_second"]),
                "p50_latency": ratio(single["p50_ms"], confirmed["p50_ms"]),
                "p99_latency": ratio(single["p99_ms"], confirmed["p99_ms"]),
            }
        batch = figures.get("batch_post")
        if batch and tx:
            out["batch_post_over_tx_publish"][backend] = {
                "rate": ratio(batch["per_second"], tx["per_second"])
            }
        reserve = figures.get("reserve_ack")
        if reserve:
            out["reserve_ack_over_consume_ack"][backend] = {
                "rate": ratio(reserve["per_second"], consume)
            }
    for backend, figures in figures_of(results, "workqueue").items():
        latency = figures.get("post_to_delivery")
        if latency and delivery:
            out["post_to_delivery_over_publish_to_delivery"][backend] = {
                "p50_latency": ratio(latency["p50_ms"], delivery["p50_ms"]),
                "p99_latency": ratio(latency["p99_ms"], delivery["p99_ms"]),
            }
    out["workqueue_cassandra"] = workqueue_cassandra(results, consume)
    out["goals"] = goals(out, results) + workqueue_goals(out["workqueue_cassandra"])
    out["how"] = (
        "rate ratios above 1 mean Queuey is faster; latency ratios above 1 mean Queuey "
        "is slower. Both sides under native load on the same cores: wrk against Queuey "
        "(bench/api.py), RabbitMQ's PerfTest against the broker (bench/rabbitmq.py). "
        "single post: 8 connections, one persistent message per request vs 8 "
        "publishers waiting for a confirm per persistent message; batch: 4 connections "
        "posting 100 messages per request vs 4 publishers committing transactions of "
        "100; reserve+ack: 4 HTTP workers reserving 100 and acking them vs the "
        "broker's consumer with prefetch 1000 and acks every 100; post to delivery: "
        "one producer, 4 long-polling consumers on both sides (Python clients)"
    )
    return out


def goals(comparison: dict, results: dict) -> list[dict]:
    """Each goal of the issue with this run's figure and whether it was met."""
    found = []
    for figure, backend, key, target in GOALS:
        value = comparison.get(figure, {}).get(backend, {}).get(key)
        found.append(
            {
                "goal": f"{figure} ({backend}) {key} >= {target}",
                "value": value,
                "met": value is not None and value >= target,
            }
        )
    for figure, backend in P99_GOALS:
        value = comparison.get(figure, {}).get(backend, {}).get("p99_latency")
        found.append(
            {
                "goal": f"{figure} ({backend}) p99 latency ratio <= 1",
                "value": value,
                "met": value is not None and value <= 1,
            }
        )
    consumption = results.get("consumers", {}).get("consumption") or []
    four = [run for run in consumption if run.get("workers") == 4]
    value = four[0]["messages_per_second"] if four else None
    found.append(
        {
            "goal": f"consumer group, 4 workers, 16 partitions >= {CONSUMER_GROUP_GOAL} msgs/s",
            "value": value,
            "met": value is not None and value >= CONSUMER_GROUP_GOAL,
        }
    )
    return found


def main() -> int:
    results = {}
    for spec in sys.argv[1:] or BENCHMARKS:
        script, *options = shlex.split(spec)
        results[script.removesuffix(".py")] = run(script, options)
    document = {"machine": {"cpus": os.cpu_count(), "sharing": SHARING.format(cpus=os.cpu_count())}}
    document.update(results)
    comparison = compare(results)
    if comparison:
        document["comparison"] = comparison
    print(json.dumps(document, indent=2))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

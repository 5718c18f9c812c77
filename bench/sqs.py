"""SQS endpoint benchmark: boto3 against a real Queuey server, beside the native API.

    python bench/sqs.py [--backend sqlite|cassandra|both] [--duration 10]
                        [--messages 10000] [--clients 4]

For each backend one server process (the settings of ``bench/api.py``) and
``--clients`` threads, each with its own boto3 client (JSON protocol, keep-alive)
or its own keep-alive HTTP connection for the native calls, in the same run:

* ``send_batch``: SendMessageBatch of 10 ~200-byte messages for ``--duration``
  seconds; ``native_post_batch_10``: ``POST /queue/{name}/batch`` of the same
  10 messages;
* ``receive_delete``: a queue holding ``--messages`` messages drained with
  ReceiveMessage (10 at a time, WaitTimeSeconds 1) then DeleteMessageBatch;
  ``native_reserve_ack_10``: the same drain with ``reserve`` (limit 10) and ``ack``.

Prints one JSON object on stdout (messages/s, the ratio SQS / native), progress on
stderr. Server and load share the cores; boto3's own request building, signing
and response parsing run in the load generator, so each phase also reports the
CPU seconds the server and the load generator spent. Not a test: compare medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import APP, BODY_200, SQS_SECRET, Server, request  # noqa: E402

BODY = json.dumps(BODY_200)
PARTITIONS = 8


def log(message: str) -> None:
    print(f"[sqs] {message}", file=sys.stderr, flush=True)


def client(port: int):
    return boto3.session.Session(
        aws_access_key_id=APP, aws_secret_access_key=SQS_SECRET, region_name="us-east-1"
    ).client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(retries={"max_attempts": 0}, max_pool_connections=2),
    )


def run_threads(count: int, work) -> float:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def make_queue(port: int, name: str) -> str:
    sqs = client(port)
    return sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "120"})["QueueUrl"]


def send_batches(port: int, url: str, clients: int, duration: float) -> dict:
    sent = [0] * clients
    failures = [0] * clients
    deadline = time.perf_counter() + duration
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]

    def work(index: int) -> None:
        sqs = client(port)
        while time.perf_counter() < deadline:
            answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            sent[index] += len(answer.get("Successful", []))
            failures[index] += len(answer.get("Failed", []))

    elapsed = run_threads(clients, work)
    return {
        "clients": clients,
        "messages": sum(sent),
        "failed": sum(failures),
        "per_second": round(sum(sent) / elapsed, 1),
    }


def native_batches(port: int, name: str, clients: int, duration: float) -> dict:
    sent = [0] * clients
    deadline = time.perf_counter() + duration
    payload = json.dumps({"messages": [{"body": BODY_200} for _ in range(10)]}).encode()

    def work(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < deadline:
            status, _ = request(conn, "POST", f"/queue/{name}/batch", payload)
            if status == 201:
                sent[index] += 10
        conn.close()

    elapsed = run_threads(clients, work)
    return {"clients": clients, "messages": sum(sent), "per_second": round(sum(sent) / elapsed, 1)}


def fill(port: int, name: str, messages: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    payload = json.dumps({"messages": [{"body": BODY_200} for _ in range(100)]}).encode()
    for _ in range(messages // 100):
        status, data = request(conn, "POST", f"/queue/{name}/batch", payload)
        assert status == 201, data
    conn.close()


def drained(got: list[set[str]], messages: int, elapsed: float) -> dict:
    """Figures of a drain: ``got`` holds the ids each client received."""
    received = set().union(*got)
    return {
        "clients": len(got),
        "messages": len(received),
        "duplicates": sum(map(len, got)) - len(received),
        "missed": messages - len(received),
        "per_second": round(len(received) / elapsed, 1),
    }


def receive_delete(port: int, url: str, clients: int, messages: int, timeout: float) -> dict:
    got: list[set[str]] = [set() for _ in range(clients)]
    empty_deadline = time.perf_counter() + timeout

    def work(index: int) -> None:
        sqs = client(port)
        while time.perf_counter() < empty_deadline:
            answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            batch = answer.get("Messages", [])
            if not batch:
                if sum(map(len, got)) >= messages:
                    return
                continue
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
                ],
            )
            got[index].update(m["MessageId"] for m in batch)

    return drained(got, messages, run_threads(clients, work))


def native_reserve_ack(port: int, name: str, clients: int, messages: int, timeout: float) -> dict:
    got: list[set[str]] = [set() for _ in range(clients)]
    deadline = time.perf_counter() + timeout

    def work(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.perf_counter() < deadline:
            payload = json.dumps({"limit": 10, "wait": 1}).encode()
            status, data = request(conn, "POST", f"/queue/{name}/reserve", payload)
            batch = json.loads(data)["messages"] if status == 200 else []
            if not batch:
                if sum(map(len, got)) >= messages:
                    break
                continue
            receipts = json.dumps({"receipts": [m["receipt"] for m in batch]}).encode()
            request(conn, "POST", f"/queue/{name}/ack", receipts)
            got[index].update(m["message_id"] for m in batch)
        conn.close()

    return drained(got, messages, run_threads(clients, work))


class CPU:
    """CPU seconds the server process and this load generator spent in a phase:
    with both on the same cores, what the client costs is not the server's."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def __enter__(self) -> CPU:
        self.before = (sum(self.server.ps.cpu_times()[:2]), sum(os.times()[:2]))
        return self

    def __exit__(self, *exc) -> None:
        server, client = sum(self.server.ps.cpu_times()[:2]), sum(os.times()[:2])
        self.figures = {
            "server_cpu_s": round(server - self.before[0], 1),
            "client_cpu_s": round(client - self.before[1], 1),
        }


def measured(server: Server, run) -> dict:
    with CPU(server) as cpu:
        figures = run()
    figures.update(cpu.figures)
    return figures


def ratio(a: dict, b: dict) -> float | None:
    return round(a["per_second"] / b["per_second"], 2) if b["per_second"] else None


def bench_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict:
    server = Server(backend, workdir)
    stamp = int(time.time())
    try:
        log(f"{backend}: SendMessageBatch for {args.duration}s")
        url = make_queue(server.port, f"sqs-send-{stamp}")
        send = measured(server, lambda: send_batches(server.port, url, args.clients, args.duration))
        native_name = f"native-send-{stamp}"
        make_queue(server.port, native_name)
        log(f"{backend}: native batch posts of 10 for {args.duration}s")
        native_send = measured(
            server, lambda: native_batches(server.port, native_name, args.clients, args.duration)
        )
        drain_url = make_queue(server.port, f"sqs-drain-{stamp}")
        fill(server.port, f"sqs-drain-{stamp}", args.messages)
        if backend == "cassandra":
            time.sleep(2)  # the bench server's read delay
        log(f"{backend}: ReceiveMessage + DeleteMessageBatch of {args.messages}")
        drain = measured(
            server,
            lambda: receive_delete(
                server.port, drain_url, args.clients, args.messages, args.timeout
            ),
        )
        native_drain_name = f"native-drain-{stamp}"
        make_queue(server.port, native_drain_name)
        fill(server.port, native_drain_name, args.messages)
        if backend == "cassandra":
            time.sleep(2)
        log(f"{backend}: native reserve + ack of {args.messages}")
        native_drain = measured(
            server,
            lambda: native_reserve_ack(
                server.port, native_drain_name, args.clients, args.messages, args.timeout
            ),
        )
        return {
            "send_batch_10": send,
            "native_post_batch_10": native_send,
            "send_ratio_sqs_over_native": ratio(send, native_send),
            "receive_delete_batch_10": drain,
            "native_reserve_ack_10": native_drain,
            "receive_ratio_sqs_over_native": ratio(drain, native_drain),
            "server_peak_rss_mb": round(server.peak_rss / 2**20, 1),
        }
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    out = {
        "benchmark": "sqs",
        "cpus": os.cpu_count(),
        "cores": "server (one waitress process, 8 threads) and boto3 load share the cores",
        "message_bytes": len(BODY),
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="queuey-sqs-") as tmp:
        for backend in backends:
            out["results"][backend] = bench_backend(backend, args, Path(tmp))
    print(json.dumps(out, indent=2))
    missed = any(
        r[k].get("missed") for r in out["results"].values() for k in r if isinstance(r[k], dict)
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

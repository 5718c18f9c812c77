"""SQS endpoint benchmark: SQS beside the native API on a real Queuey server.

    python bench/sqs.py [--backend sqlite|cassandra|both] [--duration 10]
                        [--messages 10000] [--clients 4] [--wrk-duration 5]
                        [--wrk-messages 60000] [--runs 3]

For each backend one server (the settings of ``bench/api.py``: granian, two
worker processes) and two kinds of load on it, in the same run.

With a native load generator, ``wrk`` (C; its Lua scripts sign every SQS request
with AWS Signature V4, ``bench/wrk/sigv4.lua``, checked against botocore at the
start), ``--runs`` runs of ``--wrk-duration`` seconds each, the median reported:

* ``wrk_send_batch_10``: SendMessageBatch of 10 ~200-byte messages, 4
  connections (``sqs_send.lua``); ``wrk_native_post_batch_10``: ``POST
  /queue/{name}/batch`` of the same 10 messages (``post.lua``);
* ``wrk_receive_delete_10``: 4 connections, each a worker looping ReceiveMessage
  (10 at most, WaitTimeSeconds 0) then DeleteMessageBatch (``sqs_drain.lua``);
  ``wrk_native_reserve_ack_10``: the same with ``reserve`` (limit 10) and
  ``ack`` (``reserve_ack.lua``). Each run drains a queue of its own, filled
  beforehand with ``--wrk-messages`` messages so it never runs dry
  (``empty_answers`` counts the receives that found nothing).

With boto3, ``--clients`` threads, each with its own boto3 client (JSON protocol,
keep-alive) or its own keep-alive HTTP connection for the native calls:

* ``send_batch_10``: SendMessageBatch of 10 messages for ``--duration``
  seconds; ``native_post_batch_10``: ``POST /queue/{name}/batch`` of the same
  10 messages;
* ``receive_delete_batch_10``: a queue holding ``--messages`` messages drained
  with ReceiveMessage (10 at a time, WaitTimeSeconds 1) then DeleteMessageBatch;
  ``native_reserve_ack_10``: the same drain with ``reserve`` (limit 10) and ``ack``.

boto3's own request building, signing and response parsing run in Python on the
cores the server uses, so those figures mostly show the client's cost; the wrk
figures show the server's. Every phase reports the CPU seconds the server (all
its processes) and the load generator spent. Prints one JSON object on stdout
(messages/s, the ratios SQS / native), progress on stderr. Not a test: compare
medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import (  # noqa: E402
    APP,
    BODY_200,
    SQS_SECRET,
    WRK_DIR,
    Server,
    ensure_wrk,
    median_run,
    request,
    wrk,
    wrk_version,
)

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
    """CPU seconds the server (all its processes) and this load generator spent
    in a phase: with both on the same cores, what the client costs is not the
    server's."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def __enter__(self) -> CPU:
        self.before = (self.server.cpu(), sum(os.times()[:2]))
        return self

    def __exit__(self, *exc) -> None:
        server, client = self.server.cpu(), sum(os.times()[:2])
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


#: The instant the signer check signs at (botocore signs at the same one).
SIGN_AT = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
SEND_ENTRIES = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]


def sqs_env() -> dict[str, str]:
    """The credentials the SQS wrk scripts sign with."""
    return {"QUEUEY_SQS_ACCESS_KEY": APP, "QUEUEY_SQS_SECRET": SQS_SECRET}


def send_body(workdir: Path, url: str) -> Path:
    """The SendMessageBatch body of ``sqs_send.lua``: what boto3 sends."""
    path = workdir / f"send-{url.rsplit('/', 1)[-1]}.json"
    path.write_text(json.dumps({"QueueUrl": url, "Entries": SEND_ENTRIES}))
    return path


def check_signer(server: Server, url: str, workdir: Path) -> dict:
    """Sign one SendMessageBatch with ``sigv4.lua`` (through ``sqs_send.lua``
    under wrk) and the same request with botocore's SigV4Auth, both at
    :data:`SIGN_AT`; raise unless the Authorization headers are the same."""
    shown = workdir / "signed-request.txt"
    shown.unlink(missing_ok=True)
    environ = {
        **os.environ,
        **sqs_env(),
        "QUEUEY_WRK_DIR": str(WRK_DIR),
        "QUEUEY_WRK_BODY": str(send_body(workdir, url)),
        "QUEUEY_WRK_SIGN_AT": str(int(SIGN_AT.timestamp())),
        "QUEUEY_WRK_SHOW": str(shown),
    }
    argv = [ensure_wrk(), "-t1", "-c1", "-d1s", "-s", str(WRK_DIR / "sqs_send.lua"), server.url]
    subprocess.run(argv, env=environ, capture_output=True, check=True, timeout=60)
    head, _, body = shown.read_bytes().partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    method, path, _ = lines[0].split(" ")
    ours = headers.pop("Authorization")
    signed = {name: headers[name] for name in ("Host", "Content-Type", "X-Amz-Target")}
    theirs = AWSRequest(method=method, url=server.url + path, data=body, headers=signed)
    now = SIGN_AT.replace(tzinfo=None)  # botocore's clock: naive UTC
    with mock.patch("botocore.auth.get_current_datetime", return_value=now):
        SigV4Auth(Credentials(APP, SQS_SECRET), "sqs", "us-east-1").add_auth(theirs)
    if theirs.headers["Authorization"] != ours or theirs.headers["X-Amz-Date"] != headers.get(
        "X-Amz-Date"
    ):
        raise RuntimeError(
            f"sigv4.lua signs {ours!r}, botocore {theirs.headers['Authorization']!r}"
        )
    return {"signed_at": SIGN_AT.isoformat(), "authorization_same_as_botocore": True}


def fill_parallel(port: int, name: str, messages: int, connections: int = 4) -> None:
    """``messages`` posted in native batches of 100 over ``connections`` connections."""
    share = [messages // 100 // connections] * connections
    share[0] += messages // 100 - sum(share)
    payload = json.dumps({"messages": [{"body": BODY_200} for _ in range(100)]}).encode()
    errors: list[str] = []

    def work(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(share[index]):
            status, data = request(conn, "POST", f"/queue/{name}/batch", payload)
            if status != 201:
                errors.append(f"{status} {data[:200]!r}")
                break
        conn.close()

    run_threads(connections, work)
    if errors:
        raise RuntimeError(f"filling {name}: {errors[0]}")


def wrk_runs(runs: int, one_run) -> dict:
    """The median of ``runs`` runs of ``one_run(index)`` (each a :func:`wrk` result)."""
    return median_run([one_run(index) for index in range(runs)])


def wrk_drain_run(
    server: Server, backend: str, args: argparse.Namespace, name: str, sqs: bool
) -> dict:
    """One drain of a queue of its own, filled with ``--wrk-messages`` messages."""
    url = make_queue(server.port, name)
    started = time.perf_counter()
    fill_parallel(server.port, name, args.wrk_messages)
    log(f"{name}: {args.wrk_messages} messages in {time.perf_counter() - started:.1f}s")
    if backend == "cassandra":
        time.sleep(2.5)  # the bench server's read delay
    if sqs:
        env = {**sqs_env(), "QUEUEY_SQS_QUEUE_URL": url, "QUEUEY_WRK_LIMIT": "10"}
        figures = wrk(server, "sqs_drain.lua", "/", 4, 4, args.wrk_duration, env)
    else:
        env = {"QUEUEY_WRK_LIMIT": "10"}
        figures = wrk(server, "reserve_ack.lua", f"/queue/{name}", 4, 4, args.wrk_duration, env)
    figures["queue_messages"] = args.wrk_messages
    # A run that took every message spent its end on empty receives: its rate is too low.
    figures["ran_dry"] = figures["units"] >= args.wrk_messages
    if figures["ran_dry"]:
        log(f"{name}: the queue ran dry; give --wrk-messages more than {args.wrk_messages}")
    return figures


def bench_wrk(
    server: Server, backend: str, args: argparse.Namespace, workdir: Path, stamp: int
) -> dict:
    """The wrk phases: SQS and native, sends and drains, ``--runs`` runs each."""
    url = make_queue(server.port, f"wrk-sqs-send-{stamp}")
    results: dict = {"signer_check": check_signer(server, url, workdir)}
    log(f"{backend}: wrk SendMessageBatch x{args.runs}")
    env = {**sqs_env(), "QUEUEY_WRK_BODY": str(send_body(workdir, url))}
    results["wrk_send_batch_10"] = wrk_runs(
        args.runs, lambda _: wrk(server, "sqs_send.lua", "/", 4, 2, args.wrk_duration, env)
    )
    native = f"wrk-native-send-{stamp}"
    make_queue(server.port, native)
    message = workdir / "message.json"
    message.write_text(BODY)
    env = {"QUEUEY_WRK_BODY": str(message), "QUEUEY_WRK_BATCH": "10"}
    log(f"{backend}: wrk native batch posts of 10 x{args.runs}")
    results["wrk_native_post_batch_10"] = wrk_runs(
        args.runs,
        lambda _: wrk(server, "post.lua", f"/queue/{native}", 4, 2, args.wrk_duration, env),
    )
    log(f"{backend}: wrk ReceiveMessage + DeleteMessageBatch x{args.runs}")
    results["wrk_receive_delete_10"] = wrk_runs(
        args.runs,
        lambda i: wrk_drain_run(server, backend, args, f"wrk-sqs-drain-{stamp}-{i}", True),
    )
    log(f"{backend}: wrk native reserve + ack x{args.runs}")
    results["wrk_native_reserve_ack_10"] = wrk_runs(
        args.runs,
        lambda i: wrk_drain_run(server, backend, args, f"wrk-native-drain-{stamp}-{i}", False),
    )
    results["wrk_send_ratio_sqs_over_native"] = ratio(
        results["wrk_send_batch_10"], results["wrk_native_post_batch_10"]
    )
    results["wrk_receive_ratio_sqs_over_native"] = ratio(
        results["wrk_receive_delete_10"], results["wrk_native_reserve_ack_10"]
    )
    units = {
        "wrk_send_batch_10": "messages sent (entries the answers list as successful)",
        "wrk_native_post_batch_10": "messages posted (10 per request)",
        "wrk_receive_delete_10": "messages received and deleted",
        "wrk_native_reserve_ack_10": "messages reserved and acked",
    }
    for name, unit in units.items():
        results[name]["unit"] = unit
    return results


def bench_boto3(server: Server, backend: str, args: argparse.Namespace, stamp: int) -> dict:
    """The boto3 phases and their native counterparts (Python clients)."""
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
        lambda: receive_delete(server.port, drain_url, args.clients, args.messages, args.timeout),
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


def bench_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict:
    server = Server(backend, workdir)
    stamp = int(time.time())
    results: dict = {"server": server.description}
    try:
        if args.phases in ("all", "wrk"):
            results.update(bench_wrk(server, backend, args, workdir, stamp))
        if args.phases in ("all", "boto3"):
            server.peak_rss = server.rss()
            results.update(bench_boto3(server, backend, args, stamp))
        return results
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "cassandra", "both"])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--wrk-duration", type=float, default=5.0)
    parser.add_argument(
        "--wrk-messages",
        type=int,
        default=60_000,
        help="messages in the queue each wrk drain run starts from",
    )
    parser.add_argument("--runs", type=int, default=3, help="wrk runs per phase (median)")
    parser.add_argument("--phases", default="all", choices=["all", "wrk", "boto3"])
    args = parser.parse_args()
    backends = ["sqlite", "cassandra"] if args.backend == "both" else [args.backend]
    out = {
        "benchmark": "sqs",
        "cpus": os.cpu_count(),
        "cores": "the server (granian, 2 worker processes) and the load (wrk or boto3 "
        "threads) share the cores",
        "load": f"wrk {wrk_version()} ({WRK_DIR.relative_to(ROOT)}/sqs_*.lua, signing with "
        "sigv4.lua) and boto3",
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

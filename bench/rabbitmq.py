"""The peer to beat: RabbitMQ from Debian, measured with pika on this box.

    python bench/rabbitmq.py [--messages 100000] [--seconds 10] [--latency-messages 300]

Installs ``rabbitmq-server`` with apt when it is missing (the benchmark's own
set-up: ``apt-get update`` then ``apt-get install -y rabbitmq-server``), starts a
broker of its own on loopback (free ports for AMQP, Erlang distribution and epmd,
node name, data, logs and config in a temporary directory, so a system broker on
5672/25672/4369 is never touched), waits until it answers, and measures:

* ``consume_ack``: one consumer, prefetch 1000, acks batched (``multiple=True``
  every 100 deliveries) draining a durable queue of ``--messages`` persistent
  ~200-byte messages, in messages/s;
* ``confirmed_publish``: 8 publishers, each on its own connection, publishing
  persistent ~200-byte messages and waiting for the publisher confirm of each
  one: messages/s and per-message latency p50/p99;
* ``tx_publish``: 4 publishers committing transactions of 100 persistent
  messages: messages/s and per-commit latency p50/p99;
* ``publish_to_delivery``: the peer of ``bench/workqueue.py``'s figure: 4
  consumers (prefetch 1) wait while one publisher sends one persistent message at
  a time with a confirm and waits for its delivery: p50/p99 from just before the
  publish to the moment a consumer holds it.

Everything it started (the broker, its Erlang helpers and its epmd) is stopped
when it ends, also on failure. Prints one JSON object on stdout; progress on
stderr. Load and broker share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pika
import psutil
from pika.exceptions import AMQPConnectionError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port  # noqa: E402

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
BODY = json.dumps(
    {
        "signature": "js::RunScript | EnterBaseline",
        "product": "Firefox",
        "version": "146.0",
        "build": "20261121000000",
        "uuid": "x" * 36,
        "platform": "Windows NT 10.0",
    }
).encode()
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
CONFIG = """
listeners.tcp.default = 127.0.0.1:{port}
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = warning
"""


def log(message: str) -> None:
    print(f"[rabbitmq] {message}", file=sys.stderr, flush=True)


def ensure_installed() -> str:
    """Install Debian's ``rabbitmq-server`` if it is not there; return its version."""
    if not SERVER.exists():
        log("rabbitmq-server missing: installing it from Debian")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        apt = ["apt-get"] if os.geteuid() == 0 else ["sudo", "-n", "-E", "apt-get"]
        subprocess.run([*apt, "update", "-q"], check=True, env=env, stdout=sys.stderr)
        subprocess.run(
            [*apt, "install", "-y", "-q", "--no-install-recommends", "rabbitmq-server"],
            check=True,
            env=env,
            stdout=sys.stderr,
        )
    version = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
        capture_output=True,
        text=True,
        check=False,
    )
    return version.stdout.strip() or "unknown"


class Broker:
    """A RabbitMQ node of our own, in ``workdir``, on free loopback ports."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.nodename = f"queuey-bench-{uuid.uuid4().hex[:8]}@localhost"
        config = workdir / "rabbitmq.conf"
        config.write_text(CONFIG.format(port=self.port))
        (workdir / "enabled_plugins").write_text("[].\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        self.env = {
            **os.environ,
            "HOME": str(workdir),  # a fresh Erlang cookie, not the system broker's
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(workdir / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        }
        self.proc: subprocess.Popen | None = None
        self.output = open(workdir / "stdout.log", "wb")  # noqa: SIM115 - closed in stop()

    def params(self) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(
            host="127.0.0.1", port=self.port, heartbeat=0, blocked_connection_timeout=60
        )

    def start(self, timeout: float = 120.0) -> None:
        log(f"starting {self.nodename} on 127.0.0.1:{self.port} (epmd {self.epmd_port})")
        self.proc = subprocess.Popen(
            [str(SERVER)],
            env=self.env,
            cwd=self.workdir,
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self._tail()}")
            try:
                pika.BlockingConnection(self.params()).close()
                return
            except AMQPConnectionError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker did not answer within {timeout}s: {self._tail()}")
            time.sleep(0.25)

    def _tail(self) -> str:
        try:
            return (self.workdir / "stdout.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the node, then whatever of its process group and its epmd is left."""
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run(
                [str(CTL), "-n", self.nodename, "stop"],
                env=self.env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        self._stop_epmd()
        self.output.close()

    def _stop_epmd(self) -> None:
        """epmd daemonizes out of our process group: find ours by its port, by pid."""
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == self.epmd_port and conn.status == "LISTEN":
                if conn.pid:
                    try:
                        psutil.Process(conn.pid).kill()
                    except psutil.NoSuchProcess:
                        pass


def latency_figures(latencies: list[float]) -> dict:
    flat = sorted(latencies)
    if not flat:
        return {"p50_ms": None, "p99_ms": None}
    return {
        "p50_ms": round(statistics.median(flat) * 1000, 2),
        "p99_ms": round(flat[max(0, int(len(flat) * 0.99) - 1)] * 1000, 2),
    }


def fresh_queue(channel, name: str) -> None:
    channel.queue_delete(queue=name)
    channel.queue_declare(queue=name, durable=True)


def bench_consume(broker: Broker, messages: int) -> dict:
    """Fill a durable queue with persistent messages, then drain it with one consumer."""
    queue = "bench-drain"
    conn = pika.BlockingConnection(broker.params())
    try:
        channel = conn.channel()
        fresh_queue(channel, queue)
        log(f"filling {queue} with {messages} persistent messages")
        for _ in range(messages):
            channel.basic_publish("", queue, BODY, PERSISTENT)
        deadline = time.monotonic() + 300
        while channel.queue_declare(queue=queue, passive=True).method.message_count < messages:
            if time.monotonic() > deadline:
                raise TimeoutError("the broker did not take every message")
            time.sleep(0.1)
        log("draining")
        channel.basic_qos(prefetch_count=1000)
        received = 0
        started = time.perf_counter()
        for method, _props, _body in channel.consume(queue, inactivity_timeout=30):
            if method is None:
                raise TimeoutError(f"consumer stalled after {received} messages")
            received += 1
            if received % 100 == 0 or received == messages:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if received == messages:
                break
        elapsed = time.perf_counter() - started
        channel.cancel()
        left = channel.queue_declare(queue=queue, passive=True).method.message_count
        return {
            "consumers": 1,
            "prefetch": 1000,
            "ack_every": 100,
            "messages": received,
            "left_in_queue": left,
            "seconds": round(elapsed, 2),
            "per_second": round(received / elapsed, 1),
        }
    finally:
        conn.close()


def run_publishers(broker: Broker, queue: str, publishers: int, seconds: float, step) -> dict:
    """``step(channel)`` publishes some messages and returns how many, timed per call."""
    counts = [0] * publishers
    latencies: list[list[float]] = [[] for _ in range(publishers)]
    errors: list[str] = []
    ready = threading.Barrier(publishers + 1)
    stop_at = [float("inf")]

    def publisher(index: int) -> None:
        try:
            conn = pika.BlockingConnection(broker.params())
        except AMQPConnectionError as exc:
            errors.append(repr(exc))
            ready.abort()
            return
        try:
            channel = conn.channel()
            step.prepare(channel)
            ready.wait()
            while time.perf_counter() < stop_at[0]:
                started = time.perf_counter()
                counts[index] += step(channel)
                latencies[index].append(time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - reported in the figures
            errors.append(repr(exc))
        finally:
            conn.close()

    with pika.BlockingConnection(broker.params()) as conn:
        fresh_queue(conn.channel(), queue)
    threads = [threading.Thread(target=publisher, args=(i,)) for i in range(publishers)]
    for thread in threads:
        thread.start()
    ready.wait(timeout=120)
    started = time.perf_counter()
    stop_at[0] = started + seconds
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    with pika.BlockingConnection(broker.params()) as conn:
        depth = conn.channel().queue_declare(queue=queue, passive=True).method.message_count
    return {
        "publishers": publishers,
        "seconds": round(elapsed, 2),
        "messages": sum(counts),
        "in_queue": depth,
        "errors": errors[:5],
        "per_second": round(sum(counts) / elapsed, 1),
        **latency_figures([x for per in latencies for x in per]),
    }


class ConfirmedPublish:
    """One persistent message, then wait for the broker's confirm."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def prepare(self, channel) -> None:
        channel.confirm_delivery()

    def __call__(self, channel) -> int:
        channel.basic_publish("", self.queue, BODY, PERSISTENT)
        return 1


class TxPublish:
    """A transaction of ``size`` persistent messages."""

    def __init__(self, queue: str, size: int = 100) -> None:
        self.queue = queue
        self.size = size

    def prepare(self, channel) -> None:
        channel.tx_select()

    def __call__(self, channel) -> int:
        for _ in range(self.size):
            channel.basic_publish("", self.queue, BODY, PERSISTENT)
        channel.tx_commit()
        return self.size


def bench_delivery(broker: Broker, count: int, consumers: int = 4) -> dict:
    """One confirmed publish at a time; time until one of the consumers holds it."""
    queue = "bench-delivery"
    delivered: dict[int, float] = {}
    arrived = threading.Condition()
    stop = threading.Event()
    ready = threading.Barrier(consumers + 1)
    errors: list[str] = []

    def consumer() -> None:
        try:
            with pika.BlockingConnection(broker.params()) as conn:
                channel = conn.channel()
                channel.basic_qos(prefetch_count=1)
                messages = channel.consume(queue, inactivity_timeout=0.2)
                ready.wait()
                for method, _props, body in messages:
                    if stop.is_set():
                        break
                    if method is None:
                        continue
                    now = time.perf_counter()
                    with arrived:
                        delivered.setdefault(json.loads(body)["seq"], now)
                        arrived.notify_all()
                    channel.basic_ack(method.delivery_tag)
                channel.cancel()
        except Exception as exc:  # noqa: BLE001 - reported in the figures
            with arrived:
                errors.append(repr(exc))
                arrived.notify_all()
            ready.abort()

    with pika.BlockingConnection(broker.params()) as conn:
        fresh_queue(conn.channel(), queue)
    threads = [threading.Thread(target=consumer) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    latencies: list[float] = []
    try:
        ready.wait(timeout=120)
        with pika.BlockingConnection(broker.params()) as conn:
            channel = conn.channel()
            channel.confirm_delivery()
            for seq in range(count):
                body = json.dumps({**json.loads(BODY), "seq": seq}).encode()
                started = time.perf_counter()
                channel.basic_publish("", queue, body, PERSISTENT)
                with arrived:
                    arrived.wait_for(lambda seq=seq: seq in delivered or bool(errors), 30)
                if seq not in delivered:
                    break
                latencies.append(delivered[seq] - started)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return {
        "consumers": consumers,
        "prefetch": 1,
        "messages": count,
        "delivered": len(latencies),
        "errors": errors[:5],
        "unit": "latency from a confirmed persistent publish to a consumer holding it",
        **latency_figures(latencies),
    }


def measure(messages: int, seconds: float, latency_messages: int) -> dict:
    version = ensure_installed()
    with tempfile.TemporaryDirectory(prefix="queuey-rabbitmq-") as tmp:
        broker = Broker(Path(tmp))
        try:
            broker.start()
            results = {"consume_ack": bench_consume(broker, messages)}
            log("8 publishers, one confirm per message")
            confirmed = run_publishers(
                broker, "bench-confirm", 8, seconds, ConfirmedPublish("bench-confirm")
            )
            confirmed["unit"] = "messages, latency per confirmed publish"
            results["confirmed_publish"] = confirmed
            log("4 publishers, transactions of 100")
            tx = run_publishers(broker, "bench-tx", 4, seconds, TxPublish("bench-tx"))
            tx["unit"] = "messages, latency per commit of 100"
            results["tx_publish"] = tx
            log(f"publish to delivery, {latency_messages} messages")
            results["publish_to_delivery"] = bench_delivery(broker, latency_messages)
        finally:
            broker.stop()
    return {
        "benchmark": "rabbitmq",
        "rabbitmq_server": version,
        "client": f"pika {pika.__version__}",
        "cpus": os.cpu_count(),
        "cores": "broker and load generator share the machine's cores (one box)",
        "message_bytes": len(BODY),
        "results": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--latency-messages", type=int, default=300)
    args = parser.parse_args()
    # A SIGTERM (run.py or the shell giving up) still stops the broker: finally runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(json.dumps(measure(args.messages, args.seconds, args.latency_messages), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

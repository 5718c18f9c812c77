"""The peer to beat: RabbitMQ from Debian, driven by its own Java load generator.

    python bench/rabbitmq.py [--client perftest|pika] [--messages 100000] [--seconds 10]
                             [--latency-messages 300]

Installs ``rabbitmq-server`` with apt when it is missing (the benchmark's own
set-up: ``apt-get update`` then ``apt-get install -y rabbitmq-server``), starts a
broker of its own on loopback (free ports for AMQP, Erlang distribution and epmd,
node name, data, logs and config in a temporary directory, so a system broker on
5672/25672/4369 is never touched), waits until it answers, and measures it with
RabbitMQ PerfTest (``com.rabbitmq.perf.PerfTest``, the release named in
``etc/perftest/pom.xml``, resolved by Maven, run on Java 17): one JVM per
scenario, connected to the broker's port. Every message is persistent
(``--flag persistent``) and carries the 194-byte JSON ``BODY`` of Queuey's
benchmarks (``--body`` file, content type application/json; PerfTest adds a
``timestamp`` header); queues are durable, not auto-deleted, and fed through
PerfTest's durable ``direct`` exchange.

* ``confirmed_publish``: 8 producers, one connection each, each waiting for the
  confirm of a message before sending the next (``--confirm 1``), for
  ``--seconds``: PerfTest's average publish rate, and the confirm latency of a
  message (publish to its confirm), p50/p99 of PerfTest's end-of-run summary.
  PerfTest takes those from a Dropwizard exponentially decaying reservoir, a
  sample of 1028 confirms weighted to the recent ones, not from every message;
* ``tx_publish``: 4 producers committing transactions of 100 messages
  (``--ptxsize 100``) for ``--seconds``: PerfTest's average publish rate;
* ``consume_ack``: a PerfTest producer fills a durable queue with ``--messages``
  messages (1000 confirms in flight), the queue is polled until it holds them
  all, then one consumer, prefetch 1000, one multiple-ack every 100 deliveries,
  drains it (``--cmessages``): PerfTest's average receive rate, timed from the
  start of the consumer to its last message;
* ``consume_ack_4``: the same with 4 consumers stopping at ``--messages``/4 each.
  The queue holds 4 x 1000 (the prefetch) more, because a consumer done with its
  share holds up to a prefetch of messages it never processes: so every consumer
  gets its share. The rate counts the ``--messages`` consumed;
* ``publish_to_delivery``: with pika, one message at a time (the client's CPU
  barely matters): 4 consumers (prefetch 1) wait while one publisher sends one
  persistent message at a time with a confirm and waits for its delivery:
  p50/p99 from just before the publish to the moment a consumer holds it.

The Java load generator shares the machine's 2 cores with the broker: each
PerfTest result's ``cpu`` gives the CPU seconds used, over the JVM's life, by the
broker's process tree (beam.smp and its helpers), by the JVM (start-up and JIT
included) and by the whole machine, against the wall time.

``--client pika`` measures as before PerfTest (to compare with older figures):
pika publishers and consumers in this Python process, whose CPU competes with
the broker's.

Everything it started (the broker, its Erlang helpers and its epmd, the JVMs) is
stopped when it ends, also on failure or SIGTERM. Prints one JSON object on
stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pika
import psutil
from pika.exceptions import AMQPConnectionError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port  # noqa: E402
from harness.process import find_java, resolve_classpath  # noqa: E402

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
PERFTEST_POM = ROOT / "etc" / "perftest" / "pom.xml"
PREFETCH = 1000
ACK_EVERY = 100
DRAIN_LIMIT = 600  # seconds: a drain that takes longer failed


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


# ------------------------------------------------------------------ PerfTest

LATENCY = re.compile(
    r"(?:(?P<pre>[\w/]+) confirm latency: |confirm latency (?P<post>[\w/]+) )"
    r"(?P<values>\d+(?:/\d+)+) (?P<unit>\S+)"
)
RATE = re.compile(r"(?P<what>\w+)(?: rate avg)?: (?P<rate>\d+) msg/s")
INTERVAL = re.compile(r"\btime (?P<t>[\d.]+) s, ")
STOPPED = re.compile(r"test stopped \((?P<reason>.*)\)")
PERCENTILES = {"min": "min", "median": "p50", "75th": "p75", "95th": "p95", "99th": "p99"}


def confirm_latency(line: str) -> dict | None:
    """``{"min": ms, "p50": ms, ...}`` from a PerfTest line with confirm latencies."""
    match = LATENCY.search(line)
    if not match:
        return None
    scale = 1.0 if match["unit"] == "ms" else 0.001  # PerfTest prints µs unless --use-millis
    labels = (match["pre"] or match["post"]).split("/")
    values = [int(v) for v in match["values"].split("/")]
    return {PERCENTILES.get(k, k): round(v * scale, 3) for k, v in zip(labels, values, strict=True)}


@dataclass
class Outcome:
    """What one PerfTest JVM reported, parsed from its standard output."""

    argv: list[str]
    intervals: list[dict]
    rates: dict[str, int]  # the end-of-run summary: "sending", "receiving" (msg/s)
    latency_ms: dict | None  # the end-of-run confirm latency summary
    stopped: str
    cpu: dict

    @classmethod
    def parse(cls, argv: list[str], lines: list[str], cpu: dict) -> Outcome:
        intervals: list[dict] = []
        rates: dict[str, int] = {}
        latency = None
        stopped = ""
        for line in lines:
            interval = INTERVAL.search(line)
            if interval:
                entry = {"t": float(interval["t"])}
                entry.update({m["what"]: int(m["rate"]) for m in RATE.finditer(line)})
                figures = confirm_latency(line)
                if figures:
                    entry.update(p50_ms=figures["p50"], p99_ms=figures["p99"])
                intervals.append(entry)
            elif " rate avg: " in line:
                rates.update({m["what"]: int(m["rate"]) for m in RATE.finditer(line)})
            elif "confirm latency" in line:
                latency = confirm_latency(line)
            elif stop := STOPPED.search(line):
                stopped = stop["reason"]
        return cls(argv, intervals, rates, latency, stopped, cpu)


class CpuMeter:
    """CPU seconds used from its creation: by the broker's process tree, by the
    children this process reaped meanwhile (the PerfTest JVM) and by the machine."""

    def __init__(self, broker: Broker) -> None:
        self.root = psutil.Process(broker.proc.pid)
        self.started = time.monotonic()
        self.broker = self._broker()
        self.children = self._children()
        self.machine = self._machine()

    def _broker(self) -> dict[int, float]:
        times = {}
        for proc in [self.root, *self.root.children(recursive=True)]:
            try:
                cpu = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            times[proc.pid] = cpu.user + cpu.system
        return times

    @staticmethod
    def _children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    @staticmethod
    def _machine() -> float:
        cpu = psutil.cpu_times()
        return cpu.user + cpu.nice + cpu.system + cpu.irq + cpu.softirq + cpu.steal

    def stop(self) -> dict:
        wall = time.monotonic() - self.started
        broker = sum(t - self.broker.get(pid, 0.0) for pid, t in self._broker().items())
        jvm = self._children() - self.children
        busy = self._machine() - self.machine
        cores = os.cpu_count() or 1
        return {
            "wall_s": round(wall, 2),
            "broker_cpu_s": round(broker, 2),
            "perftest_cpu_s": round(jvm, 2),
            "other_cpu_s": round(max(0.0, busy - broker - jvm), 2),
            "machine_busy_cpu_s": round(busy, 2),
            "machine_cpu_s": round(wall * cores, 2),
        }


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session, and whatever it left in that group."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class PerfTest:
    """``com.rabbitmq.perf.PerfTest`` JVMs against one broker, one per ``run``."""

    def __init__(self, workdir: Path) -> None:
        self.java = find_java()
        self.classpath = resolve_classpath(PERFTEST_POM, name="perftest")
        self.version = self._version()
        self.java_version = self._java_version()
        self.body = workdir / "body.json"
        self.body.write_bytes(BODY)
        self.publish = [
            "--flag",
            "persistent",
            "--auto-delete",
            "false",
            "--body",
            str(self.body),
            "--body-content-type",
            "application/json",
        ]

    def _version(self) -> str:
        for jar in self.classpath:
            if jar.name.startswith("perf-test-"):
                with zipfile.ZipFile(jar) as archive:
                    text = archive.read("rabbitmq-perf-test.properties").decode()
                for line in text.splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "com.rabbitmq.perf.version":
                        return value.strip()
        return "unknown"

    def _java_version(self) -> str:
        out = subprocess.run(
            [str(self.java), "-version"], capture_output=True, text=True, check=False
        ).stderr
        match = re.search(r'version "(\d+)', out)
        return match[1] if match else "unknown"

    def describe(self) -> str:
        return f"PerfTest {self.version} (Java {self.java_version})"

    def run(self, broker: Broker, name: str, args: list[str], limit: float) -> Outcome:
        """Run PerfTest with ``args``; killed after ``limit`` seconds (then an error)."""
        argv = ["--id", name, "--uri", f"amqp://guest:guest@127.0.0.1:{broker.port}", *args]
        log(f"{name}: PerfTest {' '.join(argv[2:])}")
        command = [
            str(self.java),
            "-cp",
            os.pathsep.join(map(str, self.classpath)),
            "com.rabbitmq.perf.PerfTest",
            *argv,
        ]
        meter = CpuMeter(broker)
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            stop_group(proc)

        watchdog = threading.Timer(limit, expire)
        watchdog.start()
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line.rstrip())
                log(f"  {lines[-1]}")
            proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                stop_group(proc)
            proc.stdout.close()
        cpu = meter.stop()
        tail = "\n".join(lines[-15:])
        if timed_out.is_set():
            raise TimeoutError(f"PerfTest {name} still running after {limit}s:\n{tail}")
        if proc.returncode != 0:
            raise RuntimeError(f"PerfTest {name} exited with {proc.returncode}:\n{tail}")
        outcome = Outcome.parse(["com.rabbitmq.perf.PerfTest", *argv], lines, cpu)
        if not outcome.rates:
            raise RuntimeError(f"PerfTest {name} printed no summary:\n{tail}")
        return outcome


def queue_depth(broker: Broker, queue: str) -> int:
    with pika.BlockingConnection(broker.params()) as conn:
        return conn.channel().queue_declare(queue=queue, passive=True).method.message_count


def delete_queue(broker: Broker, queue: str) -> None:
    with pika.BlockingConnection(broker.params()) as conn:
        conn.channel().queue_delete(queue=queue)


def wait_depth(broker: Broker, queue: str, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while (depth := queue_depth(broker, queue)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{queue} holds {depth} messages, not {count}")
        time.sleep(0.2)


def perftest_publish(
    perftest: PerfTest, broker: Broker, name: str, seconds: int, args: list[str]
) -> tuple[Outcome, int]:
    """A timed run of producers only into a fresh queue; how many it left there."""
    queue = f"bench-{name}".replace("_", "-")
    delete_queue(broker, queue)
    outcome = perftest.run(
        broker,
        name,
        [*perftest.publish, "--queue", queue, "--consumers", "0", "--time", str(seconds), *args],
        limit=seconds + 120,
    )
    in_queue = queue_depth(broker, queue)
    delete_queue(broker, queue)
    return outcome, in_queue


def figures(outcome: Outcome) -> dict:
    return {
        "stopped": outcome.stopped,
        "per_interval": outcome.intervals,
        "cpu": outcome.cpu,
        "perftest_argv": outcome.argv,
    }


def perftest_confirmed(perftest: PerfTest, broker: Broker, seconds: int) -> dict:
    outcome, in_queue = perftest_publish(
        perftest,
        broker,
        "confirmed_publish",
        seconds,
        ["--producers", "8", "--confirm", "1"],
    )
    latency = outcome.latency_ms or {}
    return {
        "unit": (
            "messages/s (PerfTest's sending rate avg); confirm latency of each message, "
            "publish to its confirm, in ms"
        ),
        "producers": 8,
        "confirm_window": 1,
        "seconds": seconds,
        "in_queue": in_queue,
        "per_second": outcome.rates.get("sending"),
        "p50_ms": latency.get("p50"),
        "p99_ms": latency.get("p99"),
        "confirm_latency_ms": latency,
        "latency_source": (
            "PerfTest's end-of-run summary (min/median/75th/95th/99th), which it takes from a "
            "Dropwizard ExponentiallyDecayingReservoir: a sample of 1028 per-message confirm "
            "latencies weighted to recent ones, not every message; per_interval has each "
            "second's median and 99th from a fresh reservoir"
        ),
        **figures(outcome),
    }


def perftest_tx(perftest: PerfTest, broker: Broker, seconds: int) -> dict:
    outcome, in_queue = perftest_publish(
        perftest, broker, "tx_publish", seconds, ["--producers", "4", "--ptxsize", "100"]
    )
    return {
        "unit": (
            "messages/s (PerfTest's sending rate avg: publishes, so up to 99 per producer "
            "not yet committed at the end count too)"
        ),
        "producers": 4,
        "tx_size": 100,
        "seconds": seconds,
        "in_queue": in_queue,
        "per_second": outcome.rates.get("sending"),
        "p50_ms": None,
        "p99_ms": None,
        **figures(outcome),
    }


def perftest_consume(perftest: PerfTest, broker: Broker, consumers: int, messages: int) -> dict:
    """Fill a durable queue, wait until the broker holds it all, drain it with PerfTest."""
    name = "consume_ack" if consumers == 1 else f"consume_ack_{consumers}"
    queue = f"bench-{name}".replace("_", "-")
    share = messages // consumers // ACK_EVERY * ACK_EVERY  # every message acked
    if share == 0:
        raise ValueError(f"--messages {messages} is too few for {consumers} consumers")
    spare = PREFETCH * consumers if consumers > 1 else 0
    stored = share * consumers + spare
    delete_queue(broker, queue)
    fill = perftest.run(
        broker,
        f"{name}_fill",
        [
            *perftest.publish,
            "--queue",
            queue,
            "--producers",
            "1",
            "--consumers",
            "0",
            "--pmessages",
            str(stored),
            "--confirm",
            str(PREFETCH),
        ],
        limit=DRAIN_LIMIT,
    )
    wait_depth(broker, queue, stored)
    drain = perftest.run(
        broker,
        name,
        [
            "--queue",
            queue,
            "--predeclared",
            "--auto-delete",
            "false",
            "--producers",
            "0",
            "--consumers",
            str(consumers),
            "--qos",
            str(PREFETCH),
            "--multi-ack-every",
            str(ACK_EVERY),
            "--cmessages",
            str(share),
            "--time",
            str(DRAIN_LIMIT),
        ],
        limit=DRAIN_LIMIT + 60,
    )
    if "Reached time limit" in drain.stopped:
        raise TimeoutError(f"{name}: consumers still short of {share} each after {DRAIN_LIMIT}s")
    left = queue_depth(broker, queue)
    delete_queue(broker, queue)
    rate = drain.rates.get("receiving")
    return {
        "unit": (
            "messages/s (PerfTest's receiving rate avg: its clock runs from the moment every "
            "consumer is registered until it stops, once the last one has its share)"
        ),
        "consumers": consumers,
        "prefetch": PREFETCH,
        "ack_every": ACK_EVERY,
        "messages": share * consumers,
        "per_consumer": share,
        "stored": stored,
        "left_in_queue": left,
        "seconds": round(share * consumers / rate, 2) if rate else None,
        "per_second": rate,
        "p50_ms": None,
        "p99_ms": None,
        **figures(drain),
        "fill": {
            "per_second": fill.rates.get("sending"),
            "stopped": fill.stopped,
            "cpu": fill.cpu,
            "perftest_argv": fill.argv,
        },
    }


def measure_perftest(perftest: PerfTest, broker: Broker, messages: int, seconds: int) -> dict:
    results = {"consume_ack": perftest_consume(perftest, broker, 1, messages)}
    results["consume_ack_4"] = perftest_consume(perftest, broker, 4, messages)
    results["confirmed_publish"] = perftest_confirmed(perftest, broker, seconds)
    results["tx_publish"] = perftest_tx(perftest, broker, seconds)
    return results


def measure_pika(broker: Broker, messages: int, seconds: float) -> dict:
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
    return results


def measure(client: str, messages: int, seconds: float, latency_messages: int) -> dict:
    version = ensure_installed()
    cpus = os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="queuey-rabbitmq-") as tmp:
        perftest = PerfTest(Path(tmp)) if client == "perftest" else None
        broker = Broker(Path(tmp))
        try:
            broker.start()
            if perftest is not None:
                whole = max(1, round(seconds))
                results = measure_perftest(perftest, broker, messages, whole)
            else:
                results = measure_pika(broker, messages, seconds)
            log(f"publish to delivery (pika), {latency_messages} messages")
            delivery = bench_delivery(broker, latency_messages)
            results["publish_to_delivery"] = {"client": f"pika {pika.__version__}", **delivery}
        finally:
            broker.stop()
    document = {
        "benchmark": "rabbitmq",
        "rabbitmq_server": version,
        "client": perftest.describe() if perftest else f"pika {pika.__version__}",
        "cpus": cpus,
        "message_bytes": len(BODY),
    }
    if perftest is not None:
        document["cores"] = (
            f"the broker and the PerfTest JVM share the machine's {cpus} cores; each "
            "PerfTest result's cpu gives the CPU seconds of both over the JVM's life"
        )
        document["perftest"] = {
            "java": (
                f"{perftest.java} -cp <{len(perftest.classpath)} jars that Maven resolved "
                "from etc/perftest/pom.xml> followed by each result's perftest_argv"
            ),
            "body": (
                f"--body: a file holding the {len(BODY)}-byte JSON BODY, content type "
                "application/json, plus PerfTest's timestamp header"
            ),
            "routing": "PerfTest's durable direct exchange, bound to each durable queue",
        }
    else:
        document["cores"] = "broker and load generator share the machine's cores (one box)"
    document["results"] = results
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("perftest", "pika"), default="perftest")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--latency-messages", type=int, default=300)
    args = parser.parse_args()
    # A SIGTERM (run.py or the shell giving up) still stops the broker and any
    # JVM: the finally blocks run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    document = measure(args.client, args.messages, args.seconds, args.latency_messages)
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

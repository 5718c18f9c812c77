"""The Queuey servers the benchmarks start: ``pserve`` on a generated ini.

A :class:`Server` is one API node (granian with its worker processes, or
waitress); several nodes may share one store (the same Cassandra keyspace:
build the settings once with :func:`storage_settings` and give them to each).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

from bench.common import free_port, start_pserve, stop_process_group, wait_http

APP, KEY = "bench", "bench-key"
#: The bench application's SigV4 secret (bench/sqs.py).
SQS_SECRET = "bench-sqs-secret"
SERVERS = {
    # The shipped ini's server (development.ini, production.ini).
    "granian": "use = egg:queuey#granian\nlisten = 127.0.0.1:{port}\nworkers = {workers}\n"
    "threads = {threads}\n",
    # pserve's reference server, one process: the figures before granian.
    "waitress": "use = egg:waitress#main\nlisten = 127.0.0.1:{port}\nthreads = {threads}\n"
    "connection_limit = 200\n",
}
INI = """
[app:main]
use = egg:queuey
queuey.applications = {apps}
{storage}
[server:main]
{server}
[loggers]
keys = root, queuey

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console

[logger_queuey]
level = {log_level}
handlers =
qualname = queuey

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(asctime)s %(levelname)-5.5s [%(name)s][%(threadName)s] %(message)s
"""


def storage_settings(backend: str, workdir: Path, keyspace: str = "queuey_bench") -> str:
    """A node's storage lines; on Cassandra ``keyspace`` is dropped first (a
    benchmark that may run beside another names a keyspace of its own)."""
    if backend == "sqlite":
        return (
            f"queuey.storage.backend = queuey.storage.sqlite\n"
            f"queuey.sqlite.path = {workdir}/bench.sqlite3\nqueuey.read_delay = 0\n"
        )
    from harness import cassandra

    cluster = cassandra.ensure_running(1)
    fresh_keyspace(cluster.contact_points, cluster.port, keyspace)
    return (
        "queuey.storage.backend = queuey.storage.cassandra\n"
        f"queuey.cassandra.contact_points = {','.join(cluster.contact_points)}\n"
        f"queuey.cassandra.port = {cluster.port}\n"
        f"queuey.cassandra.keyspace = {keyspace}\n"
        "queuey.cassandra.create_schema = true\n"
        "queuey.cassandra.request_timeout = 2\n"
        "queuey.read_delay = 2\n"
    )


def fresh_keyspace(contact_points: list[str], port: int, keyspace: str) -> None:
    """Drop what earlier runs left: every run measures an empty keyspace (a
    queue of millions of messages costs the operators' refresher more)."""
    from cassandra.cluster import Cluster

    cluster = Cluster(list(contact_points), port=port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    finally:
        cluster.shutdown()


def tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds used so far by ``proc`` and its live children."""
    total = 0.0
    for member in tree(proc):
        try:
            times = member.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for member in tree(proc):
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def store_processes(backend: str) -> list[psutil.Process]:
    """The processes of the store the API nodes use: the harness's Cassandra
    JVMs (none for SQLite, whose work runs inside the API processes)."""
    if backend != "cassandra":
        return []
    from harness import cassandra, process

    found = []
    for node in cassandra.cluster_spec(1).nodes:
        pid = process.running_pid(node.pidfile)
        if pid is not None:
            found.append(psutil.Process(pid))
    return found


class CpuMeter:
    """CPU seconds used by the API nodes, the store and the load generator
    (this process) between two readings: where a delivered message's work goes."""

    def __init__(self, servers: list[Server], store: list[psutil.Process]) -> None:
        self.parts = {
            "api": lambda: sum(server.cpu() for server in servers),
            "store": lambda: sum(tree_cpu(proc) for proc in store),
            # This process alone: the API nodes are its children.
            "load": lambda: sum(psutil.Process().cpu_times()[:2]),
        }

    def read(self) -> dict[str, float]:
        return {name: part() for name, part in self.parts.items()}

    @staticmethod
    def per_message(before: dict[str, float], after: dict[str, float], count: int) -> dict:
        """Milliseconds of CPU per message by part, their sum, and the rate
        the machine's cores would sustain if that CPU were all that bound it."""
        if not count:
            return {}
        ms = {name: round((after[name] - before[name]) * 1000 / count, 3) for name in after}
        total = sum(ms.values())
        cores = psutil.cpu_count() or 1
        return {
            "cpu_ms_per_message": ms | {"total": round(total, 3)},
            "cpu_bound_msgs_per_s": round(cores * 1000 / total, 1) if total else None,
        }


class Server:
    """A Queuey server process of its own (``pserve`` on a generated ini).

    ``storage``: the ini's storage lines, when several nodes share one store
    (each call of :func:`storage_settings` starts a fresh Cassandra keyspace);
    ``name`` names the node's ini and log files in ``workdir``.
    """

    def __init__(
        self,
        backend: str,
        workdir: Path,
        threads: int | None = None,
        server: str = "granian",
        workers: int = 2,
        log_level: str = "INFO",
        storage: str | None = None,
        name: str | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backend = backend
        apps = workdir / "apps.ini"
        apps.write_text(
            f"[application:{APP}]\nkeys = plain:{KEY}\nallow = 127.0.0.0/8\n"
            f"sqs_secret = {SQS_SECRET}\n"
            # One application's throughput is the figure: its limits are off.
            "max_requests_per_second = 0\nmax_waiting_polls = 0\n"
        )
        if threads is None:
            threads = 16 if server == "granian" else 8
        name = name or f"{backend}-{server}"
        ini = workdir / f"{name}.ini"
        ini.write_text(
            INI.format(
                apps=apps,
                storage=storage if storage is not None else storage_settings(backend, workdir),
                server=SERVERS[server].format(port=self.port, workers=workers, threads=threads),
                log_level=log_level,
            )
        )
        self.description = {
            "server": server,
            "workers": workers if server == "granian" else 1,
            "threads_per_worker": threads,
            "request_log": log_level,
        }
        self.proc = start_pserve(ini, workdir / f"{name}.log")
        try:
            wait_http(f"http://127.0.0.1:{self.port}/__lbheartbeat__", timeout=120)
        except BaseException:
            stop_process_group(self.proc)
            raise
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, tree_rss(self.ps))
            time.sleep(0.05)

    def rss(self) -> int:
        return tree_rss(self.ps)

    def cpu(self) -> float:
        return tree_cpu(self.ps)

    def stop(self) -> None:
        self._stop.set()
        stop_process_group(self.proc)

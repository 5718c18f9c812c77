"""Shared fault fixtures: API nodes as real processes, posters that count what
was acknowledged, a read-back that counts what is there, and a ZooKeeper of
the test's own that may be restarted.

An API node here is ``pserve`` running waitress in its own process, so a test
can ``kill -9`` it; the in-process servers of tests/conftest.py cannot be
killed that way. Several nodes may share one SQLite file (WAL) or the shared
Cassandra node (the ``QUEUEY_TEST_KEYSPACE`` keyspace).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from queuey.client import ClientError, OutgoingMessage, QueueyClient, Unavailable
from tests.support import KEY, WORKER_INDEX, free_port, server_settings, wait_until

REPO = Path(__file__).resolve().parents[2]

#: The ZooKeeper this module's tests may stop and start (never the shared 12181):
#: 12381, and under xdist 12381 + the worker's number, so workers never share it.
OWN_ZOOKEEPER_PORT = 12381 + WORKER_INDEX

NODE_INI = """\
[app:main]
use = egg:queuey
queuey.applications = {applications}
queuey.read_delay = {read_delay}
{storage}
[server:main]
{server}
[loggers]
keys = root

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(asctime)s %(levelname)-5.5s [%(name)s] %(message)s
"""


#: The server sections an API node may run: waitress (one process), or the
#: production server, granian with worker processes (queuey.server).
SERVERS = {
    "waitress": "use = egg:waitress#main\nlisten = 127.0.0.1:{port}\nthreads = 8\n"
    "connection_limit = 200\n",
    "granian": "use = egg:queuey#granian\nlisten = 127.0.0.1:{port}\nworkers = {workers}\n"
    "threads = 8\n",
}


class ApiNode:
    """One Queuey API node: ``pserve`` in a process of its own, running waitress
    (one process) or granian (``workers`` processes under a supervisor)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        settings: dict[str, str],
        server: str = "waitress",
        workers: int = 2,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = dict(settings)
        read_delay = settings.pop("queuey.read_delay", "0")
        applications = settings.pop("queuey.applications")
        ini = workdir / f"{name}.ini"
        ini.write_text(
            NODE_INI.format(
                applications=applications,
                read_delay=read_delay,
                storage="".join(f"{k} = {v}\n" for k, v in settings.items()),
                server=SERVERS[server].format(port=self.port, workers=workers),
            ),
            encoding="utf-8",
        )
        self.log_path = workdir / f"{name}.log"
        self._log = self.log_path.open("ab")
        pserve = Path(sys.executable).with_name("pserve")
        self.proc = subprocess.Popen(
            [str(pserve), str(ini)],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers go with it (stop, kill)
        )

    def wait_ready(self, timeout: float = 90.0) -> ApiNode:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                return requests.get(self.url + "/__lbheartbeat__", timeout=2).status_code == 200
            return False

        wait_until(answers, timeout, f"API node {self.name} to answer", interval=0.2)
        return self

    def kill(self) -> None:
        """``kill -9`` of the node and every worker it runs: no shutdown of any kind."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def workers(self, role: str = "worker") -> list[int]:
        """The pids of the node's processes of ``role`` (``worker``: serving
        requests; ``refresher``: measuring queues); none for waitress."""
        import psutil

        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "spawn_main" not in " ".join(child.cmdline()):
                    continue  # multiprocessing's resource tracker
                # Workers start with QUEUEY_ROLE=worker; the refresher sets its own later.
                is_worker = child.environ().get("QUEUEY_ROLE") == "worker"
                if is_worker == (role == "worker"):
                    found.append(child.pid)
        return found

    def freeze(self) -> None:
        """SIGSTOP: connections are still accepted (by the kernel), never answered."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.thaw()
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # any worker left behind
        self._log.close()

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


@contextlib.contextmanager
def shipped_node(name: str, workdir: Path, settings: dict[str, str]) -> Iterator[ApiNode]:
    """The server as shipped (granian, 2 worker processes), answering; stopped after."""
    node = ApiNode(name, workdir, settings, server="granian", workers=2)
    try:
        yield node.wait_ready()
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            node.stop()


@pytest.fixture
def make_api_node(request, tmp_path, applications_file) -> Iterator:
    """``make_api_node(name, backend="sqlite"|"cassandra", **settings)``: a started,
    answering API node; every node is stopped at the end. SQLite nodes of one
    test share one database file."""
    nodes: list[ApiNode] = []

    def make(
        name: str, backend: str = "sqlite", server: str = "waitress", **settings: str
    ) -> ApiNode:
        base = server_settings(request, applications_file, backend, tmp_path / "shared.sqlite3")
        base.update(settings)
        node = ApiNode(name, tmp_path, base, server=server)
        nodes.append(node)
        return node.wait_ready()

    yield make
    for node in nodes:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            node.stop()


# ------------------------------------------------------------------ posting


@dataclass
class PosterCounts:
    """What one poster sent and what the service acknowledged."""

    sent: set[str] = field(default_factory=set)  # message keys ever sent
    acked: set[str] = field(default_factory=set)  # keys answered 201 at least once
    acked_ids: set[str] = field(default_factory=set)  # the message ids those answers gave
    requests: int = 0
    failures: int = 0  # requests that ended in an error (after the client's own retries)
    longest_stall: float = 0.0  # longest time between two acknowledgements
    last_error: str = ""
    ack_times: list[float] = field(default_factory=list)  # monotonic, one per 201


class AckingPoster:
    """A producer thread: posts messages numbered ``<name>-<n>`` until stopped.

    ``batch`` messages per request (1: ``POST /queue/{name}``, more: the batch
    route). Like a real producer it posts a failed request's messages again,
    up to ``attempts`` times, so a message whose first answer was lost may be
    stored twice; the read-back counts such duplicates. ``pause`` seconds
    between requests set a gentler pace.
    """

    def __init__(
        self,
        name: str,
        urls: list[str],
        application: str,
        queue: str,
        partitions: int,
        batch: int = 1,
        attempts: int = 3,
        pause: float = 0.0,
        timeout: float = 10.0,
    ) -> None:
        self.name, self.queue, self.partitions = name, queue, partitions
        self.batch, self.attempts, self.pause = batch, attempts, pause
        self.client = QueueyClient(
            urls, application, KEY, timeout=timeout, retries=4, backoff=0.05, max_backoff=0.5
        )
        self.counts = PosterCounts()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poster-{name}", daemon=True)
        self._next = 0

    def start(self) -> AckingPoster:
        self._thread.start()
        return self

    def stop(self) -> PosterCounts:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"poster {self.name} is stuck"
        self.client.close()
        return self.counts

    def _messages(self) -> list[OutgoingMessage]:
        out = []
        for _ in range(self.batch):
            n = self._next
            self._next += 1
            body = {"key": f"{self.name}-{n}", "n": n}
            out.append(OutgoingMessage(body, partition=n % self.partitions + 1))
        return out

    def _run(self) -> None:
        counts = self.counts
        last_ack = time.monotonic()
        while not self._stop.is_set():
            messages = self._messages()
            keys = [m.body["key"] for m in messages]
            counts.sent.update(keys)
            for _ in range(self.attempts):
                counts.requests += 1
                try:
                    if self.batch == 1:
                        posted = [
                            self.client.post(self.queue, messages[0].body, messages[0].partition)
                        ]
                    else:
                        posted = self.client.post_batch(self.queue, messages)
                except ClientError as exc:
                    counts.failures += 1
                    counts.last_error = str(exc)[:300]
                    if not isinstance(exc, Unavailable) and exc.status not in (None, 503):
                        break  # the service refused it: posting again will not help
                    continue
                now = time.monotonic()
                counts.ack_times.append(now)
                counts.longest_stall = max(counts.longest_stall, now - last_ack)
                last_ack = now
                counts.acked.update(keys)
                counts.acked_ids.update(p.message_id for p in posted)
                break
            if self.pause:
                self._stop.wait(self.pause)


def read_back(client: QueueyClient, queue: str, partitions: int) -> Counter:
    """How many copies of each message key the queue holds (every partition, oldest first)."""
    found: Counter = Counter()
    for partition in range(1, partitions + 1):
        for message in client.iter_messages(queue, partitions=[partition], since_timestamp="0"):
            found[message.body.get("key")] += 1
    return found


def read_back_complete(
    read: Callable[[], Counter], expected: set[str], timeout: float, interval: float
) -> Counter:
    """Poll ``read`` (a read-back) until it holds every ``expected`` key, since a
    read delay hides the newest messages for a moment, or ``timeout`` passes;
    the last read-back, complete or not (the caller counts what is missing)."""
    found: Counter = Counter()

    def complete() -> bool:
        nonlocal found
        found = read()
        return expected <= set(found)

    with contextlib.suppress(AssertionError):
        wait_until(complete, timeout, "every acknowledged message to be readable", interval)
    return found


@dataclass
class PostingFigures:
    """Sent, acknowledged, read back, lost (acknowledged yet missing), duplicates."""

    sent: int
    acked: int
    requests: int
    failed_requests: int
    never_acked: int
    never_acked_but_stored: int
    read_back: int
    lost: int
    duplicates: int
    longest_stall: float

    @classmethod
    def count(cls, posters: list[AckingPoster], found: Counter) -> PostingFigures:
        sent = set().union(*(p.counts.sent for p in posters))
        acked = set().union(*(p.counts.acked for p in posters))
        never = sent - acked
        return cls(
            sent=len(sent),
            acked=len(acked),
            requests=sum(p.counts.requests for p in posters),
            failed_requests=sum(p.counts.failures for p in posters),
            never_acked=len(never),
            never_acked_but_stored=len(never & set(found)),
            read_back=sum(found.values()),
            lost=len(acked - set(found)),
            duplicates=sum(n - 1 for n in found.values() if n > 1),
            longest_stall=max(p.counts.longest_stall for p in posters),
        )

    def line(self) -> str:
        return (
            f"sent={self.sent} acked={self.acked} read_back={self.read_back} "
            f"lost={self.lost} duplicates={self.duplicates} requests={self.requests} "
            f"failed_requests={self.failed_requests} never_acked={self.never_acked} "
            f"(of which stored={self.never_acked_but_stored}) "
            f"longest_stall_s={self.longest_stall:.2f}"
        )


# ---------------------------------------------------------------- ZooKeeper


@dataclass
class OwnZooKeeper:
    """A ZooKeeper of this test's own, on :data:`OWN_ZOOKEEPER_PORT`, which it may restart."""

    base_dir: Path
    port: int = OWN_ZOOKEEPER_PORT

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        from harness import zookeeper

        zookeeper.ensure_running(port=self.port, base_dir=self.base_dir)

    def stop(self) -> None:
        from harness import zookeeper

        zookeeper.stop(base_dir=self.base_dir)

    def restart(self) -> float:
        """Stop and start on the same port and data; the seconds it was down."""
        started = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - started


@pytest.fixture
def own_zookeeper(tmp_path_factory) -> Iterator[OwnZooKeeper]:
    """A started ZooKeeper in a fresh directory, stopped at the end even on failure."""
    server = OwnZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_zookeeper_chroot(own_zookeeper) -> str:
    """A connection string with a fresh chroot on :func:`own_zookeeper`."""
    from kazoo.client import KazooClient

    chroot = f"/faults-{uuid.uuid4().hex[:10]}"
    admin = KazooClient(hosts=own_zookeeper.hosts)
    admin.start(timeout=30)
    try:
        admin.ensure_path(chroot)
    finally:
        admin.stop()
        admin.close()
    return own_zookeeper.hosts + chroot


# ---------------------------------------------------------------- work queues

#: ``queuey.dedup_window`` of the work-queue nodes: short, so a test can see it end.
WORK_QUEUE_DEDUP_WINDOW = 3


@dataclass
class NodePair:
    """Two API nodes on one store, and what a test needs to know about them."""

    backend: str
    a: ApiNode
    b: ApiNode
    application: str
    read_delay: float  # seconds the nodes hide the newest messages from stream reads
    dedup_window: int


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]
)
def work_queue_nodes(request, tmp_path_factory) -> Iterator[NodePair]:
    """Two ``pserve`` nodes per backend (one SQLite file, or the shared Cassandra
    keyspace), started once for every work-queue test; each test makes its own
    queues. Stopped when the backend's tests are done, even on failure. Cassandra
    nodes run granian with 2 workers, as shipped: owned work queues keep leases in
    the owning process and forward calls between processes (SQLite: waitress)."""
    from tests.support import TestApps, write_applications

    workdir = tmp_path_factory.mktemp(f"work-queue-{request.param}")
    apps = TestApps(app=f"wqapp-{uuid.uuid4().hex[:10]}", remote_app="wqremote")
    apps_file = write_applications(workdir / "applications.ini", apps)
    settings = server_settings(request, apps_file, request.param, workdir / "shared.sqlite3")
    settings["queuey.dedup_window"] = str(WORK_QUEUE_DEDUP_WINDOW)
    nodes: list[ApiNode] = []
    try:
        server = "granian" if request.param == "cassandra" else "waitress"
        for name in ("node-a", "node-b"):
            nodes.append(ApiNode(name, workdir, settings, server=server, workers=2))
        for node in nodes:
            node.wait_ready()
        yield NodePair(
            backend=request.param,
            a=nodes[0],
            b=nodes[1],
            application=apps.app,
            read_delay=float(settings["queuey.read_delay"]),
            dedup_window=WORK_QUEUE_DEDUP_WINDOW,
        )
    finally:
        for node in nodes:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                node.stop()

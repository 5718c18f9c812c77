"""Fixtures for the client library: HTTP clients, groups and workers on real services.

ZooKeeper tests use the session's real server with a chroot per test
(``zookeeper_chroot`` from tests/conftest.py); worker tests also use the
``live_server`` (waitress + SQLite, read delay 0). Workers run in threads of
this process unless a test needs a real process to kill or signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from queuey.client import (
    ConsumerGroup,
    OutgoingMessage,
    QueueyClient,
    ReceivedMessage,
    ReserveWorker,
    Worker,
    WorkerConfig,
)
from tests.client.scripted import ScriptedServer
from tests.support import LiveServer, start_live_server

REPO = Path(__file__).resolve().parents[2]

# Short ZooKeeper timeouts keep the suite quick; the bounds asserted scale with them.
SESSION_TIMEOUT = 4.0
REBALANCE_TIMEOUT = 5.0


class Recorder:
    """A job that remembers which worker processed which message, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, ReceivedMessage]] = []

    def job_for(self, name: str, fail_when: Callable[[ReceivedMessage], bool] | None = None):
        def job(message: ReceivedMessage) -> None:
            if fail_when is not None and fail_when(message):
                raise ValueError(f"cannot process {message.body}")
            with self.lock:
                self.seen.append((name, message))

        return job

    def ids(self) -> list[str]:
        with self.lock:
            return [m.message_id for _, m in self.seen]

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def by_partition(self) -> dict[int, list[ReceivedMessage]]:
        out: dict[int, list[ReceivedMessage]] = defaultdict(list)
        with self.lock:
            for _, message in self.seen:
                out[message.partition].append(message)
        return out


@pytest.fixture
def client(live_server) -> Iterator[QueueyClient]:
    with QueueyClient(
        live_server.url, live_server.application, live_server.key, retries=2, backoff=0.05
    ) as c:
        yield c


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    yield server
    server.close()


@pytest.fixture
def zk(zookeeper_chroot) -> Iterator[KazooClient]:
    """A plain kazoo client inside the test's chroot, to inspect what members wrote."""
    kz = KazooClient(hosts=zookeeper_chroot)
    kz.start(timeout=15)
    yield kz
    kz.stop()
    kz.close()


@pytest.fixture
def make_group(zookeeper_chroot) -> Iterator[Callable[..., ConsumerGroup]]:
    """Start consumer-group members in the test's chroot; all stopped at the end."""
    groups: list[ConsumerGroup] = []

    def make(discover, member_id: str, **kwargs) -> ConsumerGroup:
        kwargs.setdefault("session_timeout", SESSION_TIMEOUT)
        kwargs.setdefault("rebalance_timeout", REBALANCE_TIMEOUT)
        kwargs.setdefault("discovery_interval", 0.5)
        hosts = kwargs.pop("hosts", zookeeper_chroot)
        group = ConsumerGroup(
            hosts, kwargs.pop("group", "g"), discover, member_id=member_id, **kwargs
        )
        group.start()
        groups.append(group)
        return group

    yield make
    for group in groups:
        group.stop()


def worker_settings(live_server, hosts: str, queues: str, **worker) -> dict[str, dict[str, str]]:
    """A worker's ini sections; ``zookeeper_root`` goes to ``[zookeeper] root``."""
    zookeeper = {"hosts": hosts, "session_timeout": str(SESSION_TIMEOUT)}
    if "zookeeper_root" in worker:
        zookeeper["root"] = str(worker.pop("zookeeper_root"))
    section = {
        "group": "testers",
        "queues": queues,
        "job": "examples.crash_worker:process",
        "batch_size": "10",
        "idle_backoff": "0.05",
        "idle_max_backoff": "0.3",
        "rebalance_timeout": str(REBALANCE_TIMEOUT),
        "discovery_interval": "0.5",
        "retry_backoff": "0.01",
        "retry_max_backoff": "0.05",
    }
    section.update({k: str(v) for k, v in worker.items()})
    return {
        "queuey": {
            "urls": live_server.url,
            "application": live_server.application,
            "key": live_server.key,
            "retries": "3",
        },
        "zookeeper": zookeeper,
        "worker": section,
    }


class RunningWorker:
    """A :class:`Worker` on a thread of this process."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, name=f"worker-{worker.group.member_id}")

    @property
    def group(self) -> ConsumerGroup:
        return self.worker.group

    def start(self) -> RunningWorker:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"


@pytest.fixture
def make_worker(live_server, zookeeper_chroot) -> Iterator[Callable[..., RunningWorker]]:
    """Run in-process workers: ``make_worker(name, job, queues="q", **worker_settings)``."""
    running: list[RunningWorker] = []

    def make(name: str, job, queues: str = "q", server=None, **settings) -> RunningWorker:
        hooks = {k: settings.pop(k) for k in ("context", "failure_hook") if k in settings}
        config = WorkerConfig.from_mapping(
            worker_settings(server or live_server, zookeeper_chroot, queues, **settings),
            environ={},
        )
        worker = Worker(config, job=job, member_id=name, **hooks)
        handle = RunningWorker(worker).start()
        running.append(handle)
        return handle

    yield make
    for handle in running:
        if handle.thread.is_alive():
            handle.stop()
        handle.worker.client.close()


def reserve_settings(live_server, queues: str, **worker) -> dict[str, dict[str, str]]:
    """A reserve-mode worker's ini sections (no ZooKeeper); ``urls`` may name
    several API nodes (the first is the server given)."""
    section = {
        "mode": "reserve",
        "queues": queues,
        "job": "examples.crash_worker:process",
        "batch_size": "10",
        "wait": "1",
        "idle_backoff": "0.05",
        "idle_max_backoff": "0.3",
        "retry_backoff": "0",
        "retry_max_backoff": "0",
    }
    urls = worker.pop("urls", live_server.url)
    section.update({k: str(v) for k, v in worker.items()})
    return {
        "queuey": {
            "urls": urls,
            "application": live_server.application,
            "key": live_server.key,
            "retries": "3",
        },
        "worker": section,
    }


class RunningReserveWorker:
    """A :class:`ReserveWorker` on a thread of this process."""

    def __init__(self, worker: ReserveWorker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, name=f"run-{worker.name}")

    def start(self) -> RunningReserveWorker:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"


@pytest.fixture
def make_reserve_worker(live_server) -> Iterator[Callable[..., RunningReserveWorker]]:
    """In-process reserve-mode workers: ``make_reserve_worker(name, job, queues="q", **ini)``."""
    running: list[RunningReserveWorker] = []

    def make(
        name: str, job, queues: str = "q", context=None, server=None, **settings
    ) -> RunningReserveWorker:
        sections = reserve_settings(server or live_server, queues, **settings)
        config = WorkerConfig.from_mapping(sections, environ={})
        handle = RunningReserveWorker(ReserveWorker(config, job=job, context=context, name=name))
        running.append(handle.start())
        return handle

    yield make
    for handle in running:
        if handle.thread.is_alive():
            handle.stop()


class WorkerProcess:
    """``queuey-worker`` as a real process, writing processed crashes to ``output``."""

    def __init__(self, ini: Path, output: Path, name: str, log: Path, delay: float = 0.0):
        env = dict(os.environ)
        env["CRASH_WORKER_OUTPUT"] = str(output)
        env["CRASH_WORKER_DELAY"] = str(delay)
        self.log_path = log
        self._log = log.open("ab")
        self.name = name
        script = Path(sys.executable).with_name("queuey-worker")
        command = (
            [str(script)] if script.exists() else [sys.executable, "-m", "queuey.client.worker"]
        )
        self.proc = subprocess.Popen(
            [*command, "-c", str(ini), "--member-id", name],
            env=env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        self.proc.kill()
        self.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def worker_processes(
    tmp_path: Path, sections_for: Callable[..., dict[str, dict[str, str]]]
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``queuey-worker`` processes running examples.crash_worker; killed at the end.

    ``sections_for(queues, **settings)`` gives the ini sections of one worker.
    """
    procs: list[WorkerProcess] = []
    output = tmp_path / "processed.jsonl"

    def make(name: str, queues: str = "q", delay: float = 0.0, **settings) -> WorkerProcess:
        sections = sections_for(queues, **settings)
        sections["worker"].setdefault("context", "examples.crash_worker:batch_context")
        sections["worker"]["pythonpath"] = str(REPO)
        ini = tmp_path / f"{name}.ini"
        lines = []
        for section, values in sections.items():
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {v}" for k, v in values.items())
        ini.write_text("\n".join(lines) + "\n")
        proc = WorkerProcess(ini, output, name, tmp_path / f"{name}.log", delay)
        procs.append(proc)
        return proc

    make.output = output
    yield make
    for proc in procs:
        if proc.proc.poll() is None:
            proc.kill()
        with contextlib.suppress(Exception):
            proc._log.close()


@pytest.fixture
def make_worker_process(live_server, zookeeper_chroot, tmp_path):
    """Start partition-mode ``queuey-worker`` processes (see :func:`worker_processes`)."""
    yield from worker_processes(
        tmp_path,
        lambda queues, **settings: worker_settings(
            live_server, zookeeper_chroot, queues, **settings
        ),
    )


@pytest.fixture
def make_reserve_worker_process(live_server, tmp_path):
    """Start reserve-mode ``queuey-worker`` processes (no ZooKeeper)."""
    yield from worker_processes(
        tmp_path, lambda queues, **settings: reserve_settings(live_server, queues, **settings)
    )


def read_processed(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def owners(zk: KazooClient, queue: str, group: str = "testers", root="/queuey/groups"):
    """{partition: member} from the owner nodes in ZooKeeper."""
    path = f"{root}/{group}/owners/{queue}"
    found = {}
    if not zk.exists(path):
        return found
    for child in zk.get_children(path):
        with contextlib.suppress(Exception):
            data, _ = zk.get(f"{path}/{child}")
            found[int(child)] = json.loads(data)["member"]
    return found


def post_numbered(client: QueueyClient, queue: str, start: int, count: int, partitions: int):
    """Post crash reports numbered start..start+count-1, spread over every partition."""
    posted = []
    for offset in range(0, count, 100):  # bodies under 10 KiB (see the report on webob tempfiles)
        batch = [
            OutgoingMessage({"crash_id": f"c{n}", "n": n}, partition=(n % partitions) + 1)
            for n in range(start + offset, start + min(count, offset + 100))
        ]
        posted.extend(client.post_batch(queue, batch))
    return posted


class FaultInjector:
    """WSGI middleware over the real app that answers 503 to chosen requests.

    ``fail(method, path_part, after=...)``: requests of ``method`` whose path
    contains ``path_part`` get a 503 with ``Retry-After: 0``; with
    ``after=True`` the real app handles the request first (it is stored, and
    only the answer is lost, as when a write timed out yet was applied);
    ``times``: fail only that many requests, then heal. ``hits`` counts the
    requests answered 503; ``heal()`` stops failing.
    """

    def __init__(self, app) -> None:
        self.app = app
        self.rule: tuple[str, str, bool] | None = None
        self.hits = 0
        self.limit: int | None = None
        self.lock = threading.Lock()

    def fail(self, method: str, path_part: str, after: bool = False, times: int | None = None):
        with self.lock:
            self.rule = (method, path_part, after)
            self.limit = None if times is None else self.hits + times

    def heal(self) -> None:
        self.rule = None

    def __call__(self, environ, start_response):
        with self.lock:
            rule = self.rule
            matches = (
                rule is not None
                and environ["REQUEST_METHOD"] == rule[0]
                and rule[1] in environ.get("PATH_INFO", "")
                and (self.limit is None or self.hits < self.limit)
            )
            if matches:
                self.hits += 1
        if not matches:
            return self.app(environ, start_response)
        if rule[2]:
            answer = self.app(environ, lambda *args, **kwargs: None)
            try:
                for _ in answer:
                    pass
            finally:
                if hasattr(answer, "close"):
                    answer.close()
        body = json.dumps({"status": "error", "error_msg": {"storage": "injected"}}).encode()
        start_response(
            "503 Service Unavailable",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Retry-After", "0"),
            ],
        )
        return [body]


@pytest.fixture
def faulty_server(live_server) -> Iterator[LiveServer]:
    """A second waitress over the live server's app, through a :class:`FaultInjector`
    (``faulty_server.injector``); same storage, so both see the same queues."""
    injector = FaultInjector(live_server.app)
    server = start_live_server(injector, live_server.application)
    server.injector = injector  # type: ignore[attr-defined]
    yield server
    server.stop()

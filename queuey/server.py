"""The production HTTP server: granian, several worker processes.

``pserve`` runs it from an ini file's server section::

    [server:main]
    use = egg:queuey#granian
    listen = 127.0.0.1:5000
    workers = 2
    threads = 40

Why granian: on this project's 2-core test box, under the same native load
(``wrk``, 8 connections, one ~200-byte message per POST, SQLite), granian with
2 workers answered 3,590 posts/s (p99 5.4 ms); gunicorn with 2 ``gthread``
workers 1,870 (p99 10-30 ms); waitress, which runs every request in one
process and so on one core at a time (Python's GIL), 1,390. Its HTTP parsing
and I/O run in Rust, outside the GIL; ``docs/performance.rst`` has the
figures and the command that reproduces them.

Each worker is its own process that builds the app from the same ini
(:mod:`queuey.wsgi`), so every invariant that holds across API nodes holds
across workers; SQLite's file lock, ids minted inside the write transaction
and a shared metadata counter make one host's workers behave as one process
(``docs/storage.rst``). When the ini sets no ``queuey.admin.secret``, the
runner draws one random secret per start for all its processes, so an
operator's admin session holds whichever worker answers.

``threads`` is per worker: WSGI cannot park a request without its thread, so
each long-polling reserve holds one, and ``queuey.reserve.max_waiting`` (per
process) must stay below it, leaving threads for posts, reads and acks.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import secrets
import shutil
import tempfile
import threading
from typing import Any

from queuey.coerce import as_bool
from queuey.web.metrics import MULTIPROCESS_DIR

log = logging.getLogger(__name__)

#: What a process the server starts is: ``worker`` (serves requests, follows
#: the operators' figures) or ``refresher`` (measures queues, publishes the
#: figures); unset, one process does everything (waitress, tests).
ROLE_ENV = "QUEUEY_ROLE"
#: A directory of the server's own, made when it starts and removed when it
#: stops: the workers' metrics files and the figures' snapshot live there.
SHARED_DIR_ENV = "QUEUEY_SHARED_DIR"
#: The file in that directory (mode 0600) holding the secret that signs admin
#: sessions when ``queuey.admin.secret`` is unset: drawn once per server
#: start, so every worker (and one granian starts again) signs alike. Not an
#: environment variable: granian copies the environment into every request's
#: WSGI environ.
SESSION_SECRET_FILE = "session-secret"
#: Set by :mod:`queuey.wsgi`: a server that imports the app may run it in
#: several worker processes, which nothing here can share a secret with.
IMPORTED_ENV = "QUEUEY_WSGI_IMPORTED"


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as a pair."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen must be host:port, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def close_app(app: Any) -> None:
    """Stop what building ``app`` started (threads, connections): ``pserve``
    builds one in its own process, which serves nothing once workers run."""
    registry = getattr(app, "registry", None)
    services = getattr(registry, "queuey", None)  # queuey.core.services.services_of
    if services is None:
        return
    web = getattr(registry, "queuey_web", None)
    # The threads first (they use the storage), the storage last.
    for service in (
        services.overview,
        services.schedules,  # its ticker: the node's is the refresher process's
        services.groups,
        getattr(web, "coordination", None),
        services.storage,
    ):
        if service is not None:
            service.close()


def granian(
    wsgi_app: Any,
    global_conf: dict[str, Any],
    listen: str = "127.0.0.1:5000",
    workers: str = "2",
    threads: str = "40",
    backlog: str = "1024",
    access_log: str = "false",
    **unknown: Any,
) -> None:
    """A PasteDeploy server runner: serve the ini's app with granian's workers."""
    if unknown:
        raise ValueError(f"unknown granian settings: {', '.join(sorted(unknown))}")
    host, port = parse_listen(listen)
    ini = global_conf.get("__file__")
    if not ini:
        raise ValueError("the granian runner needs the ini file's path (run it with pserve)")
    close_app(wsgi_app)
    os.environ["QUEUEY_INI"] = os.path.abspath(ini)
    # Workers start as new interpreters (not forks of this process, which built
    # an app and closed it again), so each imports prometheus_client with the
    # shared metrics directory set: /metrics then sums every worker's counters.
    multiprocessing.set_start_method("spawn", force=True)
    shared_dir = tempfile.mkdtemp(prefix="queuey-server-")
    os.environ[SHARED_DIR_ENV] = shared_dir
    os.environ[MULTIPROCESS_DIR] = os.path.join(shared_dir, "metrics")
    os.mkdir(os.environ[MULTIPROCESS_DIR])
    draw_session_secret(shared_dir)
    # Measuring queues is long Python work: in a process of its own it never
    # holds a worker's interpreter lock while that worker's requests wait.
    refresher = Refresher(os.environ["QUEUEY_INI"])
    refresher.start()
    os.environ[ROLE_ENV] = "worker"
    os.environ["QUEUEY_WORKERS"] = str(int(workers))
    log.info("granian on %s:%d, %s workers of %s threads", host, port, workers, threads)
    try:
        serve(host, port, int(workers), int(threads), int(backlog), as_bool(access_log))
    finally:
        refresher.stop()
        shutil.rmtree(shared_dir, ignore_errors=True)


def draw_session_secret(shared_dir: str) -> None:
    """Write a fresh random session secret to the server's directory, readable
    by this user only (it is never logged)."""
    path = os.path.join(shared_dir, SESSION_SECRET_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_urlsafe(32))


def shared_session_secret() -> str | None:
    """The secret this server drew for its processes, if this process is one of them."""
    shared_dir = os.environ.get(SHARED_DIR_ENV)
    if not shared_dir:
        return None
    try:
        with open(os.path.join(shared_dir, SESSION_SECRET_FILE), encoding="ascii") as source:
            return source.read().strip() or None
    except FileNotFoundError:
        return None


def maybe_one_of_several() -> bool:
    """Whether this process may be one of several serving the same clients:
    a process of our runner, or of a server that imported the app itself
    (:mod:`queuey.wsgi`)."""
    return bool(os.environ.get(IMPORTED_ENV) or os.environ.get(SHARED_DIR_ENV))


def refresher_main(ini: str) -> None:
    """The refresher process: build the app (which starts the operators'
    refresher thread, publishing each pass) and wait to be stopped."""
    os.environ[ROLE_ENV] = "refresher"
    from pyramid.paster import get_app, setup_logging

    setup_logging(ini)
    get_app(ini, "main")
    threading.Event().wait()


class Refresher:
    """The refresher process, started again if it dies (after a pause)."""

    RESTART_PAUSE = 5.0

    def __init__(self, ini: str) -> None:
        self.ini = ini
        self._stop = threading.Event()
        self._process: multiprocessing.Process | None = None
        self._watcher = threading.Thread(target=self._watch, name="queuey-refresher", daemon=True)

    def start(self) -> None:
        self._spawn()
        self._watcher.start()

    def _spawn(self) -> None:
        self._process = multiprocessing.Process(
            target=refresher_main, args=(self.ini,), name="queuey-refresher", daemon=True
        )
        self._process.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._process.join(1.0)
            if self._process.exitcode is not None and not self._stop.is_set():
                code = self._process.exitcode
                log.warning("the refresher process exited (%s); restarting it", code)
                self._stop.wait(self.RESTART_PAUSE)
                if not self._stop.is_set():
                    self._spawn()

    def stop(self) -> None:
        self._stop.set()
        if self._process is not None and self._process.is_alive():
            self._process.terminate()
            self._process.join(10)


def serve(host: str, port: int, workers: int, threads: int, backlog: int, access_log: bool):
    from granian import Granian
    from granian.constants import Interfaces

    Granian(
        "queuey.wsgi:application",
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        workers=workers,
        blocking_threads=threads,
        backlog=backlog,
        log_access=access_log,
        respawn_failed_workers=True,
    ).serve()

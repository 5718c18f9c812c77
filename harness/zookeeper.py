"""A real standalone Apache ZooKeeper on loopback for tests and development.

Jars come from Maven Central through ``etc/zookeeper/pom.xml``; the server is
a detached JVM running ``ZooKeeperServerMain`` with a zoo.cfg rendered under
``var/zookeeper``. The default client port, 12181, stays clear of a stock
ZooKeeper on 2181.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import string
import time
from pathlib import Path

from harness import process
from harness.process import HarnessError

log = logging.getLogger(__name__)

ETC = process.ETC_DIR / "zookeeper"
POM = ETC / "pom.xml"
CONFIG_TEMPLATE = ETC / "zoo.cfg.in"
LOGBACK = ETC / "logback.xml"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
ADDRESS = "127.0.0.1"
DEFAULT_PORT = 12181
DEFAULT_HEAP = "256m"
DEFAULT_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True)
class ZooKeeperServer(process.ServiceDirectory):
    """Where a ZooKeeper server listens and keeps its state."""

    kind = "zookeeper"

    port: int
    directory: Path
    address: str = ADDRESS

    @property
    def hosts(self) -> str:
        """The connection string for kazoo / ZooKeeper clients."""
        return f"{self.address}:{self.port}"

    def __str__(self) -> str:
        return self.hosts

    @property
    def server_log(self) -> Path:
        return self.log_dir / "zookeeper.log"


@dataclasses.dataclass(frozen=True)
class ZooKeeperStatus:
    """Liveness of the server, as reported by ``status``."""

    server: ZooKeeperServer
    pid: int | None
    healthy: bool
    version: str | None


def server_spec(port: int | None = None, *, base_dir: Path | str | None = None) -> ZooKeeperServer:
    """Resolve the port (argument, ``QUEUEY_ZOOKEEPER_PORT``, 12181) and directory."""
    chosen = port if port is not None else process.env_int("QUEUEY_ZOOKEEPER_PORT", DEFAULT_PORT)
    base = Path(base_dir).resolve() if base_dir else process.var_dir() / "zookeeper"
    return ZooKeeperServer(port=chosen, directory=base)


def four_letter_word(server: ZooKeeperServer, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole reply."""
    with socket.create_connection((server.address, server.port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def is_healthy(server: ZooKeeperServer) -> bool:
    """True if the server answers ``ruok`` with ``imok`` and is serving requests.

    ``ruok`` alone is not enough: a server whose database failed to load still
    says ``imok`` while ``srvr`` reports it is not serving.
    """
    try:
        return four_letter_word(server, "ruok") == "imok" and "Mode:" in four_letter_word(
            server, "srvr"
        )
    except OSError:
        return False


def server_version(server: ZooKeeperServer) -> str | None:
    """The version line reported by ``srvr``, e.g. ``3.9.5-<hash>, built on ...``."""
    try:
        reply = four_letter_word(server, "srvr")
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Zookeeper version:"):
            return line.split(":", 1)[1].strip()
    return None


def _render_config(server: ZooKeeperServer) -> Path:
    for sub in ("data", "datalog", "logs", "conf"):
        (server.directory / sub).mkdir(parents=True, exist_ok=True)
    text = string.Template(CONFIG_TEMPLATE.read_text()).substitute(
        address=server.address,
        port=server.port,
        data_dir=server.directory / "data",
        data_log_dir=server.directory / "datalog",
    )
    config = server.directory / "conf" / "zoo.cfg"
    config.write_text(text)
    return config


def _record(server: ZooKeeperServer) -> None:
    """Remember the port a server was started with, for ``status`` without ``--port``."""
    (server.directory / "server.json").write_text(json.dumps({"port": server.port}) + "\n")


def _recorded(server: ZooKeeperServer) -> ZooKeeperServer:
    try:
        port = int(json.loads((server.directory / "server.json").read_text())["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return server
    return dataclasses.replace(server, port=port)


def _java_argv(
    server: ZooKeeperServer, config: Path, classpath: list[Path], heap: str
) -> list[str]:
    return [
        str(process.find_java()),
        process.marker_arg(server.marker),
        "-Xms64m",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:+HeapDumpOnOutOfMemoryError",
        "-XX:+CrashOnOutOfMemoryError",
        f"-XX:HeapDumpPath={server.log_dir}",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dzookeeper.log.dir={server.log_dir}",
        f"-Dlogback.configurationFile={LOGBACK.as_uri()}",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        os.pathsep.join(str(jar) for jar in classpath),
        MAIN_CLASS,
        str(config),
    ]


class _ServerDied(HarnessError):
    """The JVM exited while we waited for it; ends the wait at once."""


def ensure_running(
    port: int | None = None,
    *,
    base_dir: Path | str | None = None,
    heap: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ZooKeeperServer:
    """Start ZooKeeper unless our server already answers; return where it listens.

    ``.hosts`` (also ``str()``) of the result is the ``'host:port'`` string
    for kazoo.

    Idempotent: a live server from our pidfile that answers ``ruok`` is reused.
    Waits (up to ``timeout`` seconds) until the server answers ``imok``.
    """
    server = server_spec(port, base_dir=base_dir)
    server.directory.mkdir(parents=True, exist_ok=True)
    with process.file_lock(server.directory / "harness.lock"):
        pid = process.running_pid(server.pidfile)
        if pid is not None and _recorded(server) != server:
            raise HarnessError(
                f"ZooKeeper in {server.directory} already runs on {_recorded(server).hosts}; "
                "stop it first or use another --base-dir"
            )
        if pid is not None and is_healthy(server):
            return server
        started = time.monotonic()
        if pid is None:
            if process.port_open(server.address, server.port):
                raise HarnessError(
                    f"{server.hosts} is already in use by a process we did not start; "
                    "choose another port (--port, QUEUEY_ZOOKEEPER_PORT)"
                )
            classpath = process.resolve_classpath(POM, name="zookeeper")
            config = _render_config(server)
            _record(server)
            heap = heap or os.environ.get("QUEUEY_ZOOKEEPER_HEAP") or DEFAULT_HEAP
            process.start_detached(
                _java_argv(server, config, classpath, heap),
                pidfile=server.pidfile,
                log_file=server.stdout_log,
                cwd=server.directory,
                marker=server.marker,
            )

        def ready() -> bool:
            if process.running_pid(server.pidfile) is None:
                raise _ServerDied
            return is_healthy(server)

        try:
            process.wait_for(
                ready, timeout=timeout, interval=0.2, what=f"ZooKeeper ruok on {server.hosts}"
            )
        except HarnessError as exc:
            reason = "exited during start-up" if isinstance(exc, _ServerDied) else str(exc)
            raise HarnessError(
                f"ZooKeeper {reason}\n--- {server.server_log} (tail) ---\n"
                f"{process.tail(server.server_log)}\n--- {server.stdout_log} (tail) ---\n"
                f"{process.tail(server.stdout_log, 30)}"
            ) from None
        log.info("ZooKeeper ready on %s in %.1fs", server.hosts, time.monotonic() - started)
    return server


def stop(*, base_dir: Path | str | None = None, timeout: float = 30.0) -> bool:
    """Stop the server we started (only our recorded pid); True if one was running."""
    server = server_spec(base_dir=base_dir)
    server.directory.mkdir(parents=True, exist_ok=True)
    with process.file_lock(server.directory / "harness.lock"):
        recorded = _recorded(server)
        stopped = process.stop_process(server.pidfile, timeout=timeout)
        if stopped:
            # A JVM may show as dead while its threads still hold its socket
            # (as Cassandra's stop waits too): a start at once would find the
            # port taken "by a process we did not start".
            process.wait_for(
                lambda: not process.port_open(recorded.address, recorded.port, timeout=0.2),
                timeout=timeout,
                interval=0.05,
                what=f"ZooKeeper's port {recorded.port} to close",
            )
        return stopped


def status(port: int | None = None, *, base_dir: Path | str | None = None) -> ZooKeeperStatus:
    """Pid, ``ruok`` health and version of our server."""
    server = server_spec(port, base_dir=base_dir)
    if port is None:
        server = _recorded(server)
    pid = process.running_pid(server.pidfile)
    healthy = pid is not None and is_healthy(server)
    return ZooKeeperStatus(
        server=server, pid=pid, healthy=healthy, version=server_version(server) if healthy else None
    )

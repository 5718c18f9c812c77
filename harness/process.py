"""Process plumbing shared by the Cassandra and ZooKeeper harnesses.

The services run as detached JVMs that outlive the Python process which
started them, so a test session can reuse a node started by an earlier
session or by ``make cassandra``. Every process is tracked by a pidfile that
records its pid, its kernel start time and a marker argument; ``stop`` signals
a pid only when all three still match, so it never kills a process we did not
start (a stale pidfile whose pid was reused is simply discarded).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

#: The checkout this harness runs from: ``harness/`` sits at its root, beside ``etc/``.
REPO_ROOT = Path(__file__).resolve().parents[1]
ETC_DIR = REPO_ROOT / "etc"
JAVA_17_HOME = Path("/usr/lib/jvm/java-17-openjdk-amd64")
SUPPORTED_JAVA = ("11", "17")


class HarnessError(RuntimeError):
    """A service could not be resolved, started or stopped."""


def var_dir() -> Path:
    """Root of all runtime state: ``$QUEUEY_VAR_DIR`` or ``var/`` at the repo root."""
    override = os.environ.get("QUEUEY_VAR_DIR")
    return Path(override).resolve() if override else REPO_ROOT / "var"


def env_int(name: str, default: int) -> int:
    """An integer from the environment, failing loudly on a bad value."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise HarnessError(f"{name} must be an integer, got {raw!r}") from None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock, so parallel pytest workers or CLI calls serialise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------- java


def _java_release(home: Path) -> str | None:
    """The feature version ("17") a JDK's ``release`` file declares."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            return line.split("=", 1)[1].strip().strip('"').split(".")[0]
    return None


def find_java() -> Path:
    """The ``java`` to run services with.

    Cassandra 5.0 runs on Java 11 or 17 only, while this machine also has
    newer JDKs (for Spark), so ``JAVA_HOME`` is used only when it is one of
    those; ``QUEUEY_JAVA_HOME`` overrides unconditionally.
    """
    forced = os.environ.get("QUEUEY_JAVA_HOME")
    if forced:
        return Path(forced) / "bin" / "java"
    candidates = [os.environ.get("JAVA_HOME"), str(JAVA_17_HOME)]
    for home in filter(None, candidates):
        if _java_release(Path(home)) in SUPPORTED_JAVA and (Path(home) / "bin/java").exists():
            return Path(home) / "bin" / "java"
    found = shutil.which("java")
    if not found:
        raise HarnessError("no java found: install Java 17 or set QUEUEY_JAVA_HOME")
    return Path(found)


# ---------------------------------------------------------------- classpath


def resolve_classpath(pom: Path, *, name: str, timeout: float = 900.0) -> list[Path]:
    """Jars for a service, resolved by Maven from ``pom`` and cached.

    The cache file is keyed on the pom's content hash, so editing a version in
    the pom re-resolves; a cache whose jars vanished from ~/.m2 is ignored.
    The jars themselves stay in the local Maven repository.
    """
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cache_dir = var_dir() / "classpath"
    cache = cache_dir / f"{name}-{digest}.txt"
    with file_lock(cache_dir / f"{name}.lock"):
        jars = _read_classpath(cache)
        if jars is not None:
            return jars
        mvn = os.environ.get("QUEUEY_MVN", "mvn")
        if shutil.which(mvn) is None:
            raise HarnessError(f"Maven ({mvn}) not found; it resolves the {name} jars")
        with tempfile.NamedTemporaryFile("r", dir=cache_dir, suffix=".tmp", delete=False) as tmp:
            tmp_path = Path(tmp.name)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:build-classpath",
            f"-Dmdep.outputFile={tmp_path}",
        ]
        log.info("resolving %s classpath: %s", name, " ".join(cmd))
        started = time.monotonic()
        env = dict(os.environ)
        env.setdefault("JAVA_HOME", str(find_java().parent.parent))
        try:
            result = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
            )
            if result.returncode != 0:
                raise HarnessError(
                    f"mvn failed resolving {name} (exit {result.returncode}):\n"
                    f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
                )
            tmp_path.replace(cache)
        finally:
            tmp_path.unlink(missing_ok=True)
        log.info("resolved %s classpath in %.1fs", name, time.monotonic() - started)
        jars = _read_classpath(cache)
        if jars is None:
            raise HarnessError(f"mvn produced an unusable classpath for {name}: {cache}")
        return jars


def _read_classpath(cache: Path) -> list[Path] | None:
    try:
        text = cache.read_text().strip()
    except OSError:
        return None
    jars = [Path(entry) for entry in text.split(os.pathsep) if entry]
    if not jars or not all(jar.exists() for jar in jars):
        return None
    return jars


# ---------------------------------------------------------------- processes


class ServiceDirectory:
    """Where one detached service keeps its pidfile and logs (a mixin).

    A subclass names its ``kind`` and has a ``directory`` attribute; the
    marker argument it is started with names both, so ``stop`` recognises it.
    """

    kind: str = ""
    directory: Path

    @property
    def pidfile(self) -> Path:
        return self.directory / f"{self.kind}.pid"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def stdout_log(self) -> Path:
        return self.log_dir / "stdout.log"

    @property
    def marker(self) -> str:
        return f"{self.kind}:{self.directory}"


@dataclasses.dataclass(frozen=True)
class PidRecord:
    """What a pidfile holds: enough to recognise our process and nobody else's."""

    pid: int
    start_time: int
    marker: str

    @classmethod
    def load(cls, pidfile: Path) -> PidRecord | None:
        try:
            data = json.loads(pidfile.read_text())
            return cls(int(data["pid"]), int(data["start_time"]), str(data["marker"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, pidfile: Path) -> None:
        tmp = pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self)) + "\n")
        tmp.replace(pidfile)


def process_start_time(pid: int) -> int | None:
    """Kernel start time (clock ticks since boot) of ``pid``; None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _proc_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def running_pid(pidfile: Path) -> int | None:
    """The pid recorded in ``pidfile`` if that very process is still alive."""
    record = PidRecord.load(pidfile)
    if record is None:
        return None
    if process_start_time(record.pid) != record.start_time:
        return None
    if record.marker not in _proc_cmdline(record.pid):
        return None
    return record.pid


def marker_arg(marker: str) -> str:
    """A JVM system property naming the service instance, checked before any kill
    (its name is the one running nodes were started with)."""
    return f"-Dqueuey.harness={marker}"


def start_detached(
    argv: Sequence[str],
    *,
    pidfile: Path,
    log_file: Path,
    cwd: Path,
    marker: str,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``argv`` in its own session, detached from us, and record its pid.

    A short-lived ``sh`` backgrounds the command and exits, so the service is
    re-parented and never becomes a zombie or a ``Popen`` object this process
    must reap (which would raise ResourceWarning under warnings-as-errors).
    ``argv`` must contain ``marker_arg(marker)``.
    """
    if marker_arg(marker) not in argv:
        raise ValueError("argv must carry the marker argument")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    script = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", str(log_file), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        start_new_session=True,
    )
    pid = int(result.stdout.strip())
    start_time = None
    deadline = time.monotonic() + 5
    while start_time is None and time.monotonic() < deadline:
        start_time = process_start_time(pid)
        if start_time is None:
            time.sleep(0.05)
    if start_time is None:
        raise HarnessError(f"process exited immediately; see {log_file}:\n{tail(log_file)}")
    # The shell's fork may not have exec'd java yet; wait for the marker to show.
    while marker_arg(marker) not in _proc_cmdline(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    PidRecord(pid, start_time, marker_arg(marker)).save(pidfile)
    log.info("started pid %d (%s), log %s", pid, marker, log_file)
    return pid


def stop_process(pidfile: Path, *, timeout: float = 30.0) -> bool:
    """SIGTERM our recorded process, SIGKILL it after ``timeout``; remove the pidfile.

    Returns True if a live process was stopped. Only the exact process the
    pidfile recorded (pid + start time + marker) is ever signalled.
    """
    return stop_processes([pidfile], timeout=timeout) == 1


def stop_processes(pidfiles: Sequence[Path], *, timeout: float = 30.0) -> int:
    """Stop several recorded processes at once (SIGTERM all, then wait; SIGKILL stragglers).

    Signalling together rather than one by one lets JVMs run their shutdown
    hooks in parallel. Returns how many live processes were stopped.
    """
    records: dict[Path, PidRecord] = {}
    for pidfile in pidfiles:
        record = PidRecord.load(pidfile)
        if record is not None and running_pid(pidfile) == record.pid:
            records[pidfile] = record
        else:
            pidfile.unlink(missing_ok=True)
    for record in records.values():
        log.info("stopping pid %d (SIGTERM)", record.pid)
        _signal(record.pid, signal.SIGTERM)

    def all_gone() -> bool:
        return all(process_start_time(r.pid) != r.start_time for r in records.values())

    if not wait_for(all_gone, timeout=timeout, interval=0.1, raise_on_timeout=False):
        for record in records.values():
            if process_start_time(record.pid) == record.start_time:
                log.warning(
                    "pid %d ignored SIGTERM for %.0fs; sending SIGKILL", record.pid, timeout
                )
                _signal(record.pid, signal.SIGKILL)
        wait_for(all_gone, timeout=10.0, interval=0.1, what="processes to die after SIGKILL")
    for pidfile in records:
        pidfile.unlink(missing_ok=True)
    return len(records)


def kill_process(pidfile: Path, *, timeout: float = 30.0) -> bool:
    """SIGKILL our recorded process at once, as a crash would; wait until it is gone.

    For fault tests. Returns False (and drops the pidfile) if it was not running;
    like :func:`stop_processes`, only the exact recorded process is signalled.
    """
    record = PidRecord.load(pidfile)
    if record is None or running_pid(pidfile) != record.pid:
        pidfile.unlink(missing_ok=True)
        return False
    log.info("killing pid %d (SIGKILL)", record.pid)
    _signal(record.pid, signal.SIGKILL)
    wait_for(
        lambda: process_start_time(record.pid) != record.start_time,
        timeout=timeout,
        interval=0.05,
        what=f"pid {record.pid} to die after SIGKILL",
    )
    pidfile.unlink(missing_ok=True)
    return True


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# ---------------------------------------------------------------- waiting


def wait_for(
    condition: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "condition",
    raise_on_timeout: bool = True,
) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds have passed.

    Exceptions from ``condition`` count as "not yet", except HarnessError,
    which a probe raises to give up early (e.g. the process died). On timeout,
    raise HarnessError (or return False when ``raise_on_timeout`` is false).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return True
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing probe means "not ready yet"
            log.debug("waiting for %s: %s", what, exc)
        if time.monotonic() >= deadline:
            if raise_on_timeout:
                raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}")
            return False
        time.sleep(interval)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data.splitlines()[-lines:])


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid``, for reporting memory use."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_jvm_options(path: Path) -> list[str]:
    """JVM flags from an options file: one per line, '#' comments and blanks ignored."""
    flags = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            flags.append(line)
    return flags

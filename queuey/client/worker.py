"""The worker: consume the partitions a consumer group gives this member.

``queuey-worker -c worker.ini`` (or ``Worker(WorkerConfig.from_ini(path)).run()``)
joins the group, and for every partition it owns reads batches in order
starting after the partition's checkpoint, calls the job on each message (or
on each batch), and commits the checkpoint once the batch's work finished.
Processing is at-least-once: a crash re-delivers at most the batch that was in
flight on each partition.

A message whose job keeps raising is retried with exponential backoff
(``max_attempts`` in all), then posted to the failure queue with the error,
and processing moves on. Partitions with nothing to read are polled less and
less often, up to ``idle_max_backoff`` seconds. SIGTERM or SIGINT finishes the
current batch, commits, releases every partition, leaves the group and exits 0.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import dataclasses
import importlib
import logging
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from queuey.client.group import DEFAULT_ROOT, ConsumerGroup, PartitionLease, QueueDiscovery
from queuey.client.http import (
    Conflict,
    NotFound,
    QueueyClient,
    QueueyError,
    ReceivedMessage,
    TooLarge,
)
from queuey.errors import ConfigurationError

log = logging.getLogger(__name__)

Job = Callable[[Any], Any]
FailureHook = Callable[[ReceivedMessage, BaseException], Any]
ContextFactory = Callable[[], contextlib.AbstractContextManager]
MAX_TRACEBACK = 8000


# ------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Every setting of a worker, validated. See ``etc/worker.ini``."""

    # [queuey]
    urls: tuple[str, ...]
    application: str
    key: str | None = None
    http_timeout: float = 10.0
    http_retries: int = 5
    # [zookeeper]
    zookeeper_hosts: str = "127.0.0.1:2181"
    zookeeper_root: str = DEFAULT_ROOT
    session_timeout: float = 10.0
    # [worker]
    group: str = "default"
    queues: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ("*-failed",)
    job: str = ""
    context: str | None = None
    failure_hook: str | None = None
    per_batch: bool = False
    batch_size: int = 100
    max_attempts: int = 5
    retry_backoff: float = 0.5
    retry_max_backoff: float = 30.0
    failure_queue: str = "{queue}-failed"
    idle_backoff: float = 0.2
    idle_max_backoff: float = 5.0
    rebalance_timeout: float = 10.0
    discovery_interval: float = 5.0
    mirror_checkpoints: bool = False
    pythonpath: tuple[str, ...] = ()

    @classmethod
    def from_ini(cls, path: str | Path, environ: Mapping[str, str] | None = None) -> WorkerConfig:
        """Read an ini file; ``QUEUEY_<SECTION>_<KEY>`` environment variables override it.

        Relative ``pythonpath`` entries are taken from the file's directory.
        """
        path = Path(path)
        parser = configparser.ConfigParser(interpolation=None)
        if not parser.read(path, encoding="utf-8"):
            raise ConfigurationError("config", f"cannot read {path}")
        sections = {name: dict(parser[name]) for name in parser.sections()}
        config = cls.from_mapping(sections, environ)
        paths = tuple(str((path.parent / p).resolve()) for p in config.pythonpath)
        return dataclasses.replace(config, pythonpath=paths)

    @classmethod
    def from_mapping(
        cls,
        sections: Mapping[str, Mapping[str, str]],
        environ: Mapping[str, str] | None = None,
    ) -> WorkerConfig:
        """Build from ``{"queuey": {...}, "zookeeper": {...}, "worker": {...}}`` of strings."""
        env = os.environ if environ is None else environ
        reader = _Reader(sections, env)
        config = cls(
            urls=reader.list("queuey", "urls", required=True),
            application=reader.str("queuey", "application", required=True),
            key=reader.str("queuey", "key"),
            http_timeout=reader.number("queuey", "timeout", 10.0, minimum=0.1),
            http_retries=int(reader.number("queuey", "retries", 5, minimum=0, integer=True)),
            zookeeper_hosts=reader.str("zookeeper", "hosts", required=True),
            zookeeper_root=reader.str("zookeeper", "root") or DEFAULT_ROOT,
            session_timeout=reader.number("zookeeper", "session_timeout", 10.0, minimum=1.0),
            group=reader.str("worker", "group", required=True),
            queues=reader.list("worker", "queues", required=True),
            exclude=reader.list("worker", "exclude", default=("*-failed",)),
            job=reader.str("worker", "job", required=True),
            context=reader.str("worker", "context"),
            failure_hook=reader.str("worker", "failure_hook"),
            per_batch=reader.bool("worker", "per_batch", False),
            batch_size=int(
                reader.number("worker", "batch_size", 100, minimum=1, maximum=1000, integer=True)
            ),
            max_attempts=int(reader.number("worker", "max_attempts", 5, minimum=1, integer=True)),
            retry_backoff=reader.number("worker", "retry_backoff", 0.5, minimum=0),
            retry_max_backoff=reader.number("worker", "retry_max_backoff", 30.0, minimum=0),
            failure_queue=reader.str("worker", "failure_queue") or "{queue}-failed",
            idle_backoff=reader.number("worker", "idle_backoff", 0.2, minimum=0.01),
            idle_max_backoff=reader.number("worker", "idle_max_backoff", 5.0, minimum=0.01),
            rebalance_timeout=reader.number("worker", "rebalance_timeout", 10.0, minimum=0.5),
            discovery_interval=reader.number("worker", "discovery_interval", 5.0, minimum=0.1),
            mirror_checkpoints=reader.bool("worker", "mirror_checkpoints", False),
            pythonpath=reader.list("worker", "pythonpath", default=()),
        )
        for name in ("job", "context", "failure_hook"):
            value = getattr(config, name)
            if value and ":" not in value:
                raise ConfigurationError(f"worker.{name}", "must be module:function")
        if "{queue}" not in config.failure_queue:
            raise ConfigurationError("worker.failure_queue", "must contain {queue}")
        return config


class _Reader:
    """Typed access to ini values, naming the key in every error."""

    def __init__(self, sections: Mapping[str, Mapping[str, str]], env: Mapping[str, str]):
        self.sections = sections
        self.env = env

    def raw(self, section: str, key: str) -> str | None:
        env_name = f"QUEUEY_{section}_{key}".upper()
        if env_name in self.env:
            return self.env[env_name]
        value = self.sections.get(section, {}).get(key)
        return value.strip() if isinstance(value, str) else value

    def str(self, section: str, key: str, required: bool = False) -> str | None:
        value = self.raw(section, key)
        if not value:
            if required:
                raise ConfigurationError(f"{section}.{key}", "is required")
            return None
        return value

    def list(
        self, section: str, key: str, required: bool = False, default: Sequence[str] = ()
    ) -> tuple[str, ...]:
        value = self.raw(section, key)
        items = tuple(i.strip() for i in (value or "").replace("\n", ",").split(",") if i.strip())
        if not items:
            if required:
                raise ConfigurationError(f"{section}.{key}", "is required")
            return tuple(default)
        return items

    def number(
        self,
        section: str,
        key: str,
        default: float,
        minimum: float | None = None,
        maximum: float | None = None,
        integer: bool = False,
    ) -> float:
        value = self.raw(section, key)
        if value in (None, ""):
            return default
        try:
            number = int(value) if integer else float(value)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise ConfigurationError(f"{section}.{key}", f"must be {kind}, not {value!r}") from None
        if minimum is not None and number < minimum:
            raise ConfigurationError(f"{section}.{key}", f"must be at least {minimum}")
        if maximum is not None and number > maximum:
            raise ConfigurationError(f"{section}.{key}", f"must be at most {maximum}")
        return number

    def bool(self, section: str, key: str, default: bool) -> bool:
        value = self.raw(section, key)
        if value in (None, ""):
            return default
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{section}.{key}", f"must be true or false, not {value!r}")


def load_callable(spec: str, setting: str = "job") -> Callable:
    """Import ``module:function`` (the function may be dotted: ``module:Class.method``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(setting, f"must be module:function, not {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(setting, f"cannot load {spec!r}: {exc}") from exc
    if not callable(target):
        raise ConfigurationError(setting, f"{spec!r} is not callable")
    return target


# ------------------------------------------------------------------- worker


@dataclasses.dataclass
class WorkerStats:
    """Counters of one worker process."""

    processed: int = 0  # messages whose job finished (or that went to the failure queue)
    batches: int = 0
    retries: int = 0
    failed: int = 0  # messages moved to a failure queue
    commits: int = 0
    read_errors: int = 0


class _Stopped(Exception):
    """A retry wait ended because the lease or the worker stopped."""


class Worker:
    """Runs a job over the partitions this member owns until :meth:`stop`.

    ``job``, ``context`` and ``failure_hook`` default to the callables the
    config names; pass them to use the worker from Python. ``client`` and
    ``group`` may be given to share or instrument them.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        job: Job | None = None,
        context: ContextFactory | None = None,
        failure_hook: FailureHook | None = None,
        client: QueueyClient | None = None,
        group: ConsumerGroup | None = None,
        member_id: str | None = None,
    ) -> None:
        self.config = config
        for entry in reversed(config.pythonpath):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        self.job: Job = job or load_callable(config.job, "worker.job")
        self.context = context or (
            load_callable(config.context, "worker.context") if config.context else None
        )
        self.failure_hook = failure_hook or (
            load_callable(config.failure_hook, "worker.failure_hook")
            if config.failure_hook
            else None
        )
        self._clients: list[QueueyClient] = []
        self.client = client or self._own_client()
        self.group = group or ConsumerGroup(
            config.zookeeper_hosts,
            config.group,
            QueueDiscovery(self._own_client(), config.queues, config.exclude),
            root=config.zookeeper_root,
            session_timeout=config.session_timeout,
            rebalance_timeout=config.rebalance_timeout,
            discovery_interval=config.discovery_interval,
            member_id=member_id,
            mirror=(self.client, config.group) if config.mirror_checkpoints else None,
        )
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._idle: dict[tuple[str, int], tuple[float, float]] = {}  # key -> (due, backoff)
        self._failure_queues: set[str] = set()

    def _own_client(self) -> QueueyClient:
        """A client this worker made, closed when it stops.

        The group's discovery thread gets one (and a connection pool) of its own.
        """
        client = QueueyClient(
            list(self.config.urls),
            self.config.application,
            self.config.key,
            timeout=self.config.http_timeout,
            retries=self.config.http_retries,
        )
        self._clients.append(client)
        return client

    @classmethod
    def from_ini(cls, path: str | Path, **kwargs: Any) -> Worker:
        return cls(WorkerConfig.from_ini(path), **kwargs)

    # ---------------------------------------------------------- control

    def run(self) -> None:
        """Join the group and process until :meth:`stop`; then leave cleanly."""
        log.info(
            "worker %s: group %s, queues %s, job %s",
            self.group.member_id,
            self.config.group,
            ",".join(self.config.queues),
            self.config.job or self.job,
        )
        self.group.start()
        try:
            self._loop()
        finally:
            self.group.stop()
            for own in self._clients:
                own.close()
            log.info("worker %s stopped: %s", self.group.member_id, self.stats)

    def stop(self) -> None:
        """Ask the worker to finish its current batch, commit and leave (thread/signal safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------- loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            leases = self.group.leases()
            worked = False
            now = time.monotonic()
            for lease in leases:
                if self._stop.is_set():
                    break
                due, _ = self._idle.get(lease.key, (0.0, 0.0))
                if due > now:
                    continue
                count = self.process_batch(lease)
                if count > 0:
                    self._idle.pop(lease.key, None)
                    worked = True
                elif count == 0:
                    self._back_off(lease.key)
            if not worked and not self._stop.is_set():
                self._wait_idle(leases)

    def _back_off(self, key: tuple[str, int]) -> None:
        _, previous = self._idle.get(key, (0.0, 0.0))
        backoff = min(self.config.idle_max_backoff, previous * 2 or self.config.idle_backoff)
        self._idle[key] = (time.monotonic() + backoff * random.uniform(0.5, 1.0), backoff)

    def _wait_idle(self, leases: list[PartitionLease]) -> None:
        dues = [self._idle[lease.key][0] for lease in leases if lease.key in self._idle]
        if leases and len(dues) == len(leases):
            timeout = max(0.0, min(dues) - time.monotonic())
        elif leases:
            timeout = 0.0
        else:
            timeout = self.config.idle_max_backoff
        if timeout > 0:
            self._wait(min(timeout, self.config.idle_max_backoff))

    def _wait(self, timeout: float) -> None:
        """Sleep, waking early for a stop request or an ownership change."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.group.wait_for_change(min(left, 0.25))
            if self._stop.is_set():
                return

    # ------------------------------------------------------------ batch

    def process_batch(self, lease: PartitionLease) -> int:
        """Read and process one batch of a partition; the number of messages handled.

        Returns 0 when there was nothing to read (or the read failed) and -1
        when the lease is no longer ours.
        """
        with lease:
            if not lease.valid():
                return -1
            try:
                messages = self._read(lease)
            except QueueyError as exc:
                self.stats.read_errors += 1
                log.warning("reading %s:%s failed: %s", lease.queue, lease.partition, exc)
                return 0
            if not messages:
                return 0
            done = 0
            try:
                with self.context() if self.context else contextlib.nullcontext():
                    if self.config.per_batch:
                        done = self._run_batch(lease, messages)
                    else:
                        for message in messages:
                            if not lease.valid() or not self._run_one(lease, message, self.job):
                                break
                            done += 1
            except Exception:
                # The context manager itself failed: what finished stays finished.
                log.exception("batch context of %s:%s failed", lease.queue, lease.partition)
            self.stats.batches += 1
            if lease.dirty and lease.commit():
                self.stats.commits += 1
            return done

    def _read(self, lease: PartitionLease) -> list[ReceivedMessage]:
        position = lease.position
        return self.client.read(
            lease.queue,
            since=position.message_id if position else None,
            since_timestamp=None if position else "0",
            limit=self.config.batch_size,
            order="ascending",
            partitions=[lease.partition],
        )

    def _run_one(self, lease: PartitionLease, message: ReceivedMessage, job: Job) -> bool:
        """Run ``job`` on one message with retries; True once it is done or moved aside."""
        attempt = 0
        while True:
            attempt += 1
            try:
                job(message)
            except Exception as exc:  # noqa: BLE001 - any job error is retried, then parked
                if attempt >= self.config.max_attempts:
                    if not self._park(lease, message, exc, attempt):
                        return False
                    break
                delay = self._retry_delay(attempt)
                log.warning(
                    "job failed on %s:%s %s (attempt %d/%d): %r; retrying in %.2fs",
                    lease.queue,
                    lease.partition,
                    message.message_id,
                    attempt,
                    self.config.max_attempts,
                    exc,
                    delay,
                )
                self.stats.retries += 1
                try:
                    self._sleep_while_valid(lease, delay)
                except _Stopped:
                    return False
            else:
                break
        lease.advance(message.message_id, message.timestamp)
        self.stats.processed += 1
        return True

    def _run_batch(self, lease: PartitionLease, messages: list[ReceivedMessage]) -> int:
        """Per-batch jobs: retry the whole batch, then fall back to one message at a time."""
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                self.job(messages)
            except Exception as exc:  # noqa: BLE001
                if attempt == self.config.max_attempts:
                    log.warning(
                        "batch of %s:%s failed %d times (%r); retrying message by message",
                        lease.queue,
                        lease.partition,
                        attempt,
                        exc,
                    )
                    break
                self.stats.retries += 1
                try:
                    self._sleep_while_valid(lease, self._retry_delay(attempt))
                except _Stopped:
                    return 0
            else:
                last = messages[-1]
                lease.advance(last.message_id, last.timestamp)
                self.stats.processed += len(messages)
                return len(messages)
        done = 0
        for message in messages:
            if not lease.valid() or not self._run_one(lease, message, lambda m: self.job([m])):
                break
            done += 1
        return done

    def _retry_delay(self, attempt: int) -> float:
        ceiling = min(self.config.retry_max_backoff, self.config.retry_backoff * 2 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def _sleep_while_valid(self, lease: PartitionLease, delay: float) -> None:
        deadline = time.monotonic() + delay
        while True:
            if self._stop.is_set() or not lease.valid():
                raise _Stopped
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, 0.1))

    # ---------------------------------------------------------- failure

    def _park(
        self, lease: PartitionLease, message: ReceivedMessage, exc: BaseException, attempts: int
    ) -> bool:
        """Post a message that kept failing to the failure queue; False if that failed."""
        name = self.config.failure_queue.format(queue=lease.queue)
        record = {
            "queue": lease.queue,
            "partition": message.partition,
            "message_id": message.message_id,
            "timestamp": message.timestamp,
            "group": self.config.group,
            "member": self.group.member_id,
            "attempts": attempts,
            "failed_at": time.time(),
            "error": {
                "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[
                    -MAX_TRACEBACK:
                ],
            },
            "body": message.body,
        }
        try:
            self._post_failure(name, record)
        except TooLarge:
            record["body"] = None
            record["body_omitted"] = True
            try:
                self._post_failure(name, record)
            except QueueyError as again:
                log.error("cannot park %s in %s: %s", message.message_id, name, again)
                return False
        except QueueyError as post_exc:
            log.error("cannot park %s in %s: %s", message.message_id, name, post_exc)
            return False
        self.stats.failed += 1
        log.error(
            "gave up on %s:%s %s after %d attempts (%r); moved to %s",
            lease.queue,
            message.partition,
            message.message_id,
            attempts,
            exc,
            name,
        )
        if self.failure_hook is not None:
            try:
                self.failure_hook(message, exc)
            except Exception:
                log.exception("the failure hook raised on %s", message.message_id)
        return True

    def _post_failure(self, name: str, record: dict) -> None:
        try:
            self.client.post(name, record)
        except NotFound:
            if name in self._failure_queues:
                raise
            with contextlib.suppress(Conflict):
                self.client.create_queue(name, partitions=1)
            self._failure_queues.add(name)
            self.client.post(name, record)


# --------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """``queuey-worker -c worker.ini``: run a worker until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="queuey-worker", description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--config", required=True, help="the worker's ini file")
    parser.add_argument("--log-level", default=os.environ.get("QUEUEY_LOG_LEVEL", "INFO"))
    parser.add_argument("--member-id", help="name this member (default host-pid-random)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        config = WorkerConfig.from_ini(args.config)
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        worker = Worker(config, member_id=args.member_id)
    except ConfigurationError as exc:
        print(f"queuey-worker: bad configuration: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: object) -> None:
        if worker.stopping:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        log.info("%s: finishing the current batch, then leaving", signal.Signals(signum).name)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        worker.run()
    except Exception:
        log.exception("queuey-worker failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

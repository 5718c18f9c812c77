"""A worker's settings: read from an ini file and the environment, validated once.

Every key is named ``<section>.<key>`` in errors (:class:`queuey.errors.ConfigurationError`);
an environment variable ``QUEUEY_<SECTION>_<KEY>`` overrides the ini. The keys
are the table :data:`WORKER` (:mod:`queuey.settingstable`), read like every
other setting of Queuey.

``[worker] mode`` picks how work is divided: ``partitions`` (the default: a
consumer group on ZooKeeper, each partition owned by one member, in order) or
``reserve`` (competing consumers of a work-queue subscription: no ZooKeeper,
any number of workers, the server leases each message to one of them).
"""

from __future__ import annotations

import configparser
import contextlib
import dataclasses
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from queuey.client.consumergroup import DEFAULT_ROOT
from queuey.client.discovery import DEFAULT_EXCLUDE, FAILED_SUFFIX, is_pattern
from queuey.client.http import QueueyClient
from queuey.errors import ConfigurationError
from queuey.limits import MAX_READ, MAX_RESERVE, MAX_VISIBILITY_TIMEOUT, MAX_WAIT
from queuey.settingstable import Table, setting

DEFAULT_FAILURE_QUEUE = "{queue}" + FAILED_SUFFIX

#: The user's job: called with a message, or with a batch's messages (``per_batch``).
Job = Callable[[Any], Any]
#: Makes the context manager a batch runs in.
ContextFactory = Callable[[], contextlib.AbstractContextManager]

MODES = ("partitions", "reserve")
#: Keys that mean nothing in reserve mode, with what to use instead.
PARTITIONS_ONLY = {
    "max_attempts": "set the queue's max_attempts: the server dead-letters in reserve mode",
    "failure_hook": "dead letters go to the queue's dead-letter queue in reserve mode",
    "failure_queue": "set the queue's dead_letter_queue in reserve mode",
}


def _kept(test: Callable[[str], bool], why: str) -> Callable[[str], str]:
    """A parser keeping a text that passes ``test``; ``ValueError(why)`` otherwise."""

    def parse(value: str) -> str:
        if not test(value):
            raise ValueError(why)
        return value

    return parse


_mode = _kept(lambda value: value in MODES, f"must be one of {', '.join(MODES)}")
_spec = _kept(lambda value: ":" in value, "must be module:function")
_failure_queue = _kept(lambda value: "{queue}" in value, "must contain {queue}")


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Every setting of a worker, validated: the table :data:`WORKER`. See ``etc/worker.ini``."""

    # [queuey]
    urls: tuple[str, ...] = setting("queuey.urls", required=True, help="the service's URLs")
    application: str = setting("queuey.application", required=True, help="the application")
    key: str | None = setting("queuey.key", help="the application's key")
    http_timeout: float = setting("queuey.timeout", "10", minimum=0.1, help="HTTP seconds")
    http_retries: int = setting("queuey.retries", "5", minimum=0, help="HTTP retries")
    auto_dedup: bool = setting("queuey.auto_dedup", "true", help="give posts a dedup_id")
    # [zookeeper] (partitions mode; hosts required there)
    zookeeper_hosts: str = setting("zookeeper.hosts", help="ZooKeeper hosts")
    zookeeper_root: str = setting("zookeeper.root", DEFAULT_ROOT, help="where groups live")
    session_timeout: float = setting("zookeeper.session_timeout", "10", minimum=1.0)
    # [worker]
    mode: str = setting("worker.mode", "partitions", parse=_mode, help="partitions or reserve")
    #: Required in partitions mode; ``default`` in reserve mode.
    group: str = setting("worker.group", help="the consumer group")
    queues: tuple[str, ...] = setting("worker.queues", required=True, help="queues or patterns")
    exclude: tuple[str, ...] = setting("worker.exclude", ", ".join(DEFAULT_EXCLUDE))
    job: str = setting("worker.job", required=True, parse=_spec, help="module:function")
    context: str | None = setting("worker.context", parse=_spec, help="batch context factory")
    failure_hook: str | None = setting("worker.failure_hook", parse=_spec)
    per_batch: bool = setting("worker.per_batch", "false", help="the job takes a batch")
    #: 100 (at most MAX_READ) in partitions mode, 10 (at most MAX_RESERVE) in reserve mode.
    batch_size: int = setting("worker.batch_size", minimum=1, help="messages per batch")
    max_attempts: int = setting("worker.max_attempts", "5", minimum=1)
    retry_backoff: float = setting("worker.retry_backoff", "0.5", minimum=0)
    retry_max_backoff: float = setting("worker.retry_max_backoff", "30", minimum=0)
    failure_queue: str = setting(
        "worker.failure_queue", DEFAULT_FAILURE_QUEUE, parse=_failure_queue
    )
    idle_backoff: float = setting("worker.idle_backoff", "0.2", minimum=0.01)
    idle_max_backoff: float = setting("worker.idle_max_backoff", "5", minimum=0.01)
    rebalance_timeout: float = setting("worker.rebalance_timeout", "10", minimum=0.5)
    discovery_interval: float = setting("worker.discovery_interval", "5", minimum=0.1)
    mirror_checkpoints: bool = setting("worker.mirror_checkpoints", "false")
    pythonpath: tuple[str, ...] = setting("worker.pythonpath", "", help="import paths")
    # [worker], reserve mode
    subscription: str = setting("worker.subscription", "default", help="the subscription")
    #: None: the queue's.
    visibility_timeout: int | None = setting(
        "worker.visibility_timeout", minimum=1, maximum=MAX_VISIBILITY_TIMEOUT
    )
    wait: int = setting("worker.wait", "5", minimum=0, maximum=MAX_WAIT, help="long poll")
    concurrency: int = setting("worker.concurrency", "1", minimum=1, maximum=64)

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
        flat = {f"{name}.{k}": v for name, section in sections.items() for k, v in section.items()}
        mode = WORKER.by_name["worker.mode"]
        reserve = mode.read(WORKER.raw(flat, mode, env)) == "reserve"
        if reserve:
            for key, instead in PARTITIONS_ONLY.items():
                if WORKER.raw(flat, WORKER.by_name[f"worker.{key}"], env):
                    raise ConfigurationError(f"worker.{key}", f"not used: {instead}")
        values = WORKER.read(flat, env)
        for name in ("zookeeper_hosts", "group"):
            if values[name] is None and not reserve:
                raise ConfigurationError(WORKER.by_field[name].name, "is required")
        values["zookeeper_hosts"] = values["zookeeper_hosts"] or ""
        values["group"] = values["group"] or "default"
        most = MAX_RESERVE if reserve else MAX_READ
        if values["batch_size"] is None:
            values["batch_size"] = 10 if reserve else 100
        elif values["batch_size"] > most:
            raise ConfigurationError("worker.batch_size", f"must be at most {most}")
        config = WORKER.build(values)
        if reserve:
            if any(is_pattern(q) for q in config.queues):
                raise ConfigurationError("worker.queues", "reserve mode takes names, not patterns")
            if not SUBSCRIPTION.match(config.subscription):
                raise ConfigurationError("worker.subscription", "must match [A-Za-z0-9_-]{1,50}")
        return config


#: The worker's keys, named ``<section>.<key>``; ``QUEUEY_<SECTION>_<KEY>`` overrides one.
WORKER = Table(WorkerConfig, env_prefix="QUEUEY_")
SUBSCRIPTION = re.compile(r"^[A-Za-z0-9_-]{1,50}$")


class Runner:
    """What both workers share: made from an ini file, built clients from its
    ``[queuey]`` keys, and stopped from any thread or a signal handler."""

    config: WorkerConfig
    _stop: threading.Event
    _clients: list[QueueyClient]
    #: Makes the clients :meth:`_own_client` hands out (None: :meth:`_client`).
    _client_factory: Callable[[], QueueyClient] | None = None

    @classmethod
    def from_ini(cls, path: str | Path, **kwargs: Any) -> Any:
        return cls(WorkerConfig.from_ini(path), **kwargs)

    def stop(self) -> None:
        """Ask the worker to finish the work in hand and return from ``run``
        (thread/signal safe): a :class:`~queuey.client.worker.loop.Worker`
        finishes its current batch, commits and leaves; a
        :class:`~queuey.client.worker.reserve.ReserveWorker` finishes the job
        in hand, acks, and releases the rest."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _own_client(self) -> QueueyClient:
        """A new client, this worker's own: closed when it stops."""
        client = (self._client_factory or self._client)()
        self._clients.append(client)
        return client

    def _client(self, **extra: Any) -> QueueyClient:
        """A client of the service the config names (``extra``: more of its options)."""
        config = self.config
        return QueueyClient(
            list(config.urls),
            config.application,
            config.key,
            timeout=config.http_timeout,
            retries=config.http_retries,
            auto_dedup=config.auto_dedup,
            **extra,
        )


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


def load_user_code(
    config: WorkerConfig, job: Job | None = None, context: ContextFactory | None = None
) -> tuple[Job, ContextFactory | None]:
    """The job and batch context a worker runs: those given, or else the ones
    ``config`` names, imported once ``config.pythonpath`` is on ``sys.path``
    (ahead of the rest, in its order)."""
    for entry in reversed(config.pythonpath):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    job = job or load_callable(config.job, "worker.job")
    context = context or (
        load_callable(config.context, "worker.context") if config.context else None
    )
    return job, context

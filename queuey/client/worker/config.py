"""A worker's settings: read from an ini file and the environment, validated once.

Every key is named ``<section>.<key>`` in errors (:class:`queuey.errors.ConfigurationError`);
an environment variable ``QUEUEY_<SECTION>_<KEY>`` overrides the ini. Booleans
and lists are read by :mod:`queuey.coerce`, like every other setting of Queuey.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from queuey.client.consumergroup import DEFAULT_ROOT
from queuey.client.discovery import DEFAULT_EXCLUDE, FAILED_SUFFIX
from queuey.coerce import as_bool, as_list
from queuey.errors import ConfigurationError
from queuey.limits import MAX_READ, MAX_RESERVE, MAX_VISIBILITY_TIMEOUT, MAX_WAIT

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
    mode: str = "partitions"
    group: str = "default"
    queues: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    job: str = ""
    context: str | None = None
    failure_hook: str | None = None
    per_batch: bool = False
    batch_size: int = 100
    max_attempts: int = 5
    retry_backoff: float = 0.5
    retry_max_backoff: float = 30.0
    failure_queue: str = DEFAULT_FAILURE_QUEUE
    idle_backoff: float = 0.2
    idle_max_backoff: float = 5.0
    rebalance_timeout: float = 10.0
    discovery_interval: float = 5.0
    mirror_checkpoints: bool = False
    pythonpath: tuple[str, ...] = ()
    # [worker], reserve mode
    subscription: str = "default"
    visibility_timeout: int | None = None  # None: the queue's
    wait: int = 5
    concurrency: int = 1
    auto_dedup: bool = True

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
        mode = reader.str("worker", "mode") or "partitions"
        if mode not in MODES:
            raise ConfigurationError("worker.mode", f"must be one of {', '.join(MODES)}")
        reserve = mode == "reserve"
        if reserve:
            for key, instead in PARTITIONS_ONLY.items():
                if reader.raw("worker", key):
                    raise ConfigurationError(f"worker.{key}", f"not used: {instead}")
        config = cls(
            urls=reader.list("queuey", "urls", required=True),
            application=reader.str("queuey", "application", required=True),
            key=reader.str("queuey", "key"),
            http_timeout=reader.number("queuey", "timeout", 10.0, minimum=0.1),
            http_retries=int(reader.number("queuey", "retries", 5, minimum=0, integer=True)),
            auto_dedup=reader.bool("queuey", "auto_dedup", True),
            zookeeper_hosts=reader.str("zookeeper", "hosts", required=not reserve) or "",
            zookeeper_root=reader.str("zookeeper", "root") or DEFAULT_ROOT,
            session_timeout=reader.number("zookeeper", "session_timeout", 10.0, minimum=1.0),
            mode=mode,
            group=reader.str("worker", "group", required=not reserve) or "default",
            queues=reader.list("worker", "queues", required=True),
            exclude=reader.list("worker", "exclude", default=DEFAULT_EXCLUDE),
            job=reader.str("worker", "job", required=True),
            context=reader.str("worker", "context"),
            failure_hook=reader.str("worker", "failure_hook"),
            per_batch=reader.bool("worker", "per_batch", False),
            batch_size=int(
                reader.number(
                    "worker",
                    "batch_size",
                    10 if reserve else 100,
                    minimum=1,
                    maximum=MAX_RESERVE if reserve else MAX_READ,
                    integer=True,
                )
            ),
            max_attempts=int(reader.number("worker", "max_attempts", 5, minimum=1, integer=True)),
            retry_backoff=reader.number("worker", "retry_backoff", 0.5, minimum=0),
            retry_max_backoff=reader.number("worker", "retry_max_backoff", 30.0, minimum=0),
            failure_queue=reader.str("worker", "failure_queue") or DEFAULT_FAILURE_QUEUE,
            idle_backoff=reader.number("worker", "idle_backoff", 0.2, minimum=0.01),
            idle_max_backoff=reader.number("worker", "idle_max_backoff", 5.0, minimum=0.01),
            rebalance_timeout=reader.number("worker", "rebalance_timeout", 10.0, minimum=0.5),
            discovery_interval=reader.number("worker", "discovery_interval", 5.0, minimum=0.1),
            mirror_checkpoints=reader.bool("worker", "mirror_checkpoints", False),
            pythonpath=reader.list("worker", "pythonpath", default=()),
            subscription=reader.str("worker", "subscription") or "default",
            visibility_timeout=_optional_int(
                reader.number(
                    "worker",
                    "visibility_timeout",
                    0,
                    minimum=1,
                    maximum=MAX_VISIBILITY_TIMEOUT,
                    integer=True,
                )
            ),
            wait=int(reader.number("worker", "wait", 5, minimum=0, maximum=MAX_WAIT, integer=True)),
            concurrency=int(
                reader.number("worker", "concurrency", 1, minimum=1, maximum=64, integer=True)
            ),
        )
        for name in ("job", "context", "failure_hook"):
            value = getattr(config, name)
            if value and ":" not in value:
                raise ConfigurationError(f"worker.{name}", "must be module:function")
        if "{queue}" not in config.failure_queue:
            raise ConfigurationError("worker.failure_queue", "must contain {queue}")
        if reserve:
            if any(ch in q for q in config.queues for ch in "*?["):
                raise ConfigurationError("worker.queues", "reserve mode takes names, not patterns")
            if not SUBSCRIPTION.match(config.subscription):
                raise ConfigurationError("worker.subscription", "must match [A-Za-z0-9_-]{1,50}")
        return config


SUBSCRIPTION = re.compile(r"^[A-Za-z0-9_-]{1,50}$")


def _optional_int(value: float) -> int | None:
    """An integer setting whose absence (read as 0) means "the server's default"."""
    return int(value) or None


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
        items = as_list(self.raw(section, key))
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
        try:
            return as_bool(value)
        except ValueError as exc:
            raise ConfigurationError(f"{section}.{key}", str(exc)) from None


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

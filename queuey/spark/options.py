"""Data source options: the text Spark passes to ``format("queuey")``, as values.

The options are three tables (:mod:`queuey.settingstable`): :data:`CONNECTION`
(where the messages are), :data:`READ` (batch and streaming reads) and
:data:`WRITE` (batch and streaming writes). Option names are matched
case-insensitively (Spark lower-cases them); an empty value counts as absent.
Every bad option raises :class:`~queuey.errors.ConfigurationError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import plaster

from queuey import ids
from queuey.coerce import as_list
from queuey.errors import ConfigurationError
from queuey.settings import DEFAULTS
from queuey.settingstable import Table, setting
from queuey.spark.connections import Connection, HttpConnection, StorageConnection
from queuey.spark.slices import DEFAULT_PAGE_SIZE

NAME = "queuey"
#: ``minPartitions`` when the data source was not registered through ``register``.
DEFAULT_MIN_PARTITIONS = 4
DEFAULT_BATCH_SIZE = 100
#: A batch never holds more than the service accepts by default.
MAX_BATCH_SIZE = int(DEFAULTS["queuey.max_batch_messages"])


def _time(value: str) -> int:
    """Seconds since the epoch (decimal) or an ISO 8601 time with a zone, as micros."""
    try:
        return ids.to_micros(value)
    except ValueError:
        pass
    try:
        return ids.to_micros(datetime.fromisoformat(value))
    except ValueError as exc:
        raise ValueError(
            f"expected seconds since the epoch or an ISO 8601 time with a zone: {exc}"
        ) from None


def _partitions(value: str) -> tuple[int, ...]:
    try:
        parts = tuple(sorted({int(p) for p in as_list(value)}))
    except ValueError:
        raise ValueError("expected a comma list of numbers") from None
    if not parts or parts[0] < 1:
        raise ValueError("partitions are numbered from 1")
    return parts


@dataclass(frozen=True)
class ConnectionOptions:
    """Where the messages are: the HTTP API (``url``) or a store (``config``, ``backend``)."""

    url: tuple[str, ...] | None = setting("url", help="the HTTP API's URLs (comma list)")
    key: str | None = setting("key", help="the application's key for the HTTP API")
    application: str | None = setting("application", help="the application owning the queue")
    config: str | None = setting("config", help="an ini file holding the storage settings")
    config_section: str = setting("configSection", "app:main", help="the ini's section")
    backend: str | None = setting("backend", help="dotted storage module")


@dataclass(frozen=True)
class ReadOptions:
    """The options of a batch or streaming read: the table :data:`READ`."""

    connection: Connection
    application: str
    queues: tuple[str, ...] = setting("queue", required=True, help="the queue(s) read")
    partitions: tuple[int, ...] | None = setting("partitions", parse=_partitions)
    since_micros: int | None = setting("since", parse=_time)
    until_micros: int | None = setting("until", parse=_time)
    now_micros: int | None = setting("now", parse=_time)
    slices_per_partition: int | None = setting("slicesPerPartition", minimum=1, maximum=10_000)
    #: None: the data source's (:data:`DEFAULT_MIN_PARTITIONS` unless registered).
    min_partitions: int = setting("minPartitions", minimum=1, maximum=100_000)
    page_size: int = setting("pageSize", str(DEFAULT_PAGE_SIZE), minimum=1, maximum=100_000)
    max_messages_per_trigger: int | None = setting("maxMessagesPerTrigger", minimum=1)
    starting_offsets: str | None = setting("startingOffsets")
    max_bytes_per_trigger: int | None = setting("maxBytesPerTrigger", minimum=1)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], min_partitions: int = DEFAULT_MIN_PARTITIONS
    ) -> ReadOptions:
        connection = connection_from_options(options)
        values = READ.read(options)
        if values["min_partitions"] is None:
            values["min_partitions"] = min_partitions
        return READ.build(
            values, connection=connection, application=application_option(options, connection)
        )


@dataclass(frozen=True)
class WriteOptions:
    """The options of a batch or streaming write: the table :data:`WRITE`."""

    queue: str = setting("queue", required=True, help="the queue written")
    batch_size: int = setting(
        "batchSize", str(DEFAULT_BATCH_SIZE), minimum=1, maximum=MAX_BATCH_SIZE
    )
    #: None: the queue's.
    ttl: int | None = setting("ttl", minimum=1, help="message lifetime, seconds")
    #: Streaming writes: post with dedup ids derived from the batch id.
    exactly_once: bool = setting("exactlyOnce", "true")


CONNECTION = Table(ConnectionOptions, any_case=True)
READ = Table(ReadOptions, any_case=True)
WRITE = Table(WriteOptions, any_case=True)


def connection_from_options(options: Mapping[str, str]) -> Connection:
    """The connection the options describe.

    ``url`` (and ``key``) select the HTTP API. Otherwise storage settings come
    from ``config`` (an ini file; its ``configSection``, default ``app:main``)
    and are overridden by ``backend`` and by any option named ``queuey.*``.
    """
    given: ConnectionOptions = CONNECTION.parse(options)
    if given.url is not None:
        return HttpConnection(given.url, application_option(options, None), given.key)
    settings: dict[str, Any] = {}
    if given.config is not None:
        settings.update(plaster.get_settings(given.config, given.config_section))
    settings.update({k: v for k, v in options.items() if k.lower().startswith("queuey.")})
    if given.backend is not None:
        settings["queuey.storage.backend"] = given.backend
    if given.config is None and given.backend is None and "queuey.storage.backend" not in settings:
        raise ConfigurationError(
            "backend", "give url= (HTTP API), backend= (a storage module) or config= (an ini)"
        )
    return StorageConnection.from_settings(settings)


def application_option(options: Mapping[str, str], connection: Connection | None) -> str:
    """The application: an HTTP connection's own, else the ``application`` option."""
    if isinstance(connection, HttpConnection):
        return connection.application
    application = CONNECTION.parse(options).application
    if application is None:
        raise ConfigurationError("application", f"the {NAME} data source needs it")
    return application

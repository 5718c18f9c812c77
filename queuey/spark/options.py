"""Data source options: the text Spark passes to ``format("queuey")``, as values.

Option names are matched case-insensitively (Spark lower-cases them); an empty
value counts as absent. Every bad option raises
:class:`~queuey.errors.ConfigurationError` naming it.
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
from queuey.spark.connections import Connection, HttpConnection, StorageConnection
from queuey.spark.slices import DEFAULT_PAGE_SIZE

NAME = "queuey"
#: ``minPartitions`` when the data source was not registered through ``register``.
DEFAULT_MIN_PARTITIONS = 4


def text_option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower(), options.get(name, default))
    if value is None:
        return None
    value = str(value).strip()
    return value if value != "" else default


def required_option(options: Mapping[str, str], name: str) -> str:
    value = text_option(options, name)
    if value is None:
        raise ConfigurationError(name, f"the {NAME} data source needs option {name!r}")
    return value


def int_option(
    options: Mapping[str, str], name: str, default: int | None, low: int, high: int | None = None
) -> int | None:
    raw = text_option(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(name, f"not an integer: {raw!r}") from None
    if value < low or (high is not None and value > high):
        upper = f"..{high}" if high is not None else " or more"
        raise ConfigurationError(name, f"must be {low}{upper}, got {value}")
    return value


def time_option(options: Mapping[str, str], name: str) -> int | None:
    """Seconds since the epoch (decimal) or an ISO 8601 time with a zone, as micros."""
    raw = text_option(options, name)
    if raw is None:
        return None
    try:
        return ids.to_micros(raw)
    except ValueError:
        pass
    try:
        return ids.to_micros(datetime.fromisoformat(raw))
    except ValueError as exc:
        raise ConfigurationError(
            name, f"expected seconds since the epoch or an ISO 8601 time with a zone: {exc}"
        ) from None


def partitions_option(options: Mapping[str, str]) -> tuple[int, ...] | None:
    raw = text_option(options, "partitions")
    if raw is None:
        return None
    try:
        parts = tuple(sorted({int(p) for p in as_list(raw)}))
    except ValueError:
        raise ConfigurationError(
            "partitions", f"expected a comma list of numbers: {raw!r}"
        ) from None
    if not parts or parts[0] < 1:
        raise ConfigurationError("partitions", f"partitions are numbered from 1: {raw!r}")
    return parts


def connection_from_options(options: Mapping[str, str]) -> Connection:
    """The connection the options describe.

    ``url`` (and ``key``) select the HTTP API. Otherwise storage settings come
    from ``config`` (an ini file; its ``configSection``, default ``app:main``)
    and are overridden by ``backend`` and by any option named ``queuey.*``.
    """
    url = text_option(options, "url")
    if url is not None:
        return HttpConnection(
            as_list(url), required_option(options, "application"), text_option(options, "key")
        )
    settings: dict[str, Any] = {}
    config = text_option(options, "config")
    if config is not None:
        section = text_option(options, "configSection", "app:main")
        settings.update(plaster.get_settings(config, section))
    settings.update({k: v for k, v in options.items() if k.lower().startswith("queuey.")})
    backend = text_option(options, "backend")
    if backend is not None:
        settings["queuey.storage.backend"] = backend
    if config is None and backend is None and "queuey.storage.backend" not in settings:
        raise ConfigurationError(
            "backend", "give url= (HTTP API), backend= (a storage module) or config= (an ini)"
        )
    return StorageConnection.from_settings(settings)


def application_option(options: Mapping[str, str], connection: Connection) -> str:
    """The application: an HTTP connection's own, else the ``application`` option."""
    if isinstance(connection, HttpConnection):
        return connection.application
    return required_option(options, "application")


@dataclass(frozen=True)
class ReadOptions:
    """The options of a batch or streaming read."""

    connection: Connection
    application: str
    queues: tuple[str, ...]
    partitions: tuple[int, ...] | None
    since_micros: int | None
    until_micros: int | None
    now_micros: int | None
    slices_per_partition: int | None
    min_partitions: int
    page_size: int
    max_messages_per_trigger: int | None
    starting_offsets: str | None
    max_bytes_per_trigger: int | None = None

    @classmethod
    def parse(
        cls, options: Mapping[str, str], min_partitions: int = DEFAULT_MIN_PARTITIONS
    ) -> ReadOptions:
        connection = connection_from_options(options)
        return cls(
            connection=connection,
            application=application_option(options, connection),
            queues=as_list(required_option(options, "queue")),
            partitions=partitions_option(options),
            since_micros=time_option(options, "since"),
            until_micros=time_option(options, "until"),
            now_micros=time_option(options, "now"),
            slices_per_partition=int_option(options, "slicesPerPartition", None, 1, 10_000),
            min_partitions=int_option(options, "minPartitions", min_partitions, 1, 100_000),
            page_size=int_option(options, "pageSize", DEFAULT_PAGE_SIZE, 1, 100_000),
            max_messages_per_trigger=int_option(options, "maxMessagesPerTrigger", None, 1),
            starting_offsets=text_option(options, "startingOffsets"),
            max_bytes_per_trigger=int_option(options, "maxBytesPerTrigger", None, 1),
        )

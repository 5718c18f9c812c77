"""The Cassandra backend's settings: the ``queuey.cassandra.*`` keys, read and
validated once into a :class:`CassandraSettings`.

A bad value raises :class:`~queuey.errors.ConfigurationError` naming the key,
so the service stops at start-up rather than on its first request.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queuey.coerce import as_bool, as_list
from queuey.errors import ConfigurationError

PREFIX = "queuey.cassandra."
#: Cassandra refuses TTLs above 20 years.
CASSANDRA_MAX_TTL = 630_720_000
#: The latest expiry Cassandra 5 can store (seconds since the epoch,
#: 2106-02-07T06:28:14Z) with ``storage_compatibility_mode: NONE``; in the
#: CASSANDRA_4 modes it is 2038-01-19T03:14:06Z (2**31 - 2) and the node
#: refuses writes expiring later.
MAX_EXPIRATION = 2**32 - 2
#: What the backend adds to a message's ttl for the rows it writes: one
#: second on the message row, up to two bucket widths (at most a day each)
#: plus one second on the bucket-index row.
TTL_SLACK = 2 * 86400 + 2

_KEYSPACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")


@dataclass(frozen=True)
class CassandraSettings:
    """The backend's settings, parsed and validated (see :func:`parse_settings`)."""

    contact_points: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "queuey"
    local_dc: str = "datacenter1"
    replication: Mapping[str, Any] = field(
        default_factory=lambda: {"class": "SimpleStrategy", "replication_factor": 1}
    )
    request_timeout: float = 2.0
    connect_timeout: float = 5.0
    bucket_seconds: int = 60
    max_ttl: int = 30 * 86400
    create_schema: bool = False
    username: str | None = None
    password: str | None = None
    protocol_version: int = 5
    #: Work queues: ``owned`` (a process owns a subscription's queue partition
    #: for a term and keeps its leases in memory, :mod:`.owned`), the only
    #: design since ``lwt`` was removed.
    work_queue: str = "owned"
    #: Seconds an owner's term lasts without renewal (failover bound).
    owner_term: float = 10.0
    #: Address this process listens on for calls forwarded by other API
    #: processes, and advertises to them.
    peer_host: str = "127.0.0.1"
    #: Shared secret authenticating forwarded calls (None: one the backend
    #: keeps in the keyspace's ``storage_settings``).
    peer_secret: str | None = None


def _get(settings: Mapping[str, Any], name: str) -> Any:
    value = settings.get(PREFIX + name)
    if isinstance(value, str):
        value = value.strip()
    return value


def _as_int(settings: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = _get(settings, name)
    if value is None or value == "":
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(PREFIX + name, f"not an integer: {value!r}") from None
    if not lo <= number <= hi:
        raise ConfigurationError(PREFIX + name, f"must be between {lo} and {hi}, got {number}")
    return number


def _as_float(settings: Mapping[str, Any], name: str, default: float, lo: float) -> float:
    value = _get(settings, name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(PREFIX + name, f"not a number: {value!r}") from None
    if not (math.isfinite(number) and number > lo):
        raise ConfigurationError(PREFIX + name, f"must be a number above {lo}, got {value!r}")
    return number


def _as_bool(settings: Mapping[str, Any], name: str, default: bool) -> bool:
    value = _get(settings, name)
    if value is None or value == "":
        return default
    try:
        return as_bool(value)
    except ValueError as exc:
        raise ConfigurationError(PREFIX + name, str(exc)) from None


def _as_replication(settings: Mapping[str, Any]) -> dict[str, Any]:
    key = PREFIX + "replication"
    value = _get(settings, "replication")
    if value is None or value == "":
        return {"class": "SimpleStrategy", "replication_factor": 1}
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ConfigurationError(key, f"not a map literal: {value!r}") from None
    if not isinstance(value, Mapping) or not isinstance(value.get("class"), str):
        raise ConfigurationError(
            key,
            "must be a map with a 'class', e.g. "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        )
    for k, v in value.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z0-9_.]+", k):
            raise ConfigurationError(key, f"bad option name {k!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.]+", str(v)):
            raise ConfigurationError(key, f"bad value for {k!r}: {v!r}")
    return dict(value)


def parse_settings(settings: Mapping[str, Any]) -> CassandraSettings:
    """Read and validate the ``queuey.cassandra.*`` keys.

    Raises :class:`~queuey.errors.ConfigurationError` naming the first bad key.
    """
    points_raw = _get(settings, "contact_points")
    if points_raw is None or points_raw == "":
        points: tuple[str, ...] = ("127.0.0.1",)
    else:
        points = as_list(points_raw)
        if not points:
            raise ConfigurationError(PREFIX + "contact_points", "no host given")

    keyspace = _get(settings, "keyspace") or "queuey"
    if not _KEYSPACE_RE.match(str(keyspace)):
        raise ConfigurationError(
            PREFIX + "keyspace", f"not a keyspace name ([A-Za-z][A-Za-z0-9_]{{0,47}}): {keyspace!r}"
        )
    local_dc = _get(settings, "local_dc") or "datacenter1"

    username = _get(settings, "username") or None
    password = _get(settings, "password") or None
    if (username is None) != (password is None):
        missing = "password" if password is None else "username"
        raise ConfigurationError(PREFIX + missing, "username and password go together")

    request_timeout = _as_float(settings, "request_timeout", 2.0, 0.0)
    protocol_version = _as_int(settings, "protocol_version", 5, 4, 5)
    work_queue = str(_get(settings, "work_queue") or "owned")
    if work_queue != "owned":
        raise ConfigurationError(
            PREFIX + "work_queue",
            f"must be owned, got {work_queue!r} (the lwt design was removed)",
        )
    owner_term = _as_float(settings, "owner_term", 10.0, 0.0)
    if not 3.0 <= owner_term <= 300.0:
        raise ConfigurationError(
            PREFIX + "owner_term", f"must be between 3 and 300 seconds, got {owner_term}"
        )
    peer_secret = _get(settings, "peer_secret") or None
    if peer_secret is not None and len(str(peer_secret)) < 16:
        raise ConfigurationError(PREFIX + "peer_secret", "must be at least 16 characters")
    return CassandraSettings(
        work_queue=work_queue,
        owner_term=owner_term,
        peer_host=str(_get(settings, "peer_host") or "127.0.0.1"),
        peer_secret=None if peer_secret is None else str(peer_secret),
        contact_points=points,
        port=_as_int(settings, "port", 9042, 1, 65535),
        keyspace=str(keyspace),
        local_dc=str(local_dc),
        replication=_as_replication(settings),
        request_timeout=request_timeout,
        connect_timeout=_as_float(settings, "connect_timeout", max(5.0, request_timeout), 0.0),
        bucket_seconds=_as_int(settings, "bucket_seconds", 60, 1, 86400),
        max_ttl=_as_int(settings, "max_ttl", 30 * 86400, 1, CASSANDRA_MAX_TTL - TTL_SLACK),
        create_schema=_as_bool(settings, "create_schema", False),
        username=username,
        password=password,
        protocol_version=protocol_version,
    )

"""The Cassandra backend's settings: the ``queuey.cassandra.*`` keys, read and
validated once into a :class:`CassandraSettings`.

A bad value raises :class:`~queuey.errors.ConfigurationError` naming the key,
so the service stops at start-up rather than on its first request.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queuey.coerce import as_list
from queuey.errors import ConfigurationError
from queuey.settingstable import Table, setting

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
_OPTION_RE = re.compile(r"[A-Za-z0-9_.]+")


def _hosts(value: str) -> tuple[str, ...]:
    hosts = as_list(value)
    if not hosts:
        raise ValueError("no host given")
    return hosts


def _keyspace(value: str) -> str:
    if not _KEYSPACE_RE.match(value):
        raise ValueError("not a keyspace name ([A-Za-z][A-Za-z0-9_]{0,47})")
    return value


def _replication(value: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError("not a map literal") from None
    if not isinstance(value, Mapping) or not isinstance(value.get("class"), str):
        raise ValueError(
            "must be a map with a 'class', e.g. "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
    for k, v in value.items():
        if not isinstance(k, str) or not _OPTION_RE.fullmatch(k):
            raise ValueError(f"bad option name {k!r}")
        if not _OPTION_RE.fullmatch(str(v)):
            raise ValueError(f"bad value for {k!r}: {v!r}")
    return dict(value)


def _work_queue(value: str) -> str:
    if value != "owned":
        raise ValueError(
            "the lwt work-queue design was removed; owned is the only one (leave the key out)"
        )
    return value


def _peer_secret(value: str) -> str:
    if len(value) < 16:
        raise ValueError("must be at least 16 characters")
    return value


@dataclass(frozen=True)
class CassandraSettings:
    """The backend's settings, parsed and validated: the table :data:`CASSANDRA`."""

    contact_points: tuple[str, ...] = setting(PREFIX + "contact_points", "127.0.0.1", parse=_hosts)
    port: int = setting(PREFIX + "port", "9042", minimum=1, maximum=65535)
    keyspace: str = setting(PREFIX + "keyspace", "queuey", parse=_keyspace)
    local_dc: str = setting(PREFIX + "local_dc", "datacenter1")
    replication: Mapping[str, Any] = setting(
        PREFIX + "replication",
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        parse=_replication,
    )
    request_timeout: float = setting(PREFIX + "request_timeout", "2", above=0)
    #: None: 5 seconds, or the request timeout if longer.
    connect_timeout: float = setting(PREFIX + "connect_timeout", above=0)
    bucket_seconds: int = setting(PREFIX + "bucket_seconds", "60", minimum=1, maximum=86400)
    max_ttl: int = setting(
        PREFIX + "max_ttl", "2592000", minimum=1, maximum=CASSANDRA_MAX_TTL - TTL_SLACK
    )
    create_schema: bool = setting(PREFIX + "create_schema", "false")
    username: str | None = setting(PREFIX + "username")
    password: str | None = setting(PREFIX + "password")
    protocol_version: int = setting(PREFIX + "protocol_version", "5", minimum=4, maximum=5)
    #: Work queues: a process owns a subscription's queue partition for a term
    #: and keeps its leases in memory (:mod:`.owned`); the ``lwt`` design
    #: (every change a lightweight transaction) was removed.
    work_queue: str = setting(PREFIX + "work_queue", "owned", parse=_work_queue)
    #: Seconds an owner's term lasts without renewal (failover bound).
    owner_term: float = setting(PREFIX + "owner_term", "10", minimum=3, maximum=300)
    #: Address this process listens on for calls forwarded by other API
    #: processes, and advertises to them.
    peer_host: str = setting(PREFIX + "peer_host", "127.0.0.1")
    #: Shared secret authenticating forwarded calls (None: one the backend
    #: keeps in the keyspace's ``storage_settings``).
    peer_secret: str | None = setting(PREFIX + "peer_secret", parse=_peer_secret)


#: The backend's keys (``queuey.cassandra.*``).
CASSANDRA = Table(CassandraSettings)


def parse_settings(settings: Mapping[str, Any]) -> CassandraSettings:
    """Read and validate the ``queuey.cassandra.*`` keys.

    Raises :class:`~queuey.errors.ConfigurationError` naming the first bad key.
    """
    values = CASSANDRA.read(settings)
    if (values["username"] is None) != (values["password"] is None):
        missing = "password" if values["password"] is None else "username"
        raise ConfigurationError(PREFIX + missing, "username and password go together")
    if values["connect_timeout"] is None:
        values["connect_timeout"] = max(5.0, values["request_timeout"])
    return CASSANDRA.build(values)

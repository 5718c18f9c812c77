"""Service settings, read and validated once at start-up.

Every key lives under ``queuey.`` in the ini's app section. An environment
variable may override any key: ``queuey.read_delay`` is overridden by
``QUEUEY_READ_DELAY`` (dots become underscores, upper case). A bad value stops
the service with a :class:`~queuey.errors.ConfigurationError` naming the key.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from queuey import ids
from queuey.coerce import as_bool, as_list
from queuey.errors import ConfigurationError

T = TypeVar("T")

DEFAULTS: dict[str, str] = {
    "queuey.storage.backend": "queuey.storage.sqlite",
    "queuey.sqlite.path": "var/queuey.sqlite3",
    "queuey.applications": "",
    "queuey.read_delay": "0",
    "queuey.max_clock_skew": "0",
    "queuey.default_ttl": "259200",
    "queuey.max_ttl": "2592000",
    "queuey.max_partitions": "200",
    "queuey.max_message_size": "1048576",
    "queuey.max_batch_messages": "1000",
    "queuey.max_batch_size": "4194304",
    "queuey.max_form_size": "65536",
    "queuey.trusted_proxies": "",
    "queuey.metrics.allow": "127.0.0.0/8, ::1/128",
    "queuey.zookeeper.hosts": "",
    "queuey.retry_after": "5",
    "queuey.metadata_cache_seconds": "1",
    "queuey.dedup_window": "300",
    "queuey.reserve.max_waiting": "64",
    "queuey.reserve.poll_interval": "0.5",
    "queuey.limits.max_requests_per_second": "0",
    "queuey.limits.max_burst": "0",
    "queuey.limits.max_waiting_polls": "",  # half of queuey.reserve.max_waiting
    "queuey.limits.max_queues": "1000",
    "queuey.limits.max_subscriptions": "100",
    "queuey.limits.throttle_hold": "1",
    "queuey.limits.max_posts_per_second": "0",
    "queuey.limits.max_messages": "0",
    "queuey.limits.max_bytes": "0",
    "queuey.sqs.region": "us-east-1",
    "queuey.sqs.regions": "*",
    "queuey.sqs.partitions": "4",
    "queuey.sqs.fifo_partitions": "16",
    "queuey.stats.interval": "10",
    "queuey.stats.max_age": "30",
    "queuey.stats.budget": "2",
    "queuey.stats.max_queues": "5000",
    "queuey.groups.root": "/queuey/groups",
    "queuey.schedules.interval": "1",
    "queuey.schedules.limit": "100",
    "queuey.flow.fair_threshold": "100",
    "queuey.flow.keys_per_application": "4096",
    "queuey.admin.enabled": "true",
    "queuey.admin.secret": "",
    "queuey.admin.secure_cookie": "false",
    "queuey.admin.session_seconds": "3600",
}

#: An AWS region name as it appears in an ARN.
REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,3}$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_in(address: str | None, networks: Iterable[Network]) -> bool:
    """Whether ``address`` (text, possibly missing or malformed) lies in one of ``networks``.

    Every request asks this of its peer address, so answers for a tuple of
    networks (what :func:`parse_networks` gives) are remembered.
    """
    if isinstance(networks, tuple):
        return _address_in_tuple(address, networks)
    return _address_in(address, networks)


def _address_in(address: str | None, networks: Iterable[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in net for net in networks)


@functools.lru_cache(maxsize=4096)
def _address_in_tuple(address: str | None, networks: tuple[Network, ...]) -> bool:
    return _address_in(address, networks)


def parse_networks(value: str) -> tuple[Network, ...]:
    """A comma or whitespace separated CIDR list (a bare address means /32 or /128)."""
    return tuple(ipaddress.ip_network(item, strict=False) for item in as_list(value))


@dataclass(frozen=True)
class Settings:
    """The validated settings the web layer uses."""

    storage_backend: str
    applications_file: str
    read_delay: float
    max_clock_skew: float
    default_ttl: int
    max_ttl: int
    max_partitions: int
    max_message_size: int
    max_batch_messages: int
    max_batch_size: int
    #: Largest body of any route that reads no message: the admin pages'
    #: forms (but posting a message), and every other path (:mod:`queuey.web.bodies`).
    max_form_size: int
    trusted_proxies: tuple[Network, ...]
    metrics_allow: tuple[Network, ...]
    zookeeper_hosts: str
    retry_after: int
    metadata_cache_seconds: float
    #: Seconds a ``dedup_id`` is remembered (``queuey.dedup_window``).
    dedup_window: int
    #: Most ``reserve`` calls of this process that long-poll at once; one
    #: more answers at once (each waiting call holds a server thread).
    reserve_max_waiting: int
    #: Longest pause, seconds, between a long poll's storage checks when no
    #: post on this process wakes it (delayed messages, other API nodes).
    reserve_poll_interval: float
    #: Each application's share unless the applications file says otherwise
    #: (:mod:`queuey.core.quotas`; 0 turns a limit off): authenticated requests
    #: per second and the burst above that rate (0: one second of the rate),
    #: long polls waiting at once per process (unset: half of
    #: ``queuey.reserve.max_waiting``, so one application never holds every
    #: slot), queues, subscriptions per queue.
    limits_max_requests_per_second: float
    limits_max_burst: int
    limits_max_waiting_polls: int
    limits_max_queues: int
    limits_max_subscriptions: int
    #: Longest time, seconds, a throttled request is held before its 429 (on
    #: one of its application's waiting slots, so a client looping on refusals
    #: mostly waits instead of burning the server's CPU); 0: answered at once.
    limits_throttle_hold: float
    #: The home region: its SQS queues are the native queues of the same name.
    sqs_region: str
    #: The other regions SQS requests may be signed for, each its own namespace
    #: of queues; None: any region name.
    sqs_regions: frozenset[str] | None
    #: Partitions of a standard / FIFO queue created through the SQS endpoint.
    sqs_partitions: int
    sqs_fifo_partitions: int
    #: The operators' overview (:mod:`queuey.core.overview`): seconds between
    #: refresher passes, age at which a queue's figures are measured again,
    #: seconds of measuring per pass, most queues watched.
    stats_interval: float
    stats_max_age: float
    stats_budget: float
    stats_max_queues: int
    #: Where consumer groups live in ZooKeeper (:mod:`queuey.client.consumergroup`).
    groups_root: str
    #: The admin pages at ``/admin/`` (:mod:`queuey.admin`): served at all,
    #: the secret signing their session cookies (random per process when
    #: empty), cookies sent over HTTPS only, seconds a sign-in lasts.
    admin_enabled: bool
    admin_secret: str
    admin_secure_cookie: bool
    admin_session_seconds: int
    raw: Mapping[str, Any]
    #: Seconds between the schedule ticker's passes (0: no ticker in this
    #: process), and the most schedules one application may have
    #: (:mod:`queuey.core.schedules`).
    schedules_interval: float = 1.0
    schedules_limit: int = 100
    #: Posts a group makes in a fair queue's window before it may count as
    #: busy (:mod:`queuey.core.fairness`).
    flow_fair_threshold: int = 100
    #: Most keys (rate buckets, counted queues) one application holds at once
    #: in the flow-control tables (:mod:`queuey.core.slots`).
    flow_keys_per_application: int = 4096
    #: Each application's post rate and what it may store unless the
    #: applications file says otherwise (:mod:`queuey.core.flow`; 0: no
    #: limit): messages posted per second, messages and body bytes stored.
    limits_max_posts_per_second: float = 0.0
    limits_max_messages: int = 0
    limits_max_bytes: int = 0

    @property
    def read_delay_micros(self) -> int:
        return int(self.read_delay * ids.MICROS)


def merged(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict:
    """Defaults, then the ini, then ``QUEUEY_*`` environment overrides."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = dict(DEFAULTS)
    out.update(settings)
    for key in list(out):
        env_key = key.replace(".", "_").upper()
        if env_key in environ:
            out[key] = environ[env_key]
    return out


def _get(raw: Mapping[str, Any], key: str, convert: Callable[[Any], T], check=None) -> T:
    try:
        value = convert(raw[key])
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(key, f"invalid value {raw[key]!r}: {exc}") from exc
    if check is not None and not check(value):
        raise ConfigurationError(key, f"value {value!r} out of range")
    return value


#: Each application's limits (:mod:`queuey.core.quotas`): the conversion and the
#: range of a ``queuey.limits.*`` setting and of an application's own value
#: (:mod:`queuey.applications`) alike.
LIMIT_RANGES: dict[str, tuple[Callable[[str], float], float, float]] = {
    "max_requests_per_second": (float, 0, 1_000_000),
    "max_burst": (int, 0, 1_000_000),
    "max_waiting_polls": (int, 0, 10_000),
    "max_queues": (int, 0, 10_000_000),
    "max_subscriptions": (int, 0, 100_000),
    "max_posts_per_second": (float, 0, 1_000_000),
    "max_messages": (int, 0, 1_000_000_000_000),
    "max_bytes": (int, 0, 2**50),
}


def _limit(raw: Mapping[str, Any], name: str) -> Any:
    convert, low, high = LIMIT_RANGES[name]
    return _get(raw, f"queuey.limits.{name}", convert, lambda v: low <= v <= high)


def _max_waiting_polls(raw: Mapping[str, Any]) -> int:
    if str(raw["queuey.limits.max_waiting_polls"]).strip() == "":
        return (_get(raw, "queuey.reserve.max_waiting", int) + 1) // 2
    return _limit(raw, "max_waiting_polls")


def _regions(value: str) -> frozenset[str] | None:
    """``*`` (any region) or region names, separated by spaces or commas."""
    names = value.replace(",", " ").split()
    if names == ["*"]:
        return None
    for name in names:
        if not REGION.match(name):
            raise ValueError(f"{name!r} is not a region name")
    return frozenset(names)


def _get_default_ttl(raw: Mapping[str, Any], max_ttl: int) -> int:
    value = _get(raw, "queuey.default_ttl", int)
    if not 1 <= value <= max_ttl:
        raise ConfigurationError(
            "queuey.default_ttl", f"{value} must be between 1 and queuey.max_ttl ({max_ttl})"
        )
    return value


def load_settings(
    settings: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    require_applications: bool = True,
) -> Settings:
    """The settings, each checked (:class:`ConfigurationError` names a bad
    key). ``require_applications``: refuse settings without an applications
    file (a server's; a process that only posts, such as a Spark executor,
    may have none)."""
    raw = merged(settings, environ)
    max_ttl = _get(raw, "queuey.max_ttl", int, lambda v: v >= 1)
    max_partitions = _get(raw, "queuey.max_partitions", int, lambda v: v >= 1)
    parsed = Settings(
        storage_backend=str(raw["queuey.storage.backend"]),
        applications_file=str(raw["queuey.applications"]),
        read_delay=_get(raw, "queuey.read_delay", float, lambda v: v >= 0),
        max_clock_skew=_get(raw, "queuey.max_clock_skew", float, lambda v: v >= 0),
        default_ttl=_get_default_ttl(raw, max_ttl),
        max_ttl=max_ttl,
        max_partitions=max_partitions,
        max_message_size=_get(raw, "queuey.max_message_size", int, lambda v: v >= 64),
        max_batch_messages=_get(raw, "queuey.max_batch_messages", int, lambda v: v >= 1),
        max_batch_size=_get(raw, "queuey.max_batch_size", int, lambda v: v >= 1024),
        max_form_size=_get(raw, "queuey.max_form_size", int, lambda v: 1024 <= v <= 2**24),
        trusted_proxies=_get(raw, "queuey.trusted_proxies", parse_networks),
        metrics_allow=_get(raw, "queuey.metrics.allow", parse_networks),
        zookeeper_hosts=str(raw["queuey.zookeeper.hosts"]).strip(),
        retry_after=_get(raw, "queuey.retry_after", int, lambda v: v >= 1),
        metadata_cache_seconds=_get(raw, "queuey.metadata_cache_seconds", float, lambda v: v >= 0),
        dedup_window=dedup_window(raw, environ={}),
        reserve_max_waiting=_get(raw, "queuey.reserve.max_waiting", int, lambda v: 0 <= v <= 10000),
        reserve_poll_interval=_get(
            raw, "queuey.reserve.poll_interval", float, lambda v: 0.01 <= v <= 0.5
        ),
        limits_max_requests_per_second=_limit(raw, "max_requests_per_second"),
        limits_max_burst=_limit(raw, "max_burst"),
        limits_max_waiting_polls=_max_waiting_polls(raw),
        limits_max_queues=_limit(raw, "max_queues"),
        limits_max_subscriptions=_limit(raw, "max_subscriptions"),
        limits_throttle_hold=_get(
            raw, "queuey.limits.throttle_hold", float, lambda v: 0 <= v <= 20
        ),
        sqs_region=_get(raw, "queuey.sqs.region", str, REGION.match),
        sqs_regions=_get(raw, "queuey.sqs.regions", _regions),
        sqs_partitions=_get(raw, "queuey.sqs.partitions", int, lambda v: 1 <= v <= max_partitions),
        sqs_fifo_partitions=_get(
            raw, "queuey.sqs.fifo_partitions", int, lambda v: 1 <= v <= max_partitions
        ),
        stats_interval=_get(raw, "queuey.stats.interval", float, lambda v: v >= 0),
        stats_max_age=_get(raw, "queuey.stats.max_age", float, lambda v: v >= 0),
        stats_budget=_get(raw, "queuey.stats.budget", float, lambda v: v > 0),
        stats_max_queues=_get(raw, "queuey.stats.max_queues", int, lambda v: v >= 1),
        groups_root=_get(raw, "queuey.groups.root", str, lambda v: v.startswith("/")),
        admin_enabled=_get(raw, "queuey.admin.enabled", as_bool),
        admin_secret=str(raw["queuey.admin.secret"]),
        admin_secure_cookie=_get(raw, "queuey.admin.secure_cookie", as_bool),
        admin_session_seconds=_get(raw, "queuey.admin.session_seconds", int, lambda v: v >= 60),
        raw=raw,
        schedules_interval=_get(raw, "queuey.schedules.interval", float, lambda v: 0 <= v <= 60),
        schedules_limit=_get(raw, "queuey.schedules.limit", int, lambda v: 0 <= v <= 10_000),
        flow_fair_threshold=_get(
            raw, "queuey.flow.fair_threshold", int, lambda v: 1 <= v <= 1_000_000
        ),
        flow_keys_per_application=_get(
            raw, "queuey.flow.keys_per_application", int, lambda v: 16 <= v <= 10_000_000
        ),
        limits_max_posts_per_second=_limit(raw, "max_posts_per_second"),
        limits_max_messages=_limit(raw, "max_messages"),
        limits_max_bytes=_limit(raw, "max_bytes"),
    )
    if require_applications and not parsed.applications_file:
        raise ConfigurationError("queuey.applications", "no applications file configured")
    return parsed


def dedup_window(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> int:
    """``queuey.dedup_window``: seconds a ``dedup_id`` is remembered (1 to 7 days).

    Storage backends read it in ``load_from_config`` (the store keeps the ids).
    """
    raw = merged(settings, environ)
    return _get(raw, "queuey.dedup_window", int, lambda v: 1 <= v <= 604800)


def check_read_delay(settings: Settings, write_timeout: float) -> None:
    """Refuse a read delay that would let a reader skip a slow write (invariant 2)."""
    needed = write_timeout + settings.max_clock_skew
    if settings.read_delay < needed:
        raise ConfigurationError(
            "queuey.read_delay",
            f"{settings.read_delay}s is shorter than the storage write timeout "
            f"({write_timeout}s) plus queuey.max_clock_skew ({settings.max_clock_skew}s); "
            f"readers could skip messages. Set it to at least {needed}s.",
        )


def check_max_ttl(settings: Settings, storage_max_ttl: int) -> None:
    """Refuse a ``queuey.max_ttl`` the storage backend cannot keep.

    Every ttl up to ``queuey.max_ttl`` passes the API's validation, so a
    larger one than the store keeps would fail only when posted (a 500 or a
    lost answer); stopping at start-up names the setting instead.
    """
    if settings.max_ttl > storage_max_ttl:
        raise ConfigurationError(
            "queuey.max_ttl",
            f"{settings.max_ttl}s is longer than the storage backend "
            f"({settings.storage_backend}) can keep messages ({storage_max_ttl}s); "
            "lower it, or raise the backend's own limit (e.g. queuey.cassandra.max_ttl).",
        )

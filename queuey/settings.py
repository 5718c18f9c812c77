"""Service settings, read and validated once at start-up.

Every key lives under ``queuey.`` in the ini's app section. An environment
variable may override any key: ``queuey.read_delay`` is overridden by
``QUEUEY_READ_DELAY`` (dots become underscores, upper case). A bad value stops
the service with a :class:`~queuey.errors.ConfigurationError` naming the key.
Each key is declared once, on its :class:`Settings` field (the table
:data:`SERVER`, :mod:`queuey.settingstable`).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queuey import ids
from queuey.coerce import as_list
from queuey.errors import ConfigurationError
from queuey.settingstable import Table, setting

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


def _region(value: str) -> str:
    if not REGION.match(value):
        raise ValueError(f"{value!r} is not a region name")
    return value


def _regions(value: str) -> frozenset[str] | None:
    """``*`` (any region) or region names, separated by spaces or commas."""
    names = as_list(value)
    return None if names == ("*",) else frozenset(_region(name) for name in names)


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must start with /")
    return value


@dataclass(frozen=True)
class Settings:
    """The validated settings the web layer uses: the table :data:`SERVER`."""

    storage_backend: str = setting("queuey.storage.backend", "queuey.storage.sqlite")
    applications_file: str = setting("queuey.applications", "")
    read_delay: float = setting("queuey.read_delay", "0", minimum=0)
    max_clock_skew: float = setting("queuey.max_clock_skew", "0", minimum=0)
    default_ttl: int = setting("queuey.default_ttl", "259200")
    max_ttl: int = setting("queuey.max_ttl", "2592000", minimum=1)
    max_partitions: int = setting("queuey.max_partitions", "200", minimum=1)
    max_message_size: int = setting("queuey.max_message_size", "1048576", minimum=64)
    max_batch_messages: int = setting("queuey.max_batch_messages", "1000", minimum=1)
    max_batch_size: int = setting("queuey.max_batch_size", "4194304", minimum=1024)
    #: Largest body of any route that reads no message: the admin pages'
    #: forms (but posting a message), and every other path (:mod:`queuey.web.bodies`).
    max_form_size: int = setting("queuey.max_form_size", "65536", minimum=1024, maximum=2**24)
    trusted_proxies: tuple[Network, ...] = setting(
        "queuey.trusted_proxies", "", parse=parse_networks
    )
    metrics_allow: tuple[Network, ...] = setting(
        "queuey.metrics.allow", "127.0.0.0/8, ::1/128", parse=parse_networks
    )
    zookeeper_hosts: str = setting("queuey.zookeeper.hosts", "")
    retry_after: int = setting("queuey.retry_after", "5", minimum=1)
    metadata_cache_seconds: float = setting("queuey.metadata_cache_seconds", "1", minimum=0)
    dedup_window: int = setting("queuey.dedup_window", "300", minimum=1, maximum=604800)
    #: Most ``reserve`` calls of this process that long-poll at once; one
    #: more answers at once (each waiting call holds a server thread).
    reserve_max_waiting: int = setting("queuey.reserve.max_waiting", "64", minimum=0, maximum=10000)
    #: Longest pause, seconds, between a long poll's storage checks when no
    #: post on this process wakes it (delayed messages, other API nodes).
    reserve_poll_interval: float = setting(
        "queuey.reserve.poll_interval", "0.5", minimum=0.01, maximum=0.5
    )
    #: Each application's share unless the applications file says otherwise
    #: (:mod:`queuey.core.quotas`; 0 turns a limit off): authenticated requests
    #: per second and the burst above that rate (0: one second of the rate),
    #: long polls waiting at once per process (unset: half of
    #: ``queuey.reserve.max_waiting``, so one application never holds every
    #: slot), queues, subscriptions per queue; its post rate and what it may
    #: store (:mod:`queuey.core.flow`): messages posted per second, messages
    #: and body bytes stored.
    limits_max_requests_per_second: float = setting(
        "queuey.limits.max_requests_per_second", "0", minimum=0, maximum=1_000_000
    )
    limits_max_burst: int = setting("queuey.limits.max_burst", "0", minimum=0, maximum=1_000_000)
    limits_max_waiting_polls: int = setting(
        "queuey.limits.max_waiting_polls", None, minimum=0, maximum=10_000
    )
    limits_max_queues: int = setting(
        "queuey.limits.max_queues", "1000", minimum=0, maximum=10_000_000
    )
    limits_max_subscriptions: int = setting(
        "queuey.limits.max_subscriptions", "100", minimum=0, maximum=100_000
    )
    limits_max_posts_per_second: float = setting(
        "queuey.limits.max_posts_per_second", "0", minimum=0, maximum=1_000_000
    )
    limits_max_messages: int = setting(
        "queuey.limits.max_messages", "0", minimum=0, maximum=1_000_000_000_000
    )
    limits_max_bytes: int = setting("queuey.limits.max_bytes", "0", minimum=0, maximum=2**50)
    #: Longest time, seconds, a throttled request is held before its 429 (on
    #: one of its application's waiting slots, so a client looping on refusals
    #: mostly waits instead of burning the server's CPU); 0: answered at once.
    limits_throttle_hold: float = setting("queuey.limits.throttle_hold", "1", minimum=0, maximum=20)
    #: The home region: its SQS queues are the native queues of the same name.
    sqs_region: str = setting("queuey.sqs.region", "us-east-1", parse=_region)
    #: The other regions SQS requests may be signed for, each its own namespace
    #: of queues; None: any region name.
    sqs_regions: frozenset[str] | None = setting("queuey.sqs.regions", "*", parse=_regions)
    #: Partitions of a standard / FIFO queue created through the SQS endpoint
    #: (at most ``queuey.max_partitions``).
    sqs_partitions: int = setting("queuey.sqs.partitions", "4", minimum=1)
    sqs_fifo_partitions: int = setting("queuey.sqs.fifo_partitions", "16", minimum=1)
    #: The operators' overview (:mod:`queuey.core.overview`): seconds between
    #: refresher passes, age at which a queue's figures are measured again,
    #: seconds of measuring per pass, most queues watched.
    stats_interval: float = setting("queuey.stats.interval", "10", minimum=0)
    stats_max_age: float = setting("queuey.stats.max_age", "30", minimum=0)
    stats_budget: float = setting("queuey.stats.budget", "2", above=0)
    stats_max_queues: int = setting("queuey.stats.max_queues", "5000", minimum=1)
    #: Where consumer groups live in ZooKeeper (:mod:`queuey.client.consumergroup`).
    groups_root: str = setting("queuey.groups.root", "/queuey/groups", parse=_absolute)
    #: Seconds between the schedule ticker's passes (0: no ticker in this
    #: process), and the most schedules one application may have
    #: (:mod:`queuey.core.schedules`).
    schedules_interval: float = setting("queuey.schedules.interval", "1", minimum=0, maximum=60)
    schedules_limit: int = setting("queuey.schedules.limit", "100", minimum=0, maximum=10_000)
    #: Posts a group makes in a fair queue's window before it may count as
    #: busy (:mod:`queuey.core.fairness`).
    flow_fair_threshold: int = setting(
        "queuey.flow.fair_threshold", "100", minimum=1, maximum=1_000_000
    )
    #: Most keys (rate buckets, counted queues) one application holds at once
    #: in the flow-control tables (:mod:`queuey.core.slots`).
    flow_keys_per_application: int = setting(
        "queuey.flow.keys_per_application", "4096", minimum=16, maximum=10_000_000
    )
    #: The admin pages at ``/admin/`` (:mod:`queuey.admin`): served at all,
    #: the secret signing their session cookies (random per process when
    #: empty), cookies sent over HTTPS only, seconds a sign-in lasts.
    admin_enabled: bool = setting("queuey.admin.enabled", "true")
    admin_secret: str = setting("queuey.admin.secret", "")
    admin_secure_cookie: bool = setting("queuey.admin.secure_cookie", "false")
    admin_session_seconds: int = setting("queuey.admin.session_seconds", "3600", minimum=60)
    #: Every key given (defaults, the ini, environment overrides): the
    #: backend's own keys are read from it.
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def read_delay_micros(self) -> int:
        return int(self.read_delay * ids.MICROS)


#: The server's keys (``queuey.*`` in the ini's app section).
SERVER = Table(Settings)
#: Each key's default, as the ini would write it.
DEFAULTS: dict[str, str] = SERVER.defaults()

#: Each application's limits (:mod:`queuey.core.quotas`): the conversion and the
#: range of a ``queuey.limits.*`` setting and of an application's own value
#: (:mod:`queuey.applications`) alike. The throttle hold is the server's alone.
LIMIT_RANGES: dict[str, tuple[Callable[[Any], Any], float, float]] = {
    key.name.removeprefix("queuey.limits."): (key.parse, key.minimum, key.maximum)
    for key in SERVER.keys
    if key.name.startswith("queuey.limits.") and key.name != "queuey.limits.throttle_hold"
}


def merged(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict:
    """Defaults, then the ini, then ``QUEUEY_*`` environment overrides."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = dict(DEFAULTS)
    out.update(settings)
    for key in {*out, *SERVER.by_name}:
        env_key = key.replace(".", "_").upper()
        if env_key in environ:
            out[key] = environ[env_key]
    return out


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
    values = SERVER.read(raw)
    if not 1 <= values["default_ttl"] <= values["max_ttl"]:
        raise ConfigurationError(
            "queuey.default_ttl",
            f"{values['default_ttl']} must be between 1 and queuey.max_ttl ({values['max_ttl']})",
        )
    for name in ("partitions", "fifo_partitions"):
        if values[f"sqs_{name}"] > values["max_partitions"]:
            raise ConfigurationError(
                f"queuey.sqs.{name}",
                f"must be at most queuey.max_partitions ({values['max_partitions']})",
            )
    if values["limits_max_waiting_polls"] is None:
        values["limits_max_waiting_polls"] = (values["reserve_max_waiting"] + 1) // 2
    parsed = SERVER.build(values, raw=raw)
    if require_applications and not parsed.applications_file:
        raise ConfigurationError("queuey.applications", "no applications file configured")
    return parsed


def dedup_window(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> int:
    """``queuey.dedup_window``: seconds a ``dedup_id`` is remembered (1 to 7 days).

    Storage backends read it in ``load_from_config`` (the store keeps the ids).
    """
    key = SERVER.by_name["queuey.dedup_window"]
    return key.read(merged(settings, environ)[key.name])


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

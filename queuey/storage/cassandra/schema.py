"""The Cassandra schema: its migrations, the upgrade and the version check.

The schema is versioned: the ``schema_version`` table records each migration, so
``queuey schema upgrade`` is idempotent (a second run applies nothing) and a
later release appends migrations instead of editing old ones. Statements use
``IF NOT EXISTS`` as well, so a migration interrupted half-way can be re-run.

The time-bucket width is fixed when the schema is created and stored in
``storage_settings``: changing it later would make existing messages
unreachable, so an existing keyspace keeps its width.

The ``leases`` table belonged to the removed ``lwt`` work-queue design: the
migrations no longer create it (nor alter it) for a new keyspace, and an
existing keyspace keeps it, unread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session

from queuey.storage.cassandra.session import build_cluster, unavailable
from queuey.storage.cassandra.settings import CassandraSettings, parse_settings

log = logging.getLogger(__name__)

COMPONENT = "queuey"
#: How many TWCS windows the longest TTL should span (Cassandra's advice: 20-50).
TARGET_WINDOWS = 30
#: gc_grace_seconds of the message tables: messages are never updated, only
#: deleted by id now and then; three hours is Cassandra's hint window.
MESSAGES_GC_GRACE = 3 * 3600
#: Schema changes wait for every node to agree; give them longer than requests.
DDL_TIMEOUT = 60.0


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: Callable[[CassandraSettings], list[str]]


def twcs_window(bucket_seconds: int, max_ttl: int) -> tuple[str, int]:
    """TWCS window (unit, size) for messages.

    A whole multiple of the bucket width (both are aligned on the epoch, so a
    bucket never straddles two windows), about ``max_ttl / 30`` long so the
    live data spans a few dozen SSTables at most.
    """
    base = math.lcm(bucket_seconds, 60)
    seconds = base * max(1, round(max_ttl / TARGET_WINDOWS / base))
    for unit, length in (("DAYS", 86400), ("HOURS", 3600), ("MINUTES", 60)):
        if seconds % length == 0:
            return unit, seconds // length
    raise AssertionError("unreachable: window is a multiple of 60")


def _cql_map(options: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in options.items()) + "}"


def _expiring_options(cfg: CassandraSettings) -> str:
    """The table options of every message table (rows that only expire):
    TWCS in windows of :func:`twcs_window`, no default TTL, a short grace.

    Shipped migrations use it: a change here is a new migration's
    ``ALTER TABLE``, never an edit of this text."""
    unit, size = twcs_window(cfg.bucket_seconds, cfg.max_ttl)
    twcs = (
        "{'class': 'TimeWindowCompactionStrategy', "
        f"'compaction_window_unit': '{unit}', 'compaction_window_size': '{size}'}}"
    )
    return (
        f"compaction = {twcs} AND default_time_to_live = 0 "
        f"AND gc_grace_seconds = {MESSAGES_GC_GRACE}"
    )


def _v1(cfg: CassandraSettings) -> list[str]:
    ks = cfg.keyspace
    expiring = _expiring_options(cfg)
    return [
        f"CREATE TABLE IF NOT EXISTS {ks}.queues ("
        " application text, name text, partitions int, default_ttl int,"
        " queue_type text, consistency text, created bigint, incarnation text,"
        " PRIMARY KEY ((application), name))",
        f"CREATE TABLE IF NOT EXISTS {ks}.messages ("
        " incarnation text, partition int, bucket bigint, id timeuuid,"
        " body text, expires bigint,"
        " PRIMARY KEY ((incarnation, partition, bucket), id))"
        f" WITH CLUSTERING ORDER BY (id ASC) AND {expiring}",
        f"CREATE TABLE IF NOT EXISTS {ks}.message_buckets ("
        " incarnation text, partition int, bucket bigint, message_ttl int,"
        " PRIMARY KEY ((incarnation, partition), bucket, message_ttl))"
        f" WITH CLUSTERING ORDER BY (bucket DESC, message_ttl DESC) AND {expiring}",
        f"CREATE TABLE IF NOT EXISTS {ks}.checkpoints ("
        " application text, queue text, consumer text, partition int, id uuid,"
        " PRIMARY KEY ((application, queue), consumer, partition))",
        f"CREATE TABLE IF NOT EXISTS {ks}.storage_settings (name text PRIMARY KEY, value text)",
        f"INSERT INTO {ks}.storage_settings (name, value) "
        f"VALUES ('bucket_seconds', '{cfg.bucket_seconds}') IF NOT EXISTS",
    ]


def _v2(cfg: CassandraSettings) -> list[str]:
    """Work queues: queue settings, message fields, the priority index, dedup
    ids and subscription state (see :mod:`queuey.storage.cassandra.workqueue`)."""
    ks = cfg.keyspace
    expiring = _expiring_options(cfg)
    return [
        f"ALTER TABLE {ks}.queues ADD IF NOT EXISTS"
        " (visibility_timeout int, max_attempts int, dead_letter_queue text, delay int)",
        f"ALTER TABLE {ks}.messages ADD IF NOT EXISTS"
        " (priority int, attributes frozen<map<text, text>>)",
        # Priority > 0 messages, copied here so a subscription finds them
        # without scanning the priority-0 backlog.
        f"CREATE TABLE IF NOT EXISTS {ks}.priority_messages ("
        " incarnation text, partition int, priority int, bucket bigint, id timeuuid,"
        " body text, expires bigint, attributes frozen<map<text, text>>,"
        " PRIMARY KEY ((incarnation, partition, priority, bucket), id))"
        f" WITH CLUSTERING ORDER BY (id ASC) AND {expiring}",
        f"CREATE TABLE IF NOT EXISTS {ks}.priority_buckets ("
        " incarnation text, partition int, priority int, bucket bigint, message_ttl int,"
        " PRIMARY KEY ((incarnation, partition, priority), bucket, message_ttl))"
        f" WITH CLUSTERING ORDER BY (bucket DESC, message_ttl DESC) AND {expiring}",
        f"CREATE TABLE IF NOT EXISTS {ks}.queue_priorities ("
        " incarnation text, partition int, priority int,"
        " PRIMARY KEY ((incarnation, partition), priority))",
        f"CREATE TABLE IF NOT EXISTS {ks}.dedup ("
        " incarnation text, dedup_id text, until bigint, id timeuuid, partition int,"
        " body text, expires bigint, priority int, attributes frozen<map<text, text>>,"
        " PRIMARY KEY ((incarnation, dedup_id)))"
        f" WITH {expiring}",
        f"CREATE TABLE IF NOT EXISTS {ks}.subscriptions ("
        " incarnation text, subscription text, PRIMARY KEY ((incarnation), subscription))",
    ]


def _v3(cfg: CassandraSettings) -> list[str]:
    """FIFO queues and free-form queue attributes (JSON text, so a lightweight
    transaction can compare it)."""
    return [
        f"ALTER TABLE {cfg.keyspace}.queues ADD IF NOT EXISTS (fifo boolean, attributes text)",
    ]


def _v4(cfg: CassandraSettings) -> list[str]:
    """Dedup claims record that their message write completed (:mod:`.dedup`)."""
    return [f"ALTER TABLE {cfg.keyspace}.dedup ADD IF NOT EXISTS (written boolean)"]


def _v5(cfg: CassandraSettings) -> list[str]:
    """A slot's generation, drawn anew by each reopen (redrive), was a column
    of ``leases``; owned lease states carry it in their log."""
    return []


def _v6(cfg: CassandraSettings) -> list[str]:
    """Owned work queues (:mod:`.owned`): who owns a subscription's queue
    partition for a term, the API processes that may own one, and each
    partition's lease state as a snapshot plus a ring of deltas."""
    ks = cfg.keyspace
    return [
        f"CREATE TABLE IF NOT EXISTS {ks}.work_owners ("
        " incarnation text, subscription text, partition int,"
        " owner text, address text, epoch bigint,"
        " PRIMARY KEY ((incarnation, subscription, partition)))",
        f"CREATE TABLE IF NOT EXISTS {ks}.work_members ("
        " shard int, member text, address text, PRIMARY KEY ((shard), member))",
        f"CREATE TABLE IF NOT EXISTS {ks}.work_state ("
        " incarnation text, subscription text, partition int,"
        " snapshot blob static, ring int, epoch bigint, seq bigint, delta blob,"
        " PRIMARY KEY ((incarnation, subscription, partition), ring))",
    ]


def _v7(cfg: CassandraSettings) -> list[str]:
    """Messages on a schedule (:mod:`.schedules`): one row each, by application."""
    return [
        f"CREATE TABLE IF NOT EXISTS {cfg.keyspace}.schedules ("
        " application text, name text, queue text, cron text, interval_seconds int,"
        " timezone text, start_at bigint, end_at bigint, message text, missed text,"
        " paused boolean, next_tick bigint, last_tick bigint, posted bigint, error text,"
        " created bigint, version bigint,"
        " PRIMARY KEY ((application), name))"
    ]


#: Every migration, in order. Append; never edit one that has shipped.
MIGRATIONS: Sequence[Migration] = (
    Migration(1, "queues, messages in time buckets, bucket index, checkpoints", _v1),
    Migration(2, "work queues: settings, message fields, priorities, dedup ids, leases", _v2),
    Migration(3, "FIFO queues, queue attributes, first delivery times", _v3),
    Migration(4, "dedup claims record that their message was written", _v4),
    Migration(5, "lease generations (redrives)", _v5),
    Migration(6, "owned work queues: owners, members, lease state logs", _v6),
    Migration(7, "schedules", _v7),
)
LATEST_VERSION = MIGRATIONS[-1].version


def _version_table(keyspace: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_version ("
        " component text, version int, description text, applied_at timestamp,"
        " PRIMARY KEY ((component), version))"
    )


def _keyspace_exists(session: Session, keyspace: str) -> bool:
    return bool(
        session.execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
            (keyspace,),
        ).all()
    )


def current_version(session: Session, keyspace: str) -> int:
    """The highest migration applied to ``keyspace`` (0 for none).

    Reads ``system_schema`` rather than the driver's metadata, which may lag
    behind changes made by another client.
    """
    exists = session.execute(
        "SELECT table_name FROM system_schema.tables "
        "WHERE keyspace_name = %s AND table_name = 'schema_version'",
        (keyspace,),
    ).all()
    if not exists:
        return 0
    rows = session.execute(
        f"SELECT version FROM {keyspace}.schema_version WHERE component = %s",
        (COMPONENT,),
    ).all()
    return max((row[0] for row in rows), default=0)


def apply_migrations(session: Session, cfg: CassandraSettings) -> list[str]:
    """Create the keyspace if needed and apply pending migrations.

    Returns the statements applied (empty when the schema was up to date).
    """
    ks = cfg.keyspace
    applied: list[str] = []

    def run(statement: str) -> None:
        log.info("cassandra schema: %s", statement)
        session.execute(statement, timeout=DDL_TIMEOUT)
        applied.append(statement)

    if not _keyspace_exists(session, ks):
        run(
            f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
            f"{_cql_map(cfg.replication)} AND durable_writes = true"
        )
    version = current_version(session, ks)
    pending = [m for m in MIGRATIONS if m.version > version]
    if not pending:
        return applied
    if version == 0:
        run(_version_table(ks))
    for migration in pending:
        for statement in migration.statements(cfg):
            run(statement)
        session.execute(
            f"INSERT INTO {ks}.schema_version (component, version, description, applied_at) "
            "VALUES (%s, %s, %s, %s)",
            (COMPONENT, migration.version, migration.description, datetime.now(UTC)),
            timeout=DDL_TIMEOUT,
        )
        applied.append(f"-- migration {migration.version}: {migration.description}")
    return applied


def upgrade_with_config(cfg: CassandraSettings) -> list[str]:
    """:func:`upgrade_schema` with settings already parsed."""
    cluster = build_cluster(cfg)
    try:
        with unavailable("schema upgrade"):
            session = cluster.connect()
            return apply_migrations(session, cfg)
    finally:
        cluster.shutdown()


def upgrade_schema(settings: Mapping[str, Any]) -> list[str]:
    """Create or upgrade the Queuey schema described by ``queuey.cassandra.*`` settings.

    Idempotent: returns the statements applied, empty when nothing was pending.
    Raises ``ConfigurationError`` for bad settings and ``StorageUnavailable``
    when Cassandra cannot be reached.
    """
    return upgrade_with_config(parse_settings(settings))


def schema_status(settings: Mapping[str, Any]) -> tuple[int, int]:
    """(applied version, latest version) of the configured keyspace."""
    cfg = parse_settings(settings)
    cluster = build_cluster(cfg)
    try:
        with unavailable("schema status"):
            return current_version(cluster.connect(), cfg.keyspace), LATEST_VERSION
    finally:
        cluster.shutdown()


def schema_version(settings: Mapping[str, Any]) -> str:
    """The configured keyspace's schema version for people, e.g. ``"2 of 2"``.

    ``queuey schema show`` prints it; ``0 of N`` means the keyspace has no
    Queuey schema yet.
    """
    applied, latest = schema_status(settings)
    return f"{applied} of {latest}"

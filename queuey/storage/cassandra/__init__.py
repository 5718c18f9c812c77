"""Apache Cassandra storage backend (``queuey.storage.backend = queuey.storage.cassandra``).

Data layout (created by :mod:`queuey.storage.cassandra.schema`):

* ``queues``: one row per queue, ``PRIMARY KEY ((application), name)``; written
  with lightweight transactions so two API nodes cannot both create a name.
* ``messages``: ``PRIMARY KEY ((incarnation, partition, bucket), id)``. A queue
  partition is split into time buckets (``bucket = timestamp // width``) so no
  Cassandra partition grows without bound, whatever the queue's rate. Rows are
  written ``USING TTL`` and the table uses TimeWindowCompactionStrategy, so
  expired data leaves by whole SSTables.
* ``message_buckets``: the bucket index, ``PRIMARY KEY ((incarnation,
  partition), bucket, message_ttl)``, newest first. Reads walk it instead of
  probing every possible bucket, so sparse queues stay cheap. One row per
  (bucket, TTL) in use: a write with a short TTL can never shorten the life of
  the row that keeps longer-lived messages reachable, and a reader knows the
  longest TTL in a bucket, so it starts its slice after the messages that have
  surely expired instead of reading them (no tombstone scans).
* ``checkpoints``: ``PRIMARY KEY ((application, queue), consumer, partition)``.

Work queues (schema version 2; the design is in ``docs/storage.rst``, "Work
queues on Cassandra"):

* ``messages`` gained ``priority`` and ``attributes`` (a frozen map: no
  tombstone on insert); ``queues`` gained the work-queue settings.
* ``priority_messages`` / ``priority_buckets``: a copy of each message of
  priority > 0, keyed and bucketed like ``messages`` plus the priority, and
  ``queue_priorities``: which priorities a queue partition has used.
* ``dedup``: ``PRIMARY KEY ((incarnation, dedup_id))``, the first message of
  each dedup id and whether its write completed (``written``, version 4)
  (:mod:`.dedup`).
* ``subscriptions``: the subscriptions used on an incarnation (their state
  in each queue partition is kept by its owner: :mod:`.owned`, :mod:`.statelog`).

Purging writes a new ``incarnation`` into the queue row and deleting removes
the row: both are O(1), old message rows become unreachable and expire by TTL.

Expiry seen by readers is decided in Python from the caller's clock
(``expires > now``); Cassandra's TTL only reclaims the space later.

The modules, one job each: :mod:`.settings` (the ``queuey.cassandra.*`` keys),
:mod:`.session` (driver set-up, consistency, error wrapping), :mod:`.statements`
(prepared CQL), :mod:`.schema` (migrations), :mod:`.queues` (queue rows),
:mod:`.writes`, :mod:`.dedup` and :mod:`.reads` (the message paths),
:mod:`.leases` (a subscription's state and its rules, no I/O), :mod:`.turns`
(this process's turns on lease partitions), :mod:`.ownedtable` (the owned
lease states), :mod:`.rounds` (the rounds every change runs),
:mod:`queuey.storage.cassandra.workqueue` (ack, release, extend, reopen),
:mod:`.reservation` (reserve),
:mod:`.workstats` (stats), :mod:`.flow` (what flow control asks: in-flight
counts, live processes) and :mod:`.backend` (:class:`CassandraStorage`).

Besides ``load_from_config``, this package offers the schema commands the
``queuey schema`` CLI looks for on a backend module: ``upgrade_schema(settings)``
(the steps applied) and ``schema_version(settings)`` (e.g. ``"2 of 2"``).
"""

from queuey.storage.cassandra.backend import CassandraStorage, load_from_config
from queuey.storage.cassandra.schema import schema_status, schema_version, upgrade_schema
from queuey.storage.cassandra.settings import CassandraSettings, parse_settings

__all__ = [
    "CassandraSettings",
    "CassandraStorage",
    "load_from_config",
    "parse_settings",
    "schema_status",
    "schema_version",
    "upgrade_schema",
]

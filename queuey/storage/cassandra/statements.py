"""Every CQL statement the backend runs, prepared once per connection, and the
:class:`Connection` that carries them with their session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import Cluster, Session


class Statements:
    """Every statement the backend runs, prepared once per connection.

    Table names are qualified with the keyspace (no ``USE``), as Cassandra
    asks for prepared statements.
    """

    _QUEUE_COLS = (
        "application, name, partitions, default_ttl, queue_type, consistency, created, "
        "incarnation, visibility_timeout, max_attempts, dead_letter_queue, delay, fifo, "
        "attributes"
    )
    #: The columns a message read selects, in :func:`.reads.message_of` order.
    MESSAGE_COLS = "id, body, expires, priority, attributes"

    def __init__(self, session: Session, ks: str) -> None:
        p = session.prepare
        cols = self._QUEUE_COLS
        mcols = self.MESSAGE_COLS
        self.ping = p("SELECT release_version FROM system.local")
        self.storage_setting = p(f"SELECT value FROM {ks}.storage_settings WHERE name = ?")
        # queues
        self.insert_queue = p(
            f"INSERT INTO {ks}.queues ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "IF NOT EXISTS"
        )
        self.select_queue = p(f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name = ?")
        self.list_queues = p(
            f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name > ? LIMIT ?"
        )
        self.update_queue = p(
            f"UPDATE {ks}.queues "
            "SET partitions = ?, default_ttl = ?, queue_type = ?, consistency = ?, "
            "visibility_timeout = ?, max_attempts = ?, dead_letter_queue = ?, delay = ?, "
            "attributes = ? "
            "WHERE application = ? AND name = ? "
            "IF partitions = ? AND default_ttl = ? AND queue_type = ? AND consistency = ? "
            "AND visibility_timeout = ? AND max_attempts = ? AND dead_letter_queue = ? "
            "AND delay = ? AND attributes = ?"
        )
        self.purge_queue = p(
            f"UPDATE {ks}.queues SET incarnation = ? WHERE application = ? AND name = ? "
            "IF incarnation = ?"
        )
        self.delete_queue = p(
            f"DELETE FROM {ks}.queues WHERE application = ? AND name = ? IF EXISTS"
        )
        # messages
        self.insert_message = p(
            f"INSERT INTO {ks}.messages "
            "(incarnation, partition, bucket, id, body, expires, priority, attributes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.insert_bucket = p(
            f"INSERT INTO {ks}.message_buckets (incarnation, partition, bucket, message_ttl) "
            "VALUES (?, ?, ?, ?) USING TTL ?"
        )
        self.messages = RangeStatements(p, ks, "messages", "message_buckets", "", mcols)
        #: Bulk scans (:func:`.reads.scan_partition`): ids and bodies as bytes,
        #: which the driver hands over without building UUIDs or decoding text.
        self.scan = RangeStatements(
            p, ks, "messages", "message_buckets", "", RangeStatements.SCAN_COLS
        )
        # ``messages_asc`` / ``buckets_asc`` etc. kept as names for the reader
        self.buckets_desc = self.messages.index_desc
        self.buckets_asc = self.messages.index_asc
        self.messages_asc = self.messages.rows_asc
        self.messages_desc = self.messages.rows_desc
        key = "incarnation = ? AND partition = ? AND bucket = ? AND id = ?"
        self.get_message = p(f"SELECT {mcols} FROM {ks}.messages WHERE {key}")
        self.delete_message = p(f"DELETE FROM {ks}.messages WHERE {key}")
        # the priority index (priority > 0 only)
        self.priority = RangeStatements(
            p, ks, "priority_messages", "priority_buckets", " AND priority = ?", mcols
        )
        # the same without bodies, for counting (stats)
        light = RangeStatements.LIGHT_COLS
        self.message_ids = RangeStatements(p, ks, "messages", "message_buckets", "", light)
        self.priority_ids = RangeStatements(
            p, ks, "priority_messages", "priority_buckets", " AND priority = ?", light
        )
        self.insert_priority_message = p(
            f"INSERT INTO {ks}.priority_messages "
            "(incarnation, partition, priority, bucket, id, body, expires, attributes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.insert_priority_bucket = p(
            f"INSERT INTO {ks}.priority_buckets "
            "(incarnation, partition, priority, bucket, message_ttl) "
            "VALUES (?, ?, ?, ?, ?) USING TTL ?"
        )
        self.delete_priority_message = p(
            f"DELETE FROM {ks}.priority_messages WHERE incarnation = ? AND partition = ? "
            "AND priority = ? AND bucket = ? AND id = ?"
        )
        self.insert_queue_priority = p(
            f"INSERT INTO {ks}.queue_priorities (incarnation, partition, priority) "
            "VALUES (?, ?, ?) USING TTL ?"
        )
        self.queue_priorities = p(
            f"SELECT priority FROM {ks}.queue_priorities WHERE incarnation = ? AND partition = ?"
        )
        # dedup ids
        dcols = "until, id, partition, body, expires, priority, attributes"
        self.insert_dedup = p(
            f"INSERT INTO {ks}.dedup (incarnation, dedup_id, {dcols}, written) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, false) IF NOT EXISTS USING TTL ?"
        )
        # Every column at once, so all of a claim's cells share one TTL.
        self.replace_dedup = p(
            f"UPDATE {ks}.dedup USING TTL ? SET until = ?, id = ?, partition = ?, body = ?, "
            "expires = ?, priority = ?, attributes = ?, written = ? "
            "WHERE incarnation = ? AND dedup_id = ? IF id = ?"
        )
        # work queues
        self.insert_subscription = p(
            f"INSERT INTO {ks}.subscriptions (incarnation, subscription) VALUES (?, ?) USING TTL ?"
        )
        self.list_subscriptions = p(
            f"SELECT subscription FROM {ks}.subscriptions WHERE incarnation = ?"
        )
        # checkpoints
        self.get_checkpoints = p(
            f"SELECT partition, id FROM {ks}.checkpoints "
            "WHERE application = ? AND queue = ? AND consumer = ?"
        )
        self.set_checkpoint = p(
            f"INSERT INTO {ks}.checkpoints (application, queue, consumer, partition, id) "
            "VALUES (?, ?, ?, ?, ?)"
        )
        self.delete_checkpoints = p(
            f"DELETE FROM {ks}.checkpoints WHERE application = ? AND queue = ?"
        )


class RangeStatements:
    """The four statements a time-bucketed reader walks: the bucket index and the
    rows of one bucket, each in both orders. ``extra_key`` names the key columns
    beyond (incarnation, partition), e.g. the priority of the priority index."""

    #: The columns of the counting statements (no bodies).
    LIGHT_COLS = "id, expires, priority"
    #: The columns of the scan statements: raw id bytes, UTF-8 body, expiry.
    SCAN_COLS = "timeuuidAsBlob(id), textAsBlob(body), expires"

    def __init__(
        self, p: Callable[[str], Any], ks: str, rows: str, index: str, extra_key: str, cols: str
    ) -> None:
        index_where = (
            f"FROM {ks}.{index} WHERE incarnation = ? AND partition = ?{extra_key} "
            "AND bucket >= ? AND bucket <= ?"
        )
        self.index_desc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket DESC, message_ttl DESC"
        )
        self.index_asc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket ASC, message_ttl ASC"
        )
        where = (
            f"FROM {ks}.{rows} WHERE incarnation = ? AND partition = ?{extra_key} "
            "AND bucket = ? AND id >= ? AND id < ?"
        )
        #: Rows are (id, expires, priority) only: no bodies.
        self.light = cols == self.LIGHT_COLS
        self.rows_asc = p(f"SELECT {cols} {where} ORDER BY id ASC")
        self.rows_desc = p(f"SELECT {cols} {where} ORDER BY id DESC")


@dataclass
class Connection:
    """An open session with its prepared statements and the keyspace's bucket width."""

    cluster: Cluster
    session: Session
    st: Statements
    bucket_micros: int

    def bucket_of(self, micros: int) -> int:
        """The time bucket holding a message stamped ``micros``."""
        return micros // self.bucket_micros

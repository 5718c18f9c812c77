"""Every CQL statement the backend runs, prepared once per connection, and the
:class:`Connection` that carries them with their session."""

from __future__ import annotations

from dataclasses import dataclass

from cassandra.cluster import Cluster, Session


class Statements:
    """Every statement the backend runs, prepared once per connection.

    Table names are qualified with the keyspace (no ``USE``), as Cassandra
    asks for prepared statements.
    """

    _QUEUE_COLS = (
        "application, name, partitions, default_ttl, queue_type, consistency, created, incarnation"
    )

    def __init__(self, session: Session, ks: str) -> None:
        p = session.prepare
        cols = self._QUEUE_COLS
        self.ping = p("SELECT release_version FROM system.local")
        self.storage_setting = p(f"SELECT value FROM {ks}.storage_settings WHERE name = ?")
        # queues
        self.insert_queue = p(
            f"INSERT INTO {ks}.queues ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
        )
        self.select_queue = p(f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name = ?")
        self.list_queues = p(
            f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name > ? LIMIT ?"
        )
        self.update_queue = p(
            f"UPDATE {ks}.queues "
            "SET partitions = ?, default_ttl = ?, queue_type = ?, consistency = ? "
            "WHERE application = ? AND name = ? "
            "IF partitions = ? AND default_ttl = ? AND queue_type = ? AND consistency = ?"
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
            f"INSERT INTO {ks}.messages (incarnation, partition, bucket, id, body, expires) "
            "VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.insert_bucket = p(
            f"INSERT INTO {ks}.message_buckets (incarnation, partition, bucket, message_ttl) "
            "VALUES (?, ?, ?, ?) USING TTL ?"
        )
        index_where = (
            f"FROM {ks}.message_buckets WHERE incarnation = ? AND partition = ? "
            "AND bucket >= ? AND bucket <= ?"
        )
        self.buckets_desc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket DESC, message_ttl DESC"
        )
        self.buckets_asc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket ASC, message_ttl ASC"
        )
        msg_where = (
            f"FROM {ks}.messages WHERE incarnation = ? AND partition = ? AND bucket = ? "
            "AND id >= ? AND id < ?"
        )
        self.messages_asc = p(f"SELECT id, body, expires {msg_where} ORDER BY id ASC")
        self.messages_desc = p(f"SELECT id, body, expires {msg_where} ORDER BY id DESC")
        key = "incarnation = ? AND partition = ? AND bucket = ? AND id = ?"
        self.get_message = p(f"SELECT id, body, expires FROM {ks}.messages WHERE {key}")
        self.delete_message = p(f"DELETE FROM {ks}.messages WHERE {key}")
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

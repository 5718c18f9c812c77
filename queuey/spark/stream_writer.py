"""The streaming sink: ``writeStream.format("queuey")`` posts each micro-batch's rows.

Rows become messages exactly as in batch writes (:class:`~queuey.spark.writer.Sink`).
A micro-batch is exactly-once: Spark replays a batch whose commit it did not
record (a crash, a stop between the sink's write and Spark's commit log, a
retried task) with the same batch id and the same rows, and every message is
posted with a ``dedup_id`` that the replay derives again: the store keeps the
first post of an id and drops repeats for ``queuey.dedup_window`` seconds.

The id is ``spark:<query id>:<batch id>:<Spark partition>:<digest>:<n>``: the
digest hashes the message text and the placement the row gave, and ``n``
counts earlier rows with the same digest in the task, so identical rows stay
distinct messages and rows that come in another order in the replay still find
their ids. Spark passes the query and batch ids to the write tasks as local
properties (:data:`QUERY_ID_KEY`, :data:`BATCH_ID_KEY`; checked on PySpark 4.3).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType

from queuey.spark.options import WRITE
from queuey.spark.writer import QueueyCommitMessage, RowMessage, Sink, WriteTotals

log = logging.getLogger(__name__)

#: The local properties Spark's MicroBatchExecution sets for a batch's jobs.
BATCH_ID_KEY = "streaming.sql.batchId"
QUERY_ID_KEY = "sql.streaming.queryId"
#: Hex digits of a row's digest in its ``dedup_id``.
DIGEST_CHARS = 16


class TaskDedupIds:
    """The ``dedup_id`` of each message one write task posts (see the module doc)."""

    def __init__(self, query_id: str, batch_id: int, partition_id: int) -> None:
        self.prefix = f"spark:{query_id}:{batch_id}:{partition_id}:"
        self._seen: Counter[str] = Counter()

    @classmethod
    def for_this_task(cls) -> TaskDedupIds:
        """The ids of the running Spark task's micro-batch."""
        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_KEY) if context else None
        batch_id = context.getLocalProperty(BATCH_ID_KEY) if context else None
        if context is None or query_id is None or batch_id is None:
            raise RuntimeError(
                f"the streaming sink needs Spark's {QUERY_ID_KEY} and {BATCH_ID_KEY} task "
                "properties to derive dedup ids; set exactlyOnce=false to post without them "
                "(at least once)"
            )
        return cls(query_id, int(batch_id), context.partitionId())

    def __call__(self, message: RowMessage) -> str:
        digest = hashlib.blake2b(message.identity(), digest_size=DIGEST_CHARS // 2).hexdigest()
        n = self._seen[digest]
        self._seen[digest] = n + 1
        return f"{self.prefix}{digest}:{n}"


class QueueyStreamWriter(DataSourceStreamWriter):
    """Posts each micro-batch's rows as messages, once per batch id.

    With ``exactlyOnce=false`` messages get no ``dedup_id`` (no dedup record,
    cheaper on Cassandra) and a replayed batch posts its rows again.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.sink = Sink(options, schema, overwrite)
        self.exactly_once = WRITE.parse(options).exactly_once

    def write(self, iterator: Iterator[Row]) -> QueueyCommitMessage:
        dedup_ids = TaskDedupIds.for_this_task() if self.exactly_once else None
        return self.sink.post(iterator, dedup_ids)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        log.info("batch %d to %s: %s", batchId, self.sink.queue, WriteTotals.of(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning(
            "batch %d to %s failed after: %s (a restarted query replays it; repeats are dropped)"
            if self.exactly_once
            else "batch %d to %s failed after: %s (not undone)",
            batchId,
            self.sink.queue,
            WriteTotals.of(messages),
        )

"""Apache Spark integration: queues as RDDs and as a PySpark data source.

* :func:`queue_rdd` -- an RDD of :class:`QueueMessage` records, read in
  parallel by executors (one task per queue partition and time slice).
* :func:`register` -- makes ``spark.read.format("queuey")``,
  ``spark.readStream.format("queuey")`` and ``df.write.format("queuey")``
  available in a SparkSession.

Connections are plain values (:class:`StorageConnection`,
:class:`HttpConnection`); every executor builds its own client from them and
keeps it for the life of its Python worker. See ``docs/spark.rst``.
"""

from queuey.spark.rdd import queue_rdd
from queuey.spark.slices import (
    HttpConnection,
    QueueMessage,
    Slice,
    StorageConnection,
)


def register(spark) -> None:
    """Register the ``queuey`` data source in ``spark`` (see :mod:`queuey.spark.datasource`).

    Imported lazily so that executors reading an RDD need not load pyspark.sql.
    """
    from queuey.spark.datasource import register as _register

    _register(spark)


__all__ = [
    "HttpConnection",
    "QueueMessage",
    "Slice",
    "StorageConnection",
    "queue_rdd",
    "register",
]

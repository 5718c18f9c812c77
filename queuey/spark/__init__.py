"""Apache Spark integration: queues as RDDs and as a PySpark data source.

* :func:`queue_rdd` -- an RDD of :class:`QueueMessage` records, read in
  parallel by executors (one task per queue partition and time slice).
* :func:`register` -- makes ``spark.read.format("queuey")``,
  ``spark.readStream.format("queuey")`` and ``df.write.format("queuey")``
  available in a SparkSession.
* :func:`local_session` -- a SparkSession on this machine with the data source
  registered, for scripts and tests.

Connections are plain values (:class:`StorageConnection`,
:class:`HttpConnection`); every executor builds its own client from them and
keeps it for the life of its Python worker. See ``docs/spark.rst``.

The modules, by job: ``connections`` (the connection values), ``sources`` (the
live store on an executor), ``positions`` and ``slices`` (planning and reading
a queue in parallel), ``rdd``; the data source in ``datasource`` with its
``options``, ``arrow`` rows, ``batch`` and ``stream`` readers and ``writer``;
``session``.
"""

import importlib

from queuey.spark.connections import HttpConnection, StorageConnection
from queuey.spark.rdd import QueueMessage, queue_rdd
from queuey.spark.slices import Slice

# pyspark is an optional extra (queuey[spark]): these load pyspark.sql, so they
# are imported on first use, and the values above stay usable without it.
_NEEDS_PYSPARK_SQL = {
    "register": "queuey.spark.datasource",
    "local_session": "queuey.spark.session",
}


def __getattr__(name: str):
    module = _NEEDS_PYSPARK_SQL.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "HttpConnection",
    "QueueMessage",
    "Slice",
    "StorageConnection",
    "local_session",
    "queue_rdd",
    "register",
]

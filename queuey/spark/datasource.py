"""``spark.read.format("queuey")``: a PySpark (Spark 4) Python data source.

:class:`QueueyDataSource` ties the parts together: batch reads
(:mod:`queuey.spark.batch`), streaming reads (:mod:`queuey.spark.stream`) and
writes (:mod:`queuey.spark.writer`), all configured by the options of
:mod:`queuey.spark.options`. :func:`register` makes ``format("queuey")``
available in a session.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from queuey.spark.arrow import DEFAULT_SCHEMA
from queuey.spark.batch import QueueyReader
from queuey.spark.options import DEFAULT_MIN_PARTITIONS, NAME, ReadOptions
from queuey.spark.stream import QueueyStreamReader
from queuey.spark.writer import QueueyWriter


class QueueyDataSource(DataSource):
    """``format("queuey")``: batch and streaming reads, batch writes.

    ``min_partitions`` is the default of the ``minPartitions`` option;
    :func:`register` sets it to twice the session's default parallelism.
    """

    min_partitions = DEFAULT_MIN_PARTITIONS

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return DEFAULT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueyReader(ReadOptions.parse(self.options, self.min_partitions), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return QueueyStreamReader(ReadOptions.parse(self.options, self.min_partitions), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return QueueyWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802 (Spark's name)
        from queuey.spark.stream_writer import QueueyStreamWriter

        return QueueyStreamWriter(self.options, schema, overwrite)


def register(spark) -> None:
    """Make ``format("queuey")`` available in ``spark`` (a SparkSession).

    The registered class is a subclass made here, carrying the session's
    parallelism as the ``minPartitions`` default: Spark runs data source code in
    worker processes that cannot ask the session themselves, and the subclass
    travels to them by value.
    """
    parallelism = spark.sparkContext.defaultParallelism
    # Spark 4.1+ refuses a reader with ``pushFilters`` unless push-down is on.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    source = type(
        "QueueyDataSource",
        (QueueyDataSource,),
        {"min_partitions": max(1, 2 * parallelism), "__module__": __name__},
    )
    spark.dataSource.register(source)


__all__ = ["QueueyDataSource", "register"]

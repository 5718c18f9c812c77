"""A SparkSession for scripts, examples, benchmarks and tests.

Spark starts its Python workers itself, so they must be told which interpreter
to run and where ``queuey`` is before the JVM starts; a cluster job gets the
same from its deployment (``spark-submit``, see ``docs/spark.rst``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

import queuey
from queuey.spark.datasource import register

#: The folder holding the ``queuey`` package: a checkout's root, or site-packages.
PACKAGE_ROOT = Path(queuey.__file__).resolve().parents[1]
#: Settings every session made here starts from; ``conf`` overrides them.
BASE_CONF = {"spark.ui.showConsoleProgress": "false"}


def local_session(
    app_name: str,
    master: str = "local[2]",
    *,
    python: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with ``format("queuey")`` registered and Spark's logging at ERROR.

    Its Python workers run ``python`` (default: ``$PYSPARK_PYTHON``, else this
    interpreter) and find ``queuey`` first on their ``PYTHONPATH``. With a
    ``local`` master, Spark binds to the loopback address unless
    ``SPARK_LOCAL_IP`` says otherwise. ``conf`` is applied over
    :data:`BASE_CONF`.
    """
    os.environ["PYSPARK_PYTHON"] = python or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**BASE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark

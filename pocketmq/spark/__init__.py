"""PySpark data source for PocketMQ topics (format ``"pocketmq"``, PySpark 4.x Python Data
Source API)::

    from pocketmq.spark import register
    register(spark)                         # once per SparkSession

    df = (spark.read.format("pocketmq")
          .option("namesrv", "127.0.0.1:9876").option("topic", "events").load())

    query = (spark.readStream.format("pocketmq")
             .option("namesrv", "127.0.0.1:9876").option("topic", "events")
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", 100000)
             .load()
             .writeStream.format("parquet").option("checkpointLocation", "/tmp/ckpt")
             .start("/tmp/out"))

    (df.selectExpr("body", "'copy' AS tags")
       .write.format("pocketmq").option("namesrv", "127.0.0.1:9876").option("topic", "events-copy")
       .mode("append").save())

Options: :mod:`pocketmq.spark.options`; columns: :mod:`pocketmq.spark.schema`; reading and
offsets: :mod:`pocketmq.spark.reader`; writing and its at-least-once semantics:
:mod:`pocketmq.spark.writer`. Executors need ``pocketmq[spark]`` installed in the interpreter
Spark runs for Python workers (``spark.pyspark.python`` / ``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pocketmq.spark.setup import SparkSetupError, check_driver, check_local_workers, check_workers

__all__ = ["FORMAT", "PocketMQDataSource", "SparkSetupError", "check_workers", "local_session", "register"]

FORMAT = "pocketmq"


def __getattr__(name: str) -> Any:
    if name == "PocketMQDataSource":
        from pocketmq.spark.source import PocketMQDataSource

        return PocketMQDataSource
    raise AttributeError(f"module 'pocketmq.spark' has no attribute {name!r}")


def register(spark: Any, *, check: bool = True) -> None:
    """Register the ``pocketmq`` format with ``spark``. With ``check`` (the default), first make
    sure pyarrow is installed and, in local mode, that the Python workers' interpreter can
    import the data source (:class:`SparkSetupError` says what to change otherwise). On a
    cluster call :func:`check_workers` to check the executors."""
    check_driver()
    from pocketmq.spark.source import PocketMQDataSource

    if check:
        master = str(spark.conf.get("spark.master", "") or "")
        if master.startswith("local"):
            check_local_workers(spark)
    spark.dataSource.register(PocketMQDataSource)


def local_session(app_name: str = "pocketmq", master: str = "local[*]",
                  conf: dict[str, str] | None = None) -> Any:
    """A SparkSession on this machine with the ``pocketmq`` format registered. Points Spark's
    Python workers at this interpreter (``PYSPARK_PYTHON``) when nothing else is configured."""
    check_driver()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark

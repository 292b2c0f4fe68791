"""The ``pocketmq`` Python data source: reads topics as DataFrames, writes DataFrames to topics."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pocketmq.errors import InvalidArgumentError
from pocketmq.spark.options import ReadOptions, WriteOptions
from pocketmq.spark.schema import SCHEMA, check_write_schema

__all__ = ["PocketMQDataSource"]


def _check_read_schema(schema: StructType) -> None:
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SCHEMA.fields]:
        raise InvalidArgumentError(
            f"the pocketmq source has a fixed schema ({SCHEMA.simpleString()}); do not pass .schema(...), "
            "select or cast columns after loading instead")


def _check_writable(schema: StructType) -> None:
    problems = check_write_schema(schema)
    if problems:
        raise InvalidArgumentError("cannot write this DataFrame to PocketMQ: " + "; ".join(problems))


class PocketMQDataSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("pocketmq")`` / ``readStream`` / ``write`` / ``writeStream``.

    See :mod:`pocketmq.spark.options` for the options and :mod:`pocketmq.spark.schema` for
    the columns."""

    @classmethod
    def name(cls) -> str:
        return "pocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from pocketmq.spark.reader import PocketMQBatchReader

        _check_read_schema(schema)
        return PocketMQBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from pocketmq.spark.reader import PocketMQStreamReader

        _check_read_schema(schema)
        return PocketMQStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pocketmq.spark.writer import PocketMQWriter

        if overwrite:
            raise InvalidArgumentError("a topic cannot be overwritten, only appended to: use .mode('append')")
        _check_writable(schema)
        return PocketMQWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from pocketmq.spark.writer import PocketMQStreamWriter

        # ``overwrite`` is set for outputMode("complete"): every micro-batch publishes the whole
        # result again, which is what a topic consumer of such a query expects.
        _check_writable(schema)
        return PocketMQStreamWriter(WriteOptions.parse(self.options))  # type: ignore[return-value]

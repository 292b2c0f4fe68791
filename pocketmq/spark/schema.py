"""The DataFrame schema of the ``pocketmq`` data source and the columns its writer accepts.

One row per message::

    topic            string              not null
    broker_name      string              not null   the broker group that stores it
    queue_id         int                 not null
    queue_offset     bigint              not null   position in the queue (consecutive per queue)
    msg_id           string              not null   the broker's offset message id
    body             binary              not null
    tags             string              nullable   null when the message has no tag
    keys             string              nullable   space-separated business keys, or null
    properties       map<string,string>  not null   user properties (TAGS and KEYS have columns)
    born_timestamp   timestamp           not null   when the producer sent it
    store_timestamp  timestamp           not null   when the broker stored it
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["READ_ONLY_COLUMNS", "SCHEMA", "WRITE_COLUMNS", "arrow_schema", "check_write_schema"]

SCHEMA = StructType([
    StructField("topic", StringType(), nullable=False),
    StructField("broker_name", StringType(), nullable=False),
    StructField("queue_id", IntegerType(), nullable=False),
    StructField("queue_offset", LongType(), nullable=False),
    StructField("msg_id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("tags", StringType(), nullable=True),
    StructField("keys", StringType(), nullable=True),
    StructField("properties", MapType(StringType(), StringType(), valueContainsNull=False), nullable=False),
    StructField("born_timestamp", TimestampType(), nullable=False),
    StructField("store_timestamp", TimestampType(), nullable=False),
])

#: Columns the writer uses (``body`` is required).
WRITE_COLUMNS = ("topic", "body", "tags", "keys", "properties")
#: Columns of the read schema that the writer ignores, so that a DataFrame read from one topic
#: can be written to another as it is.
READ_ONLY_COLUMNS = frozenset(SCHEMA.fieldNames()) - frozenset(WRITE_COLUMNS)

_arrow_schema: pa.Schema | None = None


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for :data:`SCHEMA` (timestamps in UTC)."""
    global _arrow_schema
    if _arrow_schema is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _arrow_schema = to_arrow_schema(SCHEMA, timezone="UTC")
    return _arrow_schema


def _is_string(dt: DataType) -> bool:
    return isinstance(dt, StringType)


def check_write_schema(schema: StructType) -> list[str]:
    """Problems with a DataFrame to be written (empty when it can be written): ``body`` must be
    binary or string, ``topic``/``tags`` strings, ``keys`` a string or an array of strings,
    ``properties`` a map of strings. Unknown columns are refused, so that a misspelt column is
    not silently dropped; the read-only columns of :data:`SCHEMA` are ignored."""
    problems: list[str] = []
    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if body is None:
        problems.append("a 'body' column (binary or string) is required")
    elif not isinstance(body, (BinaryType, StringType)):
        problems.append(f"column 'body' must be binary or string, not {body.simpleString()}")
    for name in ("topic", "tags"):
        dt = fields.get(name)
        if dt is not None and not _is_string(dt):
            problems.append(f"column {name!r} must be a string, not {dt.simpleString()}")
    keys = fields.get("keys")
    if keys is not None and not (_is_string(keys) or (isinstance(keys, ArrayType)
                                                      and _is_string(keys.elementType))):
        problems.append(f"column 'keys' must be a string or array<string>, not {keys.simpleString()}")
    props = fields.get("properties")
    if props is not None and not (isinstance(props, MapType) and _is_string(props.keyType)
                                  and _is_string(props.valueType)):
        problems.append(f"column 'properties' must be map<string,string>, not {props.simpleString()}")
    unknown = sorted(set(fields) - set(WRITE_COLUMNS) - READ_ONLY_COLUMNS)
    if unknown:
        problems.append(f"unknown column(s) {', '.join(unknown)} (the writer uses "
                        f"{', '.join(WRITE_COLUMNS)}; drop or rename the others)")
    return problems

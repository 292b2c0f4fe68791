"""Raw pull replies (concatenated commit-log records) -> Arrow record batches, column by column.

The record format is the wire package's (:mod:`pocketmq.wire.record`; its reference decoder is
what this one must agree with). Decoding one message at a time into Python objects costs tens of
microseconds per message; here the only per-record Python work is walking the record sizes, the
body CRC check and (for messages that have any) splitting the properties. The fixed 88-byte
headers are gathered into one NumPy structured array; bodies are exposed as Arrow binary views
into the reply buffer and cast to ``binary`` in one pass; message ids are hex-encoded in bulk.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from pocketmq.client.tags import parse_subscription
from pocketmq.spark.schema import arrow_schema
from pocketmq.wire import record

__all__ = ["DecodedBatch", "RecordFormatError", "decode"]

_NUMPY_CODES = {"i": [("", ">i4")], "I": [("", ">u4")], "q": [("", ">i8")],
                "4si": [("_ip", "V4"), ("_port", ">i4")]}
#: The record header (:data:`pocketmq.wire.record.HEADER_FIELDS`) as a NumPy structured type;
#: a host is two fields, ``<name>_ip`` and ``<name>_port``.
HEADER_DTYPE = np.dtype([(name + suffix, dtype) for name, code in record.HEADER_FIELDS
                         for suffix, dtype in _NUMPY_CODES[code]])
assert HEADER_DTYPE.itemsize == record.HEADER_SIZE
_HEADER_RANGE = np.arange(record.HEADER_SIZE, dtype=np.int64)
_SIZE = struct.Struct(">i")
#: Byte ranges of the header that form the offset message id: store host (ip 4 + port 4) and
#: the commit-log offset (RocketMQ's ``offsetMsgId``).
_ID_COLUMNS = np.r_[record.POS_STORE_HOST:record.POS_STORE_HOST + 8,
                    record.POS_PHYSICAL_OFFSET:record.POS_PHYSICAL_OFFSET + 8]
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_INLINE = 12  # binary_view: values up to 12 bytes live in the view itself
_TAGS = record.PROPERTY_TAGS
_KEYS = record.PROPERTY_KEYS
_V6_FLAGS = record.HOST_V6_FLAGS

Ints = np.ndarray[Any, np.dtype[np.int64]]
Bytes = np.ndarray[Any, np.dtype[np.uint8]]


class RecordFormatError(ValueError):
    """Bytes that are not well-formed commit-log records."""


class DecodedBatch:
    """Decoded messages of one reply: the Arrow batch and the queue offsets of its rows."""

    __slots__ = ("batch", "queue_offsets")

    def __init__(self, batch: pa.RecordBatch, queue_offsets: Ints) -> None:
        self.batch = batch
        self.queue_offsets = queue_offsets

    @property
    def num_rows(self) -> int:
        return int(self.batch.num_rows)


def _positions(data: bytes) -> Ints:
    out: list[int] = []
    append = out.append
    unpack = _SIZE.unpack_from
    pos = 0
    end = len(data)
    minimum = record.MIN_RECORD_SIZE
    while pos < end:
        if end - pos < minimum:
            raise RecordFormatError(f"truncated record at byte {pos} of {end}")
        append(pos)
        (size,) = unpack(data, pos)
        if size < minimum:
            raise RecordFormatError(f"record at byte {pos} claims {size} bytes")
        pos += size
    if pos != end:
        raise RecordFormatError(f"last record at byte {out[-1]} runs past the reply ({end} bytes)")
    return np.asarray(out, dtype=np.int64)


def _gather(buf: Bytes, starts: Ints, width: int
            ) -> Bytes:
    """``buf[start:start+width]`` for every start, as an (n, width) array (indices past the end
    read the last byte; callers mask them)."""
    idx = starts[:, None] + np.arange(width, dtype=np.int64)
    np.minimum(idx, len(buf) - 1, out=idx)
    gathered: Bytes = buf[idx]
    return gathered


def _body_column(data: bytes, buf: Bytes, starts: Ints, lengths: Ints) -> pa.Array:
    n = len(starts)
    views = np.zeros((n, 4), dtype="<i4")
    views[:, 0] = lengths
    raw = views.view(np.uint8).reshape(n, 16)
    long_ = lengths > _INLINE
    if long_.any():
        s = starts[long_]
        raw[long_, 4:8] = _gather(buf, s, 4)
        views[long_, 3] = s  # buffer index (column 2) stays 0: the reply buffer
    short = ~long_
    if short.any():
        s = starts[short]
        inline = _gather(buf, s, _INLINE)
        inline[np.arange(_INLINE)[None, :] >= lengths[short][:, None]] = 0
        raw[short, 4:16] = inline
    view_array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return view_array.cast(pa.binary())


def _msg_ids(headers: Bytes) -> pa.Array:
    n = len(headers)
    raw = headers[:, _ID_COLUMNS]
    hexed = np.empty((n, 32), dtype=np.uint8)
    hexed[:, 0::2] = _HEX[raw >> 4]
    hexed[:, 1::2] = _HEX[raw & 0x0F]
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(hexed))


def _timestamps(ms: np.ndarray[Any, Any]) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, type=pa.timestamp("us", tz="UTC"))


def _properties(data: bytes, starts: Ints, lengths: Ints, map_type: pa.DataType
                ) -> tuple[pa.Array, pa.Array, pa.Array, list[str | None]]:
    """(tags, keys, properties) columns and the tags as Python values (for tag filters)."""
    n = len(starts)
    tags: list[str | None] = [None] * n
    offsets = np.zeros(n + 1, dtype=np.int32)
    has = np.flatnonzero(lengths)
    if not len(has):
        empty = pa.array([], pa.string())
        return (pa.nulls(n, pa.string()), pa.nulls(n, pa.string()),
                pa.MapArray.from_arrays(pa.array(offsets), empty, empty, type=map_type), tags)
    keys: list[str | None] = [None] * n
    map_keys: list[str] = []
    map_values: list[str] = []
    counts = np.zeros(n, dtype=np.int32)
    for i, s, ln in zip(has.tolist(), starts[has].tolist(), lengths[has].tolist(), strict=True):
        before = len(map_keys)
        for item in data[s:s + ln].decode("utf-8", "replace").split("\x02"):
            if not item:
                continue
            name, _, value = item.partition("\x01")
            if name == _TAGS:
                tags[i] = value
            elif name == _KEYS:
                keys[i] = value
            else:
                map_keys.append(name)
                map_values.append(value)
        counts[i] = len(map_keys) - before
    np.cumsum(counts, out=offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(offsets), pa.array(map_keys, pa.string()),
                                    pa.array(map_values, pa.string()), type=map_type)
    return pa.array(tags, pa.string()), pa.array(keys, pa.string()), props, tags


def decode(data: bytes, topic: str, broker_name: str, *, check_crc: bool = True) -> DecodedBatch:
    """Decode a ``raw_records`` pull reply of one queue of ``topic`` into rows of the source's
    schema. Raises :class:`RecordFormatError` for bytes that are not valid records (bad magic,
    sizes that disagree, another topic, CRC mismatch with ``check_crc``)."""
    schema = arrow_schema()
    if not data:
        return DecodedBatch(pa.RecordBatch.from_pylist([], schema=schema), np.zeros(0, dtype=np.int64))
    pos = _positions(data)
    n = len(pos)
    buf = np.frombuffer(data, dtype=np.uint8)
    headers = buf[pos[:, None] + _HEADER_RANGE]
    head = headers.view(HEADER_DTYPE).reshape(n)
    if (head["magic"] != record.MAGIC_CODE).any():
        bad = int(pos[np.flatnonzero(head["magic"] != record.MAGIC_CODE)[0]])
        raise RecordFormatError(f"bad magic code at byte {bad}")
    if (head["sys_flag"] & _V6_FLAGS).any():
        raise RecordFormatError("records with IPv6 hosts are not supported")
    total = head["total_size"].astype(np.int64)
    body_len = head["body_length"].astype(np.int64)
    body_start = pos + record.HEADER_SIZE
    body_end = body_start + body_len
    if (body_len < 0).any() or (body_end + 3 > pos + total).any():
        raise RecordFormatError("record body overruns its record")
    topic_len = buf[body_end].astype(np.int64)
    props_at = body_end + 1 + topic_len
    if (props_at + 2 > pos + total).any():
        raise RecordFormatError("record topic overruns its record")
    props_len = (buf[props_at].astype(np.int64) << 8) | buf[props_at + 1]
    props_start = props_at + 2
    if (props_start + props_len != pos + total).any():
        raise RecordFormatError("record sizes do not add up")
    expected = topic.encode()
    topic_bytes = np.frombuffer(expected, np.uint8)
    other_topic = (topic_len != len(expected)).any() or (
        len(expected) and (_gather(buf, body_end + 1, len(expected)) != topic_bytes).any())
    if other_topic:
        raise RecordFormatError(f"a record of another topic in a reply for topic {topic!r}")
    if check_crc:
        crc32 = zlib.crc32
        view = memoryview(data)
        for s, e, c in zip(body_start.tolist(), body_end.tolist(), head["body_crc"].tolist(), strict=True):
            if crc32(view[s:e]) != c:
                raise RecordFormatError(f"body CRC mismatch in the record at byte {s - record.HEADER_SIZE}")
    map_type = schema.field("properties").type
    tags_col, keys_col, props_col, _ = _properties(data, props_start, props_len, map_type)
    queue_offsets = head["queue_offset"].astype(np.int64)
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),  # type: ignore[attr-defined]
        pa.repeat(pa.scalar(broker_name, pa.string()), n),  # type: ignore[attr-defined]
        pa.array(head["queue_id"].astype(np.int32), pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        _msg_ids(headers),
        _body_column(data, buf, body_start, body_len),
        tags_col,
        keys_col,
        props_col,
        _timestamps(head["born_timestamp"]),
        _timestamps(head["store_timestamp"]),
    ]
    return DecodedBatch(pa.RecordBatch.from_arrays(columns, schema=schema), queue_offsets)


def tag_mask(batch: pa.RecordBatch, expression: str) -> pa.Array:
    """Rows whose tag matches a tag expression exactly (the broker filters by hash code, which
    can collide)."""
    filt = parse_subscription(expression)
    tags = batch.column("tags").to_pylist()
    return pa.array([tag is not None and filt.matches(tag) for tag in tags], pa.bool_())

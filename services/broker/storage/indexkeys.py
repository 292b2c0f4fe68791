"""Index keys: which keys of a message or record the message index files (``KEYS``, each
space-separated business key, and ``UNIQ_KEY``), and their hashes, found three ways - from a
local append's property dicts, from the properties the batch dispatcher split into pairs
(:mod:`.propscan`, NumPy, the keys hashed together), and by reading whole records back from the
commit log (plain Python). :mod:`services.broker.storage.index` writes and queries the files.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, MutableSequence, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from isal.isal_zlib import crc32 as _isal_crc32

from pocketmq.wire.record import header_format
from services.broker.storage.propscan import concat, key_spans
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    HEADER_SIZE,
    MAGIC_CODE,
    PREFIX,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
    ReadableBuffer,
)

if TYPE_CHECKING:
    from services.broker.storage.dispatch import DispatchBatch

_RECORD = struct.Struct(header_format(("total_size", "magic", "store_timestamp", "body_length")))
_RECORD_UNPACK = _RECORD.unpack_from
_PREFIX = PREFIX.unpack_from
_KEYS = (PROPERTY_KEYS.encode() + b"\x01", PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX.encode() + b"\x01")
#: The key hash function: zlib's CRC-32 (``crc32(data, start)``), computed with ISA-L (the same
#: values; on keys a few dozen bytes long less than half zlib's cost per call).
key_crc32: Callable[[ReadableBuffer, int], int] = _isal_crc32
_crc32 = key_crc32
#: Keys of one length that a batch holds at least this many of are hashed together, four bytes
#: per NumPy step (:func:`crc32_rows`); the others (and keys longer than
#: :data:`VECTOR_KEY_MAX`) with one CRC call each. Per key: ~0.09 us against ~0.2 us for a
#: call with the slicing it needs.
VECTOR_KEYS_MIN = 64
VECTOR_KEY_MAX = 128
U32Array = npt.NDArray[np.uint32]
I64Array = npt.NDArray[np.int64]


def key_hash(topic: str, key: str) -> int:
    """The index hash of ``topic`` + ``key``: CRC-32 of ``topic#key`` (UTF-8)."""
    return _crc32(key.encode(), _crc32(topic.encode() + b"#", 0))


def may_hold_keys(encoded: bytes) -> bool:
    """Whether encoded properties (or a record's tail, which ends with them) may hold an index
    key: False only when no ``KEYS`` or ``UNIQ_KEY`` pair can be in them."""
    return _KEYS[0] in encoded or _KEYS[1] in encoded


def record_keys(props: bytes) -> list[bytes]:
    """The index keys in encoded properties: each KEYS key (space separated) and UNIQ_KEY."""
    out: list[bytes] = []
    for i, needle in enumerate(_KEYS):
        at = props.find(needle)
        while at > 0 and props[at - 1] != 2:  # must start a pair
            at = props.find(needle, at + 1)
        if at < 0:
            continue
        start = at + len(needle)
        end = props.find(b"\x02", start)
        value = props[start:end if end >= 0 else len(props)]
        if i == 0:
            out.extend(k for k in value.split(b" ") if k)
        elif value:
            out.append(value)
    return out


def message_keys(messages: Sequence[Message], prefixes: dict[bytes, int], hashes: MutableSequence[int],
                  counts: MutableSequence[int]) -> None:
    """Append the key hashes of the index entries of ``messages`` to ``hashes`` (in commit log
    order) and, per message, how many it has to ``counts``."""
    last_topic = None
    prefix = 0
    keys_name, uniq_name = PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    add_hash, add_count = hashes.append, counts.append
    for msg in messages:
        props = msg[4]
        if not props:
            add_count(0)
            continue
        keys = props.get(keys_name)
        uniq = props.get(uniq_name)
        if not keys and not uniq:
            add_count(0)
            continue
        if msg[0] is not last_topic:  # (a batch is one topic, usually the same str object)
            last_topic = msg[0]
            prefix = topic_prefix(last_topic, prefixes)
        n = 0
        if keys:
            if " " in keys:
                for key in keys.split(" "):
                    if key:
                        add_hash(_crc32(key.encode(), prefix))
                        n += 1
            else:
                add_hash(_crc32(keys.encode(), prefix))
                n = 1
        if uniq:
            add_hash(_crc32(uniq.encode(), prefix))
            n += 1
        add_count(n)


def topic_prefix(topic: str, prefixes: dict[bytes, int]) -> int:
    raw = topic.encode()
    cached = prefixes.get(raw)
    if cached is None:
        if len(prefixes) > 8192:
            prefixes.clear()
        cached = prefixes[raw] = _crc32(raw + b"#", 0)
    return cached


#: Index entries as parallel sequences: key hashes, commit log offsets, store timestamps (ms).
#: A column: a list of ints or a NumPy integer array (both index and slice alike).
Column = Sequence[int] | npt.NDArray[Any]
Entries = tuple[Column, Column, Column]


def batch_keys(batches: Sequence[DispatchBatch], prefixes: dict[bytes, int]) -> Entries:
    """The index entries of dispatched batches of records (NumPy arrays, commit log order), from
    the properties the batch dispatcher laid out and split into pairs in its pass
    (:attr:`DispatchBatch.props`): the key values are found in them
    (:func:`~services.broker.storage.propscan.key_spans`) and the keys of all the batches
    hashed together (:func:`hash_keys`); only a ``KEYS`` value holding several keys takes a
    loop."""
    fed = [batch for batch in batches if batch.props is not None]
    if not fed:
        return (), (), ()
    # Per row of the properties (a record that has some): its topic prefix, offset, store time.
    row_prefix, row_offset, row_stamp = [], [], []
    for batch in fed:
        topic_prefixes = np.array([topic_prefix(topic, prefixes) for topic in batch.topics], dtype=np.uint32)
        rows = batch.props_rows
        if len(rows) == len(batch):  # (every record has properties: the columns as they are)
            row_prefix.append(topic_prefixes[batch.topic_ids])
            row_offset.append(batch.physical_offsets)
            row_stamp.append(batch.store_timestamps)
        else:
            row_prefix.append(topic_prefixes[batch.topic_ids[rows]])
            row_offset.append(batch.physical_offsets[rows])
            row_stamp.append(batch.store_timestamps[rows])
    props = concat([batch.props for batch in fed if batch.props is not None])
    spans = key_spans(props)
    if spans is None:
        return (), (), ()
    rows = spans.rows
    u, value_at, value_end, keys_value = spans.flat, spans.at, spans.end, spans.is_keys
    one = len(fed) == 1
    all_prefixes = (row_prefix[0] if one else np.concatenate(row_prefix))[rows]
    key_offsets = (row_offset[0] if one else np.concatenate(row_offset))[rows]
    key_stamps = (row_stamp[0] if one else np.concatenate(row_stamp))[rows]
    data = memoryview(u.data)
    # A KEYS value with a space holds several keys: then one ordered loop splits them.
    spaces = np.flatnonzero(u == 32)
    if len(spaces):
        split = keys_value & (np.searchsorted(spaces, value_end) > np.searchsorted(spaces, value_at))
        if split.any():
            hashes: list[int] = []
            offsets: list[int] = []
            stamps: list[int] = []
            for a, b, cut, prefix, offset, stamp in zip(
                    value_at.tolist(), value_end.tolist(), split.tolist(), all_prefixes.tolist(),
                    key_offsets.tolist(), key_stamps.tolist(), strict=True):
                for key in (bytes(data[a:b]).split(b" ") if cut else (data[a:b],)):
                    if key:
                        hashes.append(_crc32(key, prefix))
                        offsets.append(offset)
                        stamps.append(stamp)
            return hashes, offsets, stamps
    return hash_keys(data, u, value_at, value_end, all_prefixes), key_offsets, key_stamps


def hash_keys(data: ReadableBuffer, u8: npt.NDArray[np.uint8], starts: I64Array, ends: I64Array,
              prefixes: U32Array) -> U32Array:
    """``key_crc32(data[s:e], p)`` for every key ``[s, e)`` of ``data`` (``u8``: its bytes as an
    array) and topic prefix ``p``: keys of a length that many share in one vectorised pass per
    length, the rest one call each."""
    lengths = ends - starts
    out = np.empty(len(starts), dtype=np.uint32)
    left = np.ones(len(starts), dtype=bool)
    if len(starts) >= VECTOR_KEYS_MIN:
        counts = np.bincount(np.minimum(lengths, VECTOR_KEY_MAX + 1))
        for length in np.flatnonzero(counts[:VECTOR_KEY_MAX + 1] >= VECTOR_KEYS_MIN).tolist():
            rows = np.flatnonzero(lengths == length)
            out[rows] = crc32_rows(u8, starts[rows], length, prefixes[rows])
            left[rows] = False
    rest = np.flatnonzero(left)
    if len(rest):
        values = map(memoryview(data).__getitem__, map(slice, starts[rest].tolist(), ends[rest].tolist()))
        out[rest] = np.fromiter(map(_crc32, values, prefixes[rest].tolist()), dtype=np.uint32,
                                count=len(rest))
    return out


@functools.cache
def _crc_tables() -> tuple[U32Array, U32Array, U32Array]:
    """CRC-32 tables (zlib's: reflected, polynomial 0xEDB88320): one byte per step; and four
    bytes per step as two 16-bit halves (the register is linear in its bits)."""
    byte = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        byte = np.where(byte & 1, (byte >> 1) ^ np.uint32(0xEDB88320), byte >> 1)

    def four_zero_bytes(x: U32Array) -> U32Array:
        for _ in range(4):
            x = byte[x & 0xFF] ^ (x >> 8)
        return x

    half = np.arange(65536, dtype=np.uint32)
    return byte, four_zero_bytes(half), four_zero_bytes(half << np.uint32(16))


def crc32_rows(u8: npt.NDArray[np.uint8], starts: I64Array, length: int, init: U32Array) -> U32Array:
    """``zlib.crc32(bytes(u8[s:s + length]), i)`` for every start ``s`` and value ``i`` of
    ``init``, all at once: the keys are gathered as the rows of a matrix and fed four bytes per
    step (two table lookups), any last bytes one at a time."""
    byte, low, high = _crc_tables()
    rows = np.ndarray((len(u8) - length + 1, length), np.uint8, buffer=u8, strides=(1, 1))[starts]
    crc = init ^ np.uint32(0xFFFFFFFF)
    whole = length // 4 * 4
    if whole:
        words = rows[:, :whole].view("<u4")
        for j in range(whole // 4):
            x = crc ^ words[:, j]
            crc = low[x & 0xFFFF] ^ high[x >> 16]
    for j in range(whole, length):
        crc = byte[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


def scan_records(buf: memoryview, base: int,
                 prefixes: dict[bytes, int]) -> tuple[int, list[int], list[int], list[int]]:
    """Index entries of the whole records in ``buf`` (log offset ``base``; everything below the
    dispatched offset, so validated): (bytes consumed, key hashes, record offsets, store
    timestamps). The hot loop of a slave's and a recovering store's index."""
    hashes: list[int] = []
    offsets: list[int] = []
    stamps: list[int] = []
    chunk = bytes(buf)  # one copy, then bytes.find over each record's properties
    find = chunk.find
    size = len(chunk)
    pos = 0
    unpack = _RECORD_UNPACK
    keys_needle, uniq_needle = _KEYS
    while pos + 8 <= size:
        if pos + HEADER_SIZE > size:
            total, magic = _PREFIX(chunk, pos)
            if magic == BLANK_MAGIC_CODE and total > 0:
                pos += total
            break
        total, magic, ts, body_len = unpack(chunk, pos)
        if magic != MAGIC_CODE:
            # A blank record fills the rest of its segment (the slice may end before it does).
            if magic == BLANK_MAGIC_CODE and total > 0:
                pos += total
            break
        end = pos + total
        if total <= 0 or end > size:
            break
        body_end = pos + HEADER_SIZE + body_len
        props_at = body_end + 3 + chunk[body_end]
        ka = find(keys_needle, props_at, end)
        ua = find(uniq_needle, props_at, end)
        if ka >= 0 or ua >= 0:
            raw_topic = chunk[body_end + 1:props_at - 2]
            prefix = prefixes.get(raw_topic)
            if prefix is None:
                if len(prefixes) > 8192:
                    prefixes.clear()
                prefix = prefixes[raw_topic] = _crc32(raw_topic + b"#", 0)
            offset = base + pos
            clean_k = ka < 0 or ka == props_at or chunk[ka - 1] == 2
            if clean_k and (ua < 0 or ua == props_at or chunk[ua - 1] == 2):
                if ka >= 0:
                    z = find(b"\x02", ka, end)
                    value = chunk[ka + 5:z if z >= 0 else end]
                    for key in (value.split(b" ") if b" " in value else (value,)):
                        if key:
                            hashes.append(_crc32(key, prefix))
                            offsets.append(offset)
                            stamps.append(ts)
                if ua >= 0:
                    z = find(b"\x02", ua, end)
                    value = chunk[ua + 9:z if z >= 0 else end]
                    if value:
                        hashes.append(_crc32(value, prefix))
                        offsets.append(offset)
                        stamps.append(ts)
            else:  # a needle inside another property's name or value: parse properly
                for key in record_keys(chunk[props_at:end]):
                    hashes.append(_crc32(key, prefix))
                    offsets.append(offset)
                    stamps.append(ts)
        pos = end
    return pos, hashes, offsets, stamps

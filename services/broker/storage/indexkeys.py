"""Index keys: which keys of a message or record the message index files (``KEYS``, each
space-separated business key, and ``UNIQ_KEY``), and their hashes, found three ways - from a
local append's property dicts, from the encoded properties the batch dispatcher cut out of
replicated records (one vectorised pass, NumPy), and by reading whole records back from the
commit log (plain Python). :mod:`services.broker.storage.index` writes and queries the files.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from isal.isal_zlib import crc32 as _isal_crc32

from pocketmq.wire.record import header_format
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
_PADDING = bytes(16)


def key_hash(topic: str, key: str) -> int:
    """The index hash of ``topic`` + ``key``: CRC-32 of ``topic#key`` (UTF-8)."""
    return _crc32(key.encode(), _crc32(topic.encode() + b"#", 0))


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
    """The index entries of dispatched batches of records (NumPy arrays, commit log order),
    from the encoded properties the batch dispatcher already cut out (:attr:`DispatchBatch.props`)
    in one vectorised pass over all of them: the properties are joined, pair starts found
    where a ``\x02`` precedes, the two key names matched at pair starts, each value's end
    found by a sorted search; only the CRC of each key is a call per key."""
    props: list[bytes] = []
    row_prefix, row_offset, row_stamp = [], [], []
    for batch in batches:
        if not batch.props:
            continue
        props += batch.props
        topic_prefix = []
        for topic in batch.topics:
            raw = topic.encode()
            cached = prefixes.get(raw)
            if cached is None:
                if len(prefixes) > 8192:
                    prefixes.clear()
                cached = prefixes[raw] = _crc32(raw + b"#", 0)
            topic_prefix.append(cached)
        rows = batch.props_rows
        row_prefix.append(np.array(topic_prefix, dtype=np.int64)[batch.topic_ids[rows]])
        row_offset.append(batch.physical_offsets[rows])
        row_stamp.append(batch.store_timestamps[rows])
    if not props:
        return (), (), ()
    # "\x02" p0 "\x02" p1 ... "\x02" padding (the needle checks read past the end): one copy.
    joined = b"\x02".join(chain((b"",), props, (_PADDING,)))
    u = np.frombuffer(joined, dtype=np.uint8)
    lengths = np.fromiter(map(len, props), dtype=np.int64, count=len(props))
    record_starts = np.cumsum(lengths + 1) - lengths  # (each record's properties start there)
    seps = np.flatnonzero(u == 2)
    pair_starts = seps[:-1] + 1
    found = []
    for needle in _KEYS:
        at = pair_starts
        for j, c in enumerate(needle):
            at = at[u[at + j] == c]
        found.append(at + len(needle))
    value_at = np.concatenate(found)
    if not len(value_at):
        return (), (), ()
    is_keys = np.zeros(len(value_at), dtype=bool)
    is_keys[:len(found[0])] = True
    order = np.argsort(value_at, kind="stable")
    value_at, is_keys = value_at[order], is_keys[order]
    value_end = seps[np.searchsorted(seps, value_at)]
    keep = value_end > value_at
    value_at, value_end, is_keys = value_at[keep], value_end[keep], is_keys[keep]
    rows = np.searchsorted(record_starts, value_at, side="right") - 1
    all_prefixes = np.concatenate(row_prefix)
    key_prefix: Iterable[int]
    if (all_prefixes == all_prefixes[0]).all():  # (one topic: no list of prefixes)
        key_prefix = repeat(int(all_prefixes[0]))
    else:
        key_prefix = all_prefixes[rows].tolist()
    key_offsets = np.concatenate(row_offset)[rows]
    key_stamps = np.concatenate(row_stamp)[rows]
    # A KEYS value with a space holds several keys: then one ordered loop splits them.
    split = None
    if b" " in joined:
        spaces = np.flatnonzero(u == 32)
        split = is_keys & (np.searchsorted(spaces, value_end) > np.searchsorted(spaces, value_at))
    if split is not None and split.any():
        hashes: list[int] = []
        offsets: list[int] = []
        stamps: list[int] = []
        for a, b, cut, prefix, offset, stamp in zip(
                value_at.tolist(), value_end.tolist(), split.tolist(), all_prefixes[rows].tolist(),
                key_offsets.tolist(), key_stamps.tolist(), strict=True):
            for key in (joined[a:b].split(b" ") if cut else (joined[a:b],)):
                if key:
                    hashes.append(_crc32(key, prefix))
                    offsets.append(offset)
                    stamps.append(stamp)
        return hashes, offsets, stamps
    values = map(joined.__getitem__, map(slice, value_at.tolist(), value_end.tolist()))
    return (np.fromiter(map(_crc32, values, key_prefix), dtype=np.uint32, count=len(value_at)),
            key_offsets, key_stamps)


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

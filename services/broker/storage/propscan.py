"""The encoded properties of a batch of records, laid out and split into pairs in one
vectorised pass (NumPy): the batch dispatcher takes the tag codes of its consume-queue entries
from it and hands it to the message index with the batch, which finds the index keys
(``KEYS``, ``UNIQ_KEY``) in it; so a record's properties are cut out and scanned once, for
both (see ``docs/message-index.md``).

A value is found exactly as :func:`pocketmq.wire.record.property_value` finds it: the first
pair (``name \\x01 value``, pairs separated by ``\\x02``) whose name is the one asked for; the
value runs to the next ``\\x02`` or the end of the properties. Tests check both agree on
arbitrary bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from pocketmq.wire.record import PROPERTY_KEYS, tag_hash_code
from pocketmq.wire.record import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ

I64Array = npt.NDArray[np.int64]
U8Array = npt.NDArray[np.uint8]

#: Properties are gathered as the rows of a matrix (one strided copy) when the longest is at
#: most this long and the rows waste at most half the matrix; else joined slice by slice.
ROW_WIDTH_MAX = 512
#: Tag values longer than this are hashed one call each (the vectorised hash is a matrix as
#: wide as the longest value).
TAG_VECTOR_MAX = 64
_SEP = 2
_POW31 = np.cumprod(np.concatenate(([1], np.full(TAG_VECTOR_MAX - 1, 31))).astype(np.uint32),
                    dtype=np.uint32)[::-1].copy()


class Properties(NamedTuple):
    """The properties of some records laid out in :attr:`flat` (each record's preceded by a
    ``\\x02``; bytes between records belong to none) and split into pairs: pair ``i`` runs over
    ``[pair_starts[i], pair_ends[i])`` of row ``pair_rows[i]`` (in flat order; a pair ends
    where its ``\\x02`` is, or with its record's properties)."""

    flat: U8Array
    pair_starts: I64Array
    pair_ends: I64Array
    pair_rows: I64Array
    #: Rows (records) laid out.
    rows: int


class Values(NamedTuple):
    """Values of one property: ``flat[at[i]:end[i]]`` is the value of row ``rows[i]`` (rows
    ascending; rows without the property absent)."""

    rows: I64Array
    at: I64Array
    end: I64Array


def gather(data: memoryview, u8: U8Array, starts: I64Array, lengths: I64Array) -> Properties:
    """The properties ``data[starts[r]:starts[r] + lengths[r]]`` of each row (``u8``: ``data``
    as an array; every length > 0) laid out and split into pairs."""
    n = len(starts)
    ends = starts + lengths
    width = int(lengths.max())
    total = int(lengths.sum())
    if width <= ROW_WIDTH_MAX and n * (width + 1) <= 2 * (total + n) + 4096 and int(starts.min()) > width:
        # Rows of a matrix, right-aligned (the byte before each row's properties is set to
        # \x02; what precedes it is another part of the record, outside every row).
        stride = width + 1
        windows: U8Array = np.ndarray((len(u8) - width, stride), np.uint8, buffer=u8, strides=(1, 1))
        rows = windows[ends - stride]
        rows[np.arange(n), width - lengths] = _SEP
        flat = rows.reshape(-1)
        row_ends = np.arange(1, n + 1, dtype=np.int64) * stride
        row_starts = row_ends - lengths
        seps = np.flatnonzero(flat == _SEP)
        # A separator belongs to the row of its matrix row if it is the one before the
        # properties or inside them.
        sep_rows = seps // stride
        inside = seps >= row_starts[sep_rows] - 1
    else:
        joined = b"\x02".join(chain((b"",), map(data.__getitem__, map(slice, starts.tolist(),
                                                                       ends.tolist()))))
        flat = np.frombuffer(joined, dtype=np.uint8)
        row_ends = np.cumsum(lengths + 1)
        row_starts = row_ends - lengths
        seps = np.flatnonzero(flat == _SEP)
        # Every separator belongs to a row: the one before it or inside it.
        sep_rows = np.searchsorted(row_starts - 1, seps, side="right") - 1
        inside = None
    if inside is not None and not inside.all():
        seps, sep_rows = seps[inside], sep_rows[inside]
    pair_ends = row_ends[sep_rows]
    if len(seps) > 1:
        same = sep_rows[1:] == sep_rows[:-1]
        pair_ends[:-1] = np.where(same, seps[1:], pair_ends[:-1])
    return Properties(flat, seps + 1, pair_ends, sep_rows, n)


def concat(parts: Sequence[Properties]) -> Properties:
    """The properties of several batches as one (rows numbered on from one part to the next),
    so what is done with them costs its fixed NumPy calls once, not once per batch."""
    if len(parts) == 1:
        return parts[0]
    flats = [p.flat for p in parts]
    pairs = np.fromiter((len(p.pair_starts) for p in parts), dtype=np.int64, count=len(parts))
    flat_at = np.repeat(np.cumsum([0, *map(len, flats[:-1])]), pairs)
    row_at = np.repeat(np.cumsum([0, *(p.rows for p in parts[:-1])]), pairs)
    return Properties(np.concatenate(flats), np.concatenate([p.pair_starts for p in parts]) + flat_at,
                      np.concatenate([p.pair_ends for p in parts]) + flat_at,
                      np.concatenate([p.pair_rows for p in parts]) + row_at, sum(p.rows for p in parts))


def first_values(props: Properties, name: bytes) -> Values:
    """The value of property ``name`` of each row that has it (its first pair of that name)."""
    needle = name + b"\x01"
    k = len(needle)
    starts = props.pair_starts
    pairs = np.flatnonzero(props.pair_ends - starts >= k)
    flat = props.flat
    # (a pair at least k long ends inside flat: every byte read below is there)
    pairs = pairs[flat[starts[pairs]] == needle[0]]
    if len(pairs):
        at = starts[pairs]
        match = flat[at + 1] == needle[1]
        for j in range(2, k):
            match &= flat[at + j] == needle[j]
        pairs = pairs[match]
    rows = props.pair_rows[pairs]
    if len(rows) > 1:
        first = np.empty(len(rows), dtype=bool)
        first[0] = True
        np.not_equal(rows[1:], rows[:-1], out=first[1:])
        if not first.all():
            pairs, rows = pairs[first], rows[first]
    return Values(rows, starts[pairs] + k, props.pair_ends[pairs])


def tag_codes(props: Properties, values: Values) -> I64Array:
    """The consume-queue tag code (:func:`~pocketmq.wire.record.tag_hash_code`) of each value:
    Java's ``String.hashCode`` of ASCII values computed for all at once as a matrix (values
    right-aligned, zeros before them add nothing); other values one call each."""
    n = len(values.rows)
    codes = np.zeros(n, dtype=np.int64)
    if not n:
        return codes
    lengths = values.end - values.at
    width = min(int(lengths.max()), TAG_VECTOR_MAX)
    flat = props.flat
    if width > 0:
        cols = values.end[:, None] - width + np.arange(width, dtype=np.int64)
        inside = cols >= values.at[:, None]
        chars = np.where(inside, flat[np.maximum(cols, 0)], 0)
        hashes = (chars.astype(np.uint32) * _POW31[TAG_VECTOR_MAX - width:]).sum(axis=1, dtype=np.uint32)
        codes[:] = hashes.view(np.int32)
        slow = np.flatnonzero((chars.max(axis=1) >= 0x80) | (lengths > width))
    else:
        slow = np.flatnonzero(lengths > 0)
    for i in slow.tolist():
        value = flat[int(values.at[i]):int(values.end[i])].tobytes()
        codes[i] = tag_hash_code(value.decode("utf-8", "replace"))
    return codes


class KeySpans(NamedTuple):
    """The index keys of a dispatched batch, for the message index: ``flat[at[i]:end[i]]`` is a
    non-empty ``KEYS`` value (``is_keys``: it may hold several space-separated keys) or
    ``UNIQ_KEY`` value of batch row ``rows[i]``, in commit log order (a record's values in the
    order of its pairs)."""

    flat: U8Array
    rows: I64Array
    at: I64Array
    end: I64Array
    is_keys: npt.NDArray[np.bool_]


def key_spans(props: Properties, batch_rows: I64Array | None = None) -> KeySpans | None:
    """The ``KEYS`` and ``UNIQ_KEY`` values of ``props`` (whose row ``r`` is batch row
    ``batch_rows[r]``; None: row ``r``), or None if there are none."""
    keys, uniq = first_values(props, PROPERTY_KEYS.encode()), first_values(props, PROPERTY_UNIQ.encode())
    if not len(keys.rows) and not len(uniq.rows):
        return None
    at = np.concatenate((keys.at, uniq.at))
    end = np.concatenate((keys.end, uniq.end))
    rows = np.concatenate((keys.rows, uniq.rows))
    is_keys = np.zeros(len(at), dtype=bool)
    is_keys[:len(keys.at)] = True
    keep = end > at
    if len(uniq.rows) and len(keys.rows):
        order = np.argsort(at, kind="stable")
        keep = keep[order]
        at, end, rows, is_keys = at[order], end[order], rows[order], is_keys[order]
    if not keep.all():
        at, end, rows, is_keys = at[keep], end[keep], rows[keep], is_keys[keep]
        if not len(at):
            return None
    return KeySpans(props.flat, rows if batch_rows is None else batch_rows[rows], at, end, is_keys)

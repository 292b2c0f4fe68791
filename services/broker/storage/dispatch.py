"""Batch dispatch: validate a run of commit log records and build their consume queue entries
in one vectorised pass (NumPy), for a slave's reput thread and recovery.

:meth:`Scanner.scan` finds the records at the start of a slice of a segment, checks each one's framing (sizes,
MAGICCODE, PHYSICALOFFSET, TOPICLENGTH, PROPERTIESLENGTH adding up to TOTALSIZE) and its body
CRC, and returns their dispatch columns as a :class:`DispatchBatch`. It stops *before* the
first record it cannot accept as an ordinary whole record (a blank, an incomplete record at the
end of the data, an invalid one): the caller's one-record-at-a-time path handles that one, with
the exact reason. So the batch path never accepts what the record-at-a-time path would refuse.

Record boundaries form a chain (each TOTALSIZE gives the next position). The chain is followed
by stride: where ``k`` records of the same size follow each other, which is the common case,
one strided NumPy view of their headers checks all their TOTALSIZE and MAGICCODE fields at
once (no copy); where sizes vary, a plain loop walks it. Everything after the chain is column
arithmetic: the body CRCs (:class:`BodyCrcs`), and the properties, parsed once for the tags and
for the message index's keys (:mod:`.propscan`).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from pocketmq.wire.record import HEADER_FIELDS, PROPERTY_TAGS
from services.broker.storage import propscan
from services.broker.storage.config import CQ_ENTRY_SIZE
from services.broker.storage.propscan import Properties
from services.broker.storage.record import (
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_SIZE,
    MAGIC_CODE,
    MIN_RECORD_SIZE,
    PREFIX,
    TRANSACTION_PREPARED_TYPE,
    body_crc,
)

I64Array = npt.NDArray[np.int64]

#: Stride runs shorter than this go back to the plain loop for :data:`_WALK_AFTER_MISS` records.
_MIN_RUN = 8
_WALK_AFTER_MISS = 64
_TAGS = PROPERTY_TAGS.encode()
_CACHE_MAX = 4096
#: Records of one size checked with one CRC call at least (see :class:`BodyCrcs`), and the
#: bytes one such call covers at most.
CRC_RUN_MIN = 16
CRC_CHUNK = 1 << 20
_ZEROS = bytes(CRC_CHUNK)
_PREFIX = PREFIX.unpack_from

_NUMPY_CODES = {"i": ">i4", "I": ">u4", "q": ">i8", "4si": "V8"}
#: The record header as a NumPy structured dtype, derived from the one field table.
HEADER_DTYPE = np.dtype([(name, _NUMPY_CODES[code]) for name, code in HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == HEADER_SIZE == struct.calcsize(
    ">" + "".join(code for _, code in HEADER_FIELDS))
_HEADER_SPAN = np.arange(HEADER_SIZE, dtype=np.int64)


class DispatchBatch(NamedTuple):
    """Columns of consecutive whole records, in commit log order (one row per record)."""

    physical_offsets: I64Array
    sizes: I64Array
    queue_ids: I64Array
    queue_offsets: I64Array
    tags_codes: I64Array
    #: Row -> index into :attr:`topics`.
    topic_ids: I64Array
    topics: list[str]
    #: Rows to index (False: a prepared transaction message, which is stored only).
    dispatchable: npt.NDArray[np.bool_]
    max_store_timestamp: int
    store_timestamps: I64Array
    #: Rows whose records carry properties, and those properties split into pairs (row ``r``
    #: of :attr:`props` is batch row ``props_rows[r]``): the pass that found the tags, handed
    #: to the message index, which finds the keys in it (None: no record has properties).
    props_rows: I64Array
    props: Properties | None

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def end_offset(self) -> int:
        """Commit log offset just past the last record."""
        return int(self.physical_offsets[-1] + self.sizes[-1])

    def groups(self) -> Iterator[tuple[str, int, I64Array]]:
        """(topic, queue id, rows) of each queue the dispatchable rows go to, rows in commit
        log order."""
        rows = None if self.dispatchable.all() else np.flatnonzero(self.dispatchable)
        topic_ids, queue_ids = self.topic_ids, self.queue_ids
        if rows is not None:
            topic_ids, queue_ids = topic_ids[rows], queue_ids[rows]
        if not len(topic_ids):
            return
        keys = topic_ids * (1 << 32) + queue_ids
        order = np.argsort(keys, kind="stable")
        cuts = np.flatnonzero(np.diff(keys[order])) + 1
        if rows is not None:
            order = rows[order]
        for group in np.split(order, cuts) if len(cuts) else (order,):
            first = int(group[0])
            yield self.topics[int(self.topic_ids[first])], int(self.queue_ids[first]), group


#: A consume queue entry (commit log offset 8 · size 4 · tag hash code 8, big-endian).
ENTRY_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert ENTRY_DTYPE.itemsize == CQ_ENTRY_SIZE


def queue_entries(physical_offsets: I64Array, sizes: I64Array, tags_codes: I64Array) -> bytes:
    """The consume queue entries of these records, back to back."""
    entries = np.empty(len(physical_offsets), dtype=ENTRY_DTYPE)
    entries["offset"] = physical_offsets
    entries["size"] = sizes
    entries["tags"] = tags_codes
    return entries.tobytes()


def consecutive(values: I64Array) -> bool:
    """Whether each value is the previous one plus one."""
    return len(values) < 2 or bool((np.diff(values) == 1).all())


class Scanner:
    """Validates and dispatches runs of records (:meth:`scan`); keeps the topic names and the
    body CRC work buffer of a log."""

    __slots__ = ("_crcs", "topics")

    def __init__(self) -> None:
        self.topics: dict[bytes, str] = {}
        self._crcs = BodyCrcs()

    def scan(self, data: memoryview, base: int, end: int, room: int, max_records: int,
             check_crc: bool) -> DispatchBatch | None:
        """The whole, valid records at the start of ``data[:end]`` (``data[0]`` is at log offset
        ``base``, ``room`` bytes before the end of its segment), at most ``max_records``,
        stopping before the first record that is not one (see the module doc). None if the
        first is not."""
        u8 = np.frombuffer(data, dtype=np.uint8)
        positions, header = _chain(u8, data, min(end, room - END_FILE_MIN_BLANK_LENGTH), max_records)
        if not len(positions):
            return None
        total = header["total_size"].astype(np.int64)
        body_len = header["body_length"].astype(np.int64)
        rec_end = positions + total
        body_end = positions + HEADER_SIZE + body_len
        ok = (header["physical_offset"] == positions + base) & (body_len >= 0) & (body_end + 3 <= rec_end)
        # Gather indexes are clamped into the record: a row already failed reads harmless bytes.
        last = rec_end - 1
        topic_len = u8[np.minimum(body_end, last)].astype(np.int64)
        props_at = body_end + 1 + topic_len
        ok &= (topic_len != 0) & (props_at + 2 <= rec_end)
        hi = u8[np.minimum(props_at, last)].astype(np.int64)
        lo = u8[np.minimum(props_at + 1, last)].astype(np.int64)
        props_len = hi * 256 + lo
        ok &= props_at + 2 + props_len == rec_end
        n = len(positions) if ok.all() else int(np.argmin(ok))
        if check_crc and n:
            n = self._crcs.first_mismatch(u8, data, positions[:n], total[:n], body_len[:n],
                                          header["body_crc"][:n])
        if not n:
            return None
        header = header[:n]
        positions, total, props_at, props_len = positions[:n], total[:n], props_at[:n], props_len[:n]
        topic_ids, topics, bad = self._topics(u8, data, body_end[:n] + 1, topic_len[:n])
        if bad >= 0:
            # A topic that is not UTF-8: dispatch what precedes it; the record-at-a-time path
            # refuses that record with the reason.
            return self.scan(data, base, end, room, bad, False) if bad else None
        dispatchable = (header["sys_flag"] & TRANSACTION_PREPARED_TYPE) == 0
        tags_codes = np.zeros(n, dtype=np.int64)
        props_rows = np.flatnonzero(props_len > 0)
        props = None
        if len(props_rows):
            # One pass over the properties, for the tags here and the keys in the index.
            props = propscan.gather(data, u8, props_at[props_rows] + 2, props_len[props_rows])
            tags = propscan.first_values(props, _TAGS)
            tags_codes[props_rows[tags.rows]] = propscan.tag_codes(props, tags)
            tags_codes[~dispatchable] = 0
        return DispatchBatch(positions + base, total, header["queue_id"].astype(np.int64),
                             header["queue_offset"].astype(np.int64), tags_codes, topic_ids, topics,
                             dispatchable, int(header["store_timestamp"].max()),
                             header["store_timestamp"].astype(np.int64), props_rows, props)

    def _topics(self, u8: npt.NDArray[np.uint8], data: memoryview, starts: I64Array,
                lengths: I64Array) -> tuple[I64Array, list[str], int]:
        """Topic index per row, the topic names, and -1; or the first row whose topic is not
        UTF-8 as the last item."""
        width = int(lengths.max())
        cols = np.arange(width, dtype=np.int64)
        if width == int(lengths.min()):
            # One topic length (the common case): one gather, and one topic if every row
            # equals the first (no sort).
            same = u8[starts[:, None] + cols[None, :]]
            if (same == same[0]).all():
                name = self._topic_name(bytes(same[0]))
                zeros = np.zeros(len(starts), dtype=np.int64)
                return (zeros, [], 0) if name is None else (zeros, [name], -1)
        inside = cols[None, :] < lengths[:, None]
        raw = np.where(inside, u8[np.where(inside, starts[:, None] + cols[None, :], 0)], 0).astype(np.uint8)
        keyed = np.ascontiguousarray(raw).view(np.dtype((np.void, width))).ravel()
        _, first, inverse = np.unique(keyed, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1).astype(np.int64)
        names: list[str] = []
        for i, row in enumerate(first.tolist()):
            a = int(starts[row])
            name = self._topic_name(bytes(data[a:a + int(lengths[row])]))
            if name is None:
                return inverse, names, int(np.flatnonzero(inverse == i)[0])
            names.append(name)
        return inverse, names, -1

    def _topic_name(self, raw: bytes) -> str | None:
        """The topic name of these bytes (cached), or None if they are not UTF-8."""
        cache = self.topics
        name = cache.get(raw)
        if name is None:
            try:
                name = raw.decode()
            except UnicodeDecodeError:
                return None
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            cache[raw] = name
        return name


class BodyCrcs:
    """Checks the body CRCs of a run of records with one CRC call per run of equal-sized
    records (up to :data:`CRC_CHUNK` bytes), not one call per record.

    CRC-32 without its final inversion is linear, and a message followed by its own CRC
    (little-endian, with the CRC of as many zero bytes taken out, which undoes the initial
    value) leaves the register at zero. So a buffer holding each body followed by its claimed
    CRC so corrected, with zeros everywhere else (headers, topics, properties), has the CRC of
    a zero buffer of its length exactly when every claimed CRC is right: one record with a
    wrong CRC always shows (each record's error is multiplied by a different power of x, an
    invertible map); wrong ones cancelling out takes the same 2^-32 chance as a corrupted body
    keeping its CRC. The buffer is built with NumPy strided copies over the records as rows of
    a matrix, and both the copy and the CRC of a large buffer run without the GIL. Where a run
    fails, or is short, each record is checked on its own, so the first wrong one is found
    exactly."""

    __slots__ = ("_lock", "_work", "_work_view", "_zero_crcs")

    def __init__(self) -> None:
        #: One check at a time in the work buffer (two threads in it could pass a wrong run).
        self._lock = threading.Lock()
        buf = bytearray(CRC_CHUNK)
        self._work = np.frombuffer(buf, dtype=np.uint8)
        self._work_view = memoryview(buf)
        self._zero_crcs: dict[int, int] = {}

    def first_mismatch(self, u8: npt.NDArray[np.uint8], data: memoryview, positions: I64Array,
                       totals: I64Array, body_lens: I64Array, claimed: npt.NDArray[np.uint32]) -> int:
        """Row of the first record whose body (``body_lens[i]`` bytes at ``positions[i] +
        HEADER_SIZE``) does not have the CRC ``claimed[i]``, or ``len(positions)``. Records
        are back to back (each ``totals[i]`` long) and have at least 4 bytes after the body."""
        n = len(positions)
        key = totals * (1 << 32) + body_lens
        bounds = np.concatenate(([0], np.flatnonzero(key[1:] != key[:-1]) + 1, [n]))
        lengths = np.diff(bounds)
        long_runs = np.flatnonzero(lengths >= CRC_RUN_MIN)
        first_bad = n
        if len(long_runs) < len(lengths):  # records of short runs: one call each
            rows = np.flatnonzero(np.repeat(lengths < CRC_RUN_MIN, lengths))
            bad = _first_bad(data, positions[rows], body_lens[rows], claimed[rows])
            if bad < len(rows):
                first_bad = int(rows[bad])
        for run in long_runs.tolist():
            start, end = int(bounds[run]), int(bounds[run + 1])
            if start >= first_bad:
                break
            size, body_len = int(totals[start]), int(body_lens[start])
            step = max(1, CRC_CHUNK // size)
            for a in range(start, min(end, first_bad), step):
                b = min(end, a + step)
                if b - a >= CRC_RUN_MIN and self._rows_ok(u8, int(positions[a]), b - a, size, body_len,
                                                           claimed[a:b]):
                    continue
                bad = _first_bad(data, positions[a:b], body_lens[a:b], claimed[a:b])
                if bad < b - a:
                    first_bad = min(first_bad, a + bad)
                    break
        return first_bad

    def _rows_ok(self, u8: npt.NDArray[np.uint8], start: int, rows: int, size: int, body_len: int,
                 claimed: npt.NDArray[np.uint32]) -> bool:
        """Whether the ``rows`` records of ``size`` bytes from ``u8[start]``, each with a body of
        ``body_len`` bytes, all have their claimed body CRCs (see the class doc)."""
        span = rows * size
        records = u8[start:start + span].reshape(rows, size)
        body_end = HEADER_SIZE + body_len
        residues = (claimed ^ np.uint32(self._zero_crc(body_len))).astype("<u4")
        with self._lock:
            work = self._work[:span].reshape(rows, size)
            work[:, :HEADER_SIZE] = 0
            work[:, HEADER_SIZE:body_end] = records[:, HEADER_SIZE:body_end]
            work[:, body_end:body_end + 4] = residues.view(np.uint8).reshape(rows, 4)
            work[:, body_end + 4:] = 0
            return body_crc(self._work_view[:span]) == self._zero_crc(span)

    def _zero_crc(self, size: int) -> int:
        """CRC of ``size`` zero bytes (at most :data:`CRC_CHUNK`)."""
        crc = self._zero_crcs.get(size)
        if crc is None:
            if len(self._zero_crcs) >= _CACHE_MAX:
                self._zero_crcs.clear()
            crc = self._zero_crcs[size] = body_crc(memoryview(_ZEROS)[:size])
        return crc


def _first_bad(data: memoryview, positions: I64Array, body_lens: I64Array,
               claimed: npt.NDArray[np.uint32]) -> int:
    """Row of the first record whose body CRC is not ``claimed`` (one CRC call per record), or
    ``len(positions)``."""
    n = len(positions)
    if not n:
        return 0
    starts = positions + HEADER_SIZE
    bodies = map(data.__getitem__, map(slice, starts.tolist(), (starts + body_lens).tolist()))
    wrong = np.fromiter(map(body_crc, bodies), dtype=np.uint32, count=n) != claimed
    return int(np.argmax(wrong)) if wrong.any() else n


def _chain(u8: npt.NDArray[np.uint8], data: memoryview, end: int,
           max_records: int) -> tuple[I64Array, npt.NDArray[np.void]]:
    """Positions and headers of the chain of records from ``data[0]`` with a valid MAGICCODE
    and a TOTALSIZE that fits before ``end`` (at most ``max_records``). A run of records of
    one size is read as a strided view of ``data`` (no copy, no index arrays)."""
    pos = 0
    positions: list[I64Array] = []
    headers: list[npt.NDArray[np.void]] = []
    walked: list[int] = []
    count = 0
    walk_left = 0

    def flush_walked() -> None:
        at = np.array(walked, dtype=np.int64)
        positions.append(at)
        headers.append(u8[at[:, None] + _HEADER_SPAN].view(HEADER_DTYPE).ravel())
        walked.clear()

    while count < max_records and end - pos >= MIN_RECORD_SIZE:
        total, magic = _PREFIX(data, pos)
        if magic != MAGIC_CODE or total < MIN_RECORD_SIZE or total > end - pos:
            break
        k = min(max_records - count, (end - pos) // total)
        if walk_left or k < _MIN_RUN:
            walked.append(pos)
            pos += total
            count += 1
            walk_left = max(walk_left - 1, 0)
            continue
        if walked:
            flush_walked()
        run_headers: npt.NDArray[np.void] = np.ndarray((k,), HEADER_DTYPE, buffer=data, offset=pos,
                                                       strides=(total,))
        good = (run_headers["total_size"] == total) & (run_headers["magic"] == MAGIC_CODE)
        run = k if good.all() else int(np.argmin(good))
        positions.append(pos + total * np.arange(run, dtype=np.int64))
        headers.append(run_headers[:run])
        pos += total * run
        count += run
        if run < _MIN_RUN:
            walk_left = _WALK_AFTER_MISS
    if walked:
        flush_walked()
    if not positions:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=HEADER_DTYPE)
    if len(positions) == 1:
        return positions[0], headers[0]
    return np.concatenate(positions), np.concatenate(headers)

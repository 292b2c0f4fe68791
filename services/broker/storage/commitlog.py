"""The commit log: every message of every topic, appended to one segment queue.

A master appends messages (:meth:`CommitLog.append` for one, :meth:`CommitLog.append_batch` for
:class:`~services.broker.storage.record.PreparedRecord` s): under one lock it assigns the
physical offset, the queue offset (the topic-queue offset table is each consume queue's max
offset) and the store timestamp, writes the encoded bytes into the mapped segment and dispatches
the record to its consume queue, so a reader sees a message as soon as the append returns. A
record that does not fit in the current segment (with 8 bytes to spare for the end-of-file blank)
closes it with a blank record and goes to a new segment.

A slave appends raw bytes replicated from its master (:meth:`append_data`): chunks arrive in
offset order, may contain blank records and may end in the middle of a record. The append only
writes them (``pwritev``, no parsing); :meth:`reput`, called in a loop by the
store's ``ReputMessageService`` thread, validates whole records (body CRC included) and
dispatches them in batches. The dispatcher position (:attr:`dispatched_offset`) only ever
advances over whole, validated records; an invalid one stops it (:attr:`dispatch_error`).

Recovery helpers (:meth:`recover_from_checkpoint`, :meth:`recover_by_scan`) are driven by
:class:`services.broker.storage.store.MessageStore` at start-up.

This module is far over the project's usual size: local appends, replicated appends (the
dispatch ring), the reput and the write buffer share one lock and about forty fields on the
hot path. The framing, batch encoding, batch validation, index feed and segment files already
live in their own modules; the replicated-append and reput sections are the next to move out.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from time import time_ns
from typing import NamedTuple, Protocol

import numpy as np

from pocketmq.wire.record import header_format
from services.broker.storage import bulk
from services.broker.storage.bulk import UniformBatch
from services.broker.storage.config import CQ_ENTRY_SIZE
from services.broker.storage.consumequeue import ENTRY as CQ_ENTRY
from services.broker.storage.dispatch import DispatchBatch, Scanner
from services.broker.storage.indexfeed import MAX_KEYED, AppendFeed
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_SIZE,
    HOST_V6_FLAGS,
    MAGIC_CODE,
    MIN_RECORD_SIZE,
    PREFIX,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANSACTION_PREPARED_TYPE,
    U16,
    CheckKind,
    Host,
    Message,
    MessageRecord,
    MessageTooLargeError,
    PreparedRecord,
    ReadableBuffer,
    RecordError,
    body_crc,
    check_record,
    checked_body,
    decode_record,
    encode_batch,
    encode_tail,
    host_bytes,
    property_value,
    read_store_timestamp,
    tag_hash_code,
)
from services.broker.storage.segment import (
    ALL_IN_FILE,
    DIRECT_ALIGN,
    DIRECT_MIN,
    PAGE_SIZE,
    Segment,
    SegmentSlice,
    SyncFn,
    default_sync,
)
from services.broker.storage.segment_queue import SegmentQueue
from services.broker.storage.status import PutMessageStatus, PutResult

log = logging.getLogger(__name__)

_BLANK_HEADER = PREFIX
#: Largest record the format allows (TOTALSIZE is a signed 32-bit int).
MAX_RECORD_SIZE = 2**31 - 1
#: Bytes per ``posix_fadvise`` call of :meth:`CommitLog.warm_ahead`.
WARM_CHUNK = 4 * 1024 * 1024
#: At most this many bytes are populated (``madvise``) ahead of the writer per append: one call
#: mapping 4 MiB writable holds the writer (and the GIL) for ~10 ms; 256 KiB steps bound it to
#: well under a millisecond (the total work is the same).
POPULATE_STEP = 256 * 1024
#: Bytes per direct write of :meth:`CommitLog.append_data` (the staging buffer's size).
DIRECT_STAGE = 2 * 1024 * 1024
#: Bytes :meth:`CommitLog.prefetch_undispatched` keeps in the page cache past the dispatcher.
PREFETCH_SIZE = 4 * 1024 * 1024
#: The log is :meth:`~CommitLog.receiving_in_bulk` for this long after an append of at least
#: ``DIRECT_MIN`` bytes (a slave catching up).
BULK_WINDOW_S = 0.05
#: Records the reput dispatcher indexes per lock acquisition before it lets others run.
REPUT_BATCH = 256
#: The dispatcher validates and indexes records a batch at a time (:mod:`.dispatch`) when at
#: least this many undispatched bytes are there (a slave catching up, recovery); below, one at
#: a time: a batch has a fixed cost of about 0.15 ms, which the few records of a steady
#: stream do not pay back.
BATCH_DISPATCH_MIN = 256 * 1024
#: ... and when at least this many records may be dispatched in the call.
BATCH_RECORDS_MIN = 128
#: Bytes one dispatch batch reads and validates at most.
SCAN_BYTES = 2 * 1024 * 1024
#: A slave keeps the last this many replicated bytes in memory for its dispatcher.
DISPATCH_RING = 32 * 1024 * 1024
#: Pieces of at least this many bytes are copied into the dispatch ring with the GIL released
#: (``ctypes.memmove``: the dispatcher and the event loop run meanwhile).
NOGIL_COPY_MIN = 64 * 1024
#: A bulk append waits at most this long for the dispatcher to free ring space (then the ring
#: starts again past it, and the dispatcher reads the bytes in between from the file).
RING_WAIT_S = 0.5
#: Size of each of the two write buffers of a master's appends (``write_buffer``: RocketMQ's
#: transient store pool); a larger record is written through the mapping.
WRITE_BUFFER_SIZE = 4 * 1024 * 1024
#: The appender wakes the committer each time this many bytes are buffered.
COMMIT_CHUNK = 128 * 1024
#: ... and a batch appender each time this many: batches fill the buffer fast, and each wake
#: costs the appending thread a thread switch while it holds the GIL (a commit every 512 KiB
#: still leaves the 4 MiB buffer far from full).
BATCH_COMMIT_CHUNK = 512 * 1024

# TOTALSIZE and MAGICCODE: the dispatcher's first look at a record.
_PREFIX = PREFIX.unpack_from
# Record fields the dispatcher needs (one unpack that skips the others).
_DISPATCH = struct.Struct(header_format((
    "total_size", "magic", "body_crc", "queue_id", "queue_offset", "physical_offset", "sys_flag",
    "store_timestamp", "body_length")))
assert _DISPATCH.size == HEADER_SIZE
_DISPATCH_UNPACK = _DISPATCH.unpack_from
_U16 = U16.unpack_from
_TAGS_KEY = PROPERTY_TAGS.encode() + b"\x01"
_KEYS_NAME = PROPERTY_KEYS
_UNIQ_NAME = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_MAGIC_BYTES = struct.pack(">I", MAGIC_CODE)
_MARK = struct.Struct(">q")
_TOPICS_MAX = 8192


class QueueIndex(Protocol):
    """One (topic, queue id) index (a consume queue) as the commit log sees it."""

    #: The queue offset the next message of this queue gets.
    max_offset: int
    #: Commit log offset just past the last record indexed.
    last_physical_end: int
    #: The common case of ``put`` (entry ``max_offset`` written straight into ``fast_seg``'s
    #: mapping) holds while the entry's byte position is below ``fast_end``; see
    #: :attr:`~services.broker.storage.consumequeue.ConsumeQueue.fast_end`.
    fast_end: int
    fast_seg: Segment

    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Index a record; False if that queue offset is already indexed."""
        ...

    def put_run(self, queue_offset: int, entries: bytes, physical_end: int) -> None:
        """Index the records of one append: their entries back to back, for the queue offsets
        from ``queue_offset`` (:attr:`max_offset`), the last record ending at ``physical_end``."""
        ...


class Dispatcher(Protocol):
    """Where records are dispatched: every dispatchable record, in commit log order, under the
    commit log lock. The queue's ``max_offset`` is the topic-queue offset table: a master
    assigns it as the next record's QUEUEOFFSET."""

    @property
    def find(self) -> Callable[[tuple[str, int]], QueueIndex | None]:
        """``find((topic, queue_id))``: the open index or None (hot path: a ``dict.get``); an
        index not opened yet (consume queues open lazily) is opened by ``create``."""
        ...

    def create(self, topic: str, queue_id: int) -> QueueIndex:
        """The index of (topic, queue id), created if needed."""
        ...

    def dispatch_batch(self, batch: DispatchBatch) -> None:
        """Index a run of validated records at once (replicated data, recovery): the same
        effect as ``put`` on each dispatchable row's queue, in commit log order."""
        ...


class CommitLogError(Exception):
    """Base of the commit log's own errors."""


class StoreClosedError(CommitLogError):
    """The commit log was closed."""


class OffsetMismatchError(CommitLogError, ValueError):
    """Replicated data does not start at this log's max offset."""

    def __init__(self, start_offset: int, max_offset: int, detail: str = "") -> None:
        super().__init__(detail or f"replicated data starts at {start_offset} but the commit log ends at "
                         f"{max_offset}; data must be appended contiguously")
        self.start_offset = start_offset
        self.max_offset = max_offset


class CorruptDataError(CommitLogError, ValueError):
    """Replicated data contained an invalid record; the log was cut back to before it."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid record at commit log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class CreateSegmentError(CommitLogError, OSError):
    """A new segment file could not be created (disk full, permissions)."""


class ScanResult(NamedTuple):
    start: int
    end: int
    records: int
    bytes: int
    stop_reason: str


_new_result = tuple.__new__
_PUT_OK = PutMessageStatus.PUT_OK

#: The record header as :meth:`CommitLog.append` packs it: ``HEADER`` with each host (IPv4 4 ·
#: port 4) as one pre-packed 8-byte field (same bytes, two fewer arguments to convert).
_PACK = struct.Struct(header_format(raw_hosts=True))
assert _PACK.size == HEADER_SIZE
_PACK_HEADER = _PACK.pack_into
_PACK_CQ_ENTRY = CQ_ENTRY.pack_into
_HOST = struct.Struct(">4si")
# born host -> its 8 header bytes (bounded, cleared when full: producers are few).
_born_hosts: dict[Host, bytes] = {}
_BORN_HOSTS_MAX = 4096


def _packed_host(host: Host) -> bytes:
    """IPv4 4 · port 4 of ``host`` (remembered in ``_born_hosts``); RecordError if it cannot
    be encoded."""
    ip = host_bytes(host[0])  # RecordError unless dotted IPv4
    try:
        packed = _HOST.pack(ip, host[1])
    except struct.error as exc:
        raise RecordError(f"a header field is out of range: port of {host!r}: {exc}") from None
    if len(_born_hosts) >= _BORN_HOSTS_MAX:
        _born_hosts.clear()
    with contextlib.suppress(TypeError):  # unhashable (a list): just not remembered
        _born_hosts[host] = packed
    return packed


def _buffer_file(path: str, size: int = WRITE_BUFFER_SIZE) -> mmap.mmap:
    """A shared mapping of the file ``path`` (created, or resized, to ``size``)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def _buffer_chain(buf: mmap.mmap) -> tuple[list[int], list[int]]:
    """The valid records from the start of a write buffer, each continuing the previous one:
    (their PHYSICALOFFSETs, the buffer position where each ends)."""
    offsets: list[int] = []
    ends: list[int] = []
    pos = 0
    expected: int | None = None
    view = memoryview(buf)
    while pos + END_FILE_MIN_BLANK_LENGTH <= len(buf):
        check = check_record(view, pos, len(buf) - pos, expected_offset=expected)
        if check.kind is not CheckKind.RECORD or check.request is None:
            break
        offsets.append(check.request.commit_log_offset)
        pos += check.size
        ends.append(pos)
        expected = check.request.commit_log_offset + check.size
    return offsets, ends


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _within_bulk_window(stamp: float) -> bool:
    """Whether the ``time.monotonic()`` ``stamp`` is less than :data:`BULK_WINDOW_S` ago."""
    return time.monotonic() - stamp < BULK_WINDOW_S


class CommitLog:
    def __init__(self, directory: str, segment_size: int, *, store_host: Host, dispatcher: Dispatcher,
                 sync: SyncFn = default_sync, populate_size: int = 0, populate_write: bool = False,
                 warm_size: int = 0, direct_write: bool = False, write_buffer: bool = False,
                 write_buffer_dir: str | None = None) -> None:
        #: Held while appending, dispatching, truncating; take it to change the log and the
        #: consume queues consistently.
        self.lock = threading.Lock()
        #: One :meth:`append_data` at a time (taken before :attr:`lock`): its direct writes
        #: run outside :attr:`lock` (see :meth:`_write_outside_lock`) ...
        self._append_data_lock = threading.Lock()
        #: ... while this is True; whoever else changes the log under :attr:`lock` first waits
        #: for them (:meth:`wait_writes`).
        self._writing = False
        self._writes_done = threading.Condition(threading.Lock())
        self._queue = SegmentQueue(directory, segment_size, sync=sync)
        self._segment_size = segment_size
        #: A record must fit in one segment with room for the end-of-file blank.
        self._max_record = min(segment_size - END_FILE_MIN_BLANK_LENGTH, MAX_RECORD_SIZE)
        self.store_host = store_host
        self._store_ip = host_bytes(store_host[0])
        self._store_port = store_host[1]
        self._store_host_bytes = _packed_host(store_host)
        #: The born host of the last append and its header bytes.
        self._last_born_host: object = None
        self._last_born = b""
        self._dispatcher = dispatcher
        self._find = dispatcher.find
        self._create = dispatcher.create
        self._dispatched = 0
        self._last_store_ts = 0
        #: Map this many bytes ahead of the writer at a time (0: let it page-fault) ...
        self._populate_size = populate_size
        #: ... writable (MADV_POPULATE_WRITE: no fault at all, but dirty) or read-only.
        self._populate_write = populate_write
        #: The writer appends through the mapping (a master): :meth:`warm_ahead` maps pages
        #: ahead of it.
        self._prefault_wanted = False
        #: False once :meth:`Segment.prefault` failed (then the writer maps pages itself).
        self._prefault_ok = True
        #: :meth:`warm_ahead` keeps this many bytes past the writer in the page cache.
        self._warm_size = warm_size
        #: :meth:`append_data` writes the whole blocks of large appends direct, through this
        #: page-aligned buffer (made on first use; None: always through the page cache).
        self._direct_write = direct_write
        self._stage: mmap.mmap | None = None
        #: :meth:`prefetch_undispatched` has asked for the pages up to here.
        self._prefetched = 0
        #: ``time.monotonic()`` of the last :meth:`append_data` of at least ``DIRECT_MIN``
        #: bytes (see :meth:`receiving_in_bulk`).
        self._last_bulk_append = 0.0
        #: ... and of the last one that wrote blocks direct.
        self._last_direct_append = 0.0
        #: Called (on the writer's thread, under the lock) each time the writer maps a new
        #: chunk: wakes whoever calls :meth:`warm_ahead` (e.g. ``ServiceThread.wakeup``).
        self.warm_wakeup: Callable[[], None] | None = None
        #: Called (outside the lock) after :meth:`append_data` wrote bytes the dispatcher has
        #: not seen: wakes the reput thread (e.g. ``ServiceThread.wakeup``).
        self.reput_wakeup: Callable[[], None] | None = None
        #: Called (on the dispatching thread, outside the lock) with the new dispatched offset
        #: each time :meth:`reput` made progress.
        self.on_dispatched: Callable[[int], None] | None = None
        #: Verify BODYCRC when dispatching replicated records (recovery always does).
        self.reput_check_crc = True
        #: Set when the dispatcher met an invalid record: (its offset, why). Nothing at or past
        #: it is dispatched; the next :meth:`append_data` cuts the log back there and raises.
        self._dispatch_error: tuple[int, str] | None = None
        self._dispatch_cond = threading.Condition(threading.Lock())
        self._dispatch_waiters = 0
        self._topic_names: dict[bytes, str] = {}
        self._scanner_: Scanner | None = None
        #: Batch dispatch reads the records it validates into this buffer (see
        #: :meth:`_read_undispatched`), at most :data:`SCAN_BYTES` per batch (page-aligned,
        #: with room for a direct read's first partial block) ...
        self._scan_buf = memoryview(mmap.mmap(-1, SCAN_BYTES + DIRECT_ALIGN))
        #: ... and the reput thread, outside the lock, into this one.
        self._reput_buf = memoryview(mmap.mmap(-1, SCAN_BYTES + DIRECT_ALIGN))
        #: Replicated bytes ``[_ring_from, _ring_end)`` kept for the dispatcher (see
        #: :meth:`_keep_for_dispatch`; made on the first bulk append).
        self._ring: mmap.mmap | None = None
        self._ring_addr = 0
        self._ring_from = 0
        self._ring_end = 0
        #: Bumped whenever the ring starts again somewhere else (a scan made in it outside the
        #: lock meanwhile is void: the new bytes may have gone where it read).
        self._ring_restarts = 0
        #: Bumped whenever written bytes are cut away (a scan made outside the lock is void).
        self._generation = 0
        self.closed = False
        # -- the write buffer (see docs/architecture.md, "The write buffer") --
        #: A master's appends go into a buffer in memory (``_wb``), which :meth:`commit` writes
        #: to the file with ``pwrite`` in large chunks; readers commit what they need first.
        self._buffered = write_buffer
        if write_buffer:
            self._populate_size = 0  # (nothing to map ahead: the writer does not touch the file)
        #: Where the buffers are files (shared mappings: what a killed process buffered stays in
        #: the page cache and :meth:`replay_write_buffers` appends it at the next start); None:
        #: anonymous memory. The files are opened by :meth:`load` (also without
        #: ``write_buffer`` if they exist: a run that used them may have crashed).
        self._wb_dir = write_buffer_dir
        #: ``writebuffer/committed``: the log offset up to which commits completed (8 bytes,
        #: mapped; updated per commit). Recovery replays buffered records only past it, so
        #: records that were in the file already are never taken from a buffer again.
        self._mark: mmap.mmap | None = None
        # (anonymous mappings: memory only for the pages used)
        self._wb = mmap.mmap(-1, WRITE_BUFFER_SIZE)
        self._wb_spare = mmap.mmap(-1, WRITE_BUFFER_SIZE)
        #: The segment whose bytes ``[_wb_base, _wb_base + _wb_len)`` are in ``_wb`` (None:
        #: nothing is buffered or being committed); ``_wb_base + _wb_len`` is its write_pos.
        self._wb_seg: Segment | None = None
        self._wb_base = 0
        self._wb_len = 0
        #: Log offset up to which the buffered segment's bytes are in the file (ALL_IN_FILE:
        #: every written byte is); a reader of bytes past it calls :meth:`commit`.
        self._file_end = ALL_IN_FILE
        #: Set while :meth:`commit` writes a chunk outside the lock (cleared when it is done).
        self._inflight: threading.Event | None = None
        #: (segment, position, size, buffer) of a chunk whose commit failed: written first next.
        self._unwritten: tuple[Segment, int, int, mmap.mmap] | None = None
        self._commit_lock = threading.Lock()
        #: Bumped by :meth:`_commit_locked`: a chunk committed meanwhile changes no state.
        self._wb_generation = 0
        #: Called (under the lock) each time another ``COMMIT_CHUNK`` bytes are buffered:
        #: wakes whoever calls :meth:`commit` (e.g. ``ServiceThread.wakeup``).
        self.commit_wakeup: Callable[[], None] | None = None
        #: The message index's feed (None: no index): every append and batch dispatch is
        #: recorded in it under the lock (see :mod:`.indexfeed`).
        self.index_feed: AppendFeed | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte (on a slave: possibly mid-record)."""
        return self._queue.max_offset

    @property
    def min_offset(self) -> int:
        return self._queue.min_offset

    @property
    def flushed_offset(self) -> int:
        return self._queue.flushed_where

    @property
    def dispatched_offset(self) -> int:
        """Everything below this offset is whole records dispatched to the consume queues."""
        return self._dispatched

    @property
    def dispatch_error(self) -> tuple[int, str] | None:
        """(offset, reason) of the invalid record that stopped the dispatcher, or None."""
        return self._dispatch_error

    @property
    def last_store_timestamp(self) -> int:
        return self._last_store_ts

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._queue.segments

    @property
    def segment_size(self) -> int:
        return self._segment_size

    def queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message of (topic, queue id) gets (opens the queue)."""
        with self.lock:
            index = self._find((topic, queue_id)) or self._create(topic, queue_id)
        return index.max_offset

    # -- appending (master) --------------------------------------------------------------------

    def _roll(self) -> Segment:
        """Close the current segment with a blank record and start the next (hold the lock)."""
        if self._wb_seg is not None:
            self._commit_locked()
        seg = self._queue.last
        if seg is None:
            start = 0
        else:
            pos = seg.write_pos
            if pos < seg.size:
                # The rest of the segment is already zero: the blank's header is enough.
                blank = _BLANK_HEADER.pack(seg.size - pos, BLANK_MAGIC_CODE)
                seg.mm[pos:pos + END_FILE_MIN_BLANK_LENGTH] = blank
                seg.write_pos = seg.size
            start = seg.end
            feed = self.index_feed
            if feed is not None and feed.end == seg.start + pos:
                feed.end = start  # (the blank has no keys)
        return self._new_segment(start)

    def _store_timestamp(self) -> int:
        ts = time.time_ns() // 1_000_000
        if ts < self._last_store_ts:  # keep store timestamps monotonic for lookup by time
            return self._last_store_ts
        self._last_store_ts = ts
        return ts

    def append(self, msg: Message, max_size: int = MAX_RECORD_SIZE) -> PutResult:
        """Append one message; it is in its consume queue when this returns.

        Raises :class:`~services.broker.storage.record.RecordError` for an invalid message (or
        one whose record exceeds ``max_size``): nothing is written then. The validation and
        encoding of :func:`~services.broker.storage.record.prepare`, inlined (hot path: no
        intermediate objects; the header is packed straight into the mapping).
        """
        (topic, body, queue_id, flag, props, born_ts, born_host, sys_flag, reconsume_times,
         prepared_tx) = msg
        tail, tags_code = encode_tail(topic, props)
        if type(body) is not bytes or queue_id < 0 or sys_flag & HOST_V6_FLAGS:
            body = checked_body(body, queue_id, sys_flag)
        body_len = len(body)
        size = HEADER_SIZE + body_len + len(tail)
        if size > max_size or size > self._max_record:
            raise MessageTooLargeError(size, min(max_size, self._max_record))
        crc = body_crc(body)
        if born_host is self._last_born_host:  # (a tuple: immutable; usually the same object)
            born = self._last_born
        else:
            try:
                born = _born_hosts[born_host]
            except (KeyError, TypeError):
                born = _packed_host(born_host)
            if type(born_host) is tuple:
                self._last_born_host, self._last_born = born_host, born
        lock = self.lock
        lock.acquire()  # (cheaper than ``with`` on this path)
        try:
            if self.closed:
                raise StoreClosedError("commit log is closed")
            if self._writing:
                self.wait_writes()
            seg = self._queue.active
            if seg is None or seg.write_pos + size + END_FILE_MIN_BLANK_LENGTH > seg.size:
                seg = self._roll()
            pos = seg.write_pos
            physical_offset = seg.start + pos
            if self._dispatched != physical_offset:  # replicated records not yet dispatched
                self._dispatch_locked(None, True)
            end = pos + size
            if end > seg.refill_pos:
                self._refill(seg, end)
            ts = time_ns() // 1_000_000
            if ts < self._last_store_ts:  # keep store timestamps monotonic for lookup by time
                ts = self._last_store_ts
            else:
                self._last_store_ts = ts
            if sys_flag & TRANSACTION_PREPARED_TYPE:  # prepared / rolled back: not dispatched
                index = None
                queue_offset = 0
            else:
                index = self._find((topic, queue_id)) or self._create(topic, queue_id)
                queue_offset = index.max_offset
            # Straight into the write buffer (or the mapping): header, body, topic and properties.
            if not self._buffered:
                mm, at = seg.mm, pos
            elif self._wb_seg is seg and (at := self._wb_len) + size <= WRITE_BUFFER_SIZE:
                mm = self._wb
            else:
                mm, at = self._write_target(seg, pos, size)
            buffered = mm is self._wb
            try:  # (in the buffer, MAGICCODE goes in last: a torn record there is none)
                _PACK_HEADER(
                    mm, at, size, 0 if buffered else MAGIC_CODE, crc, queue_id, flag, queue_offset,
                    physical_offset, sys_flag, born_ts or ts, born, ts, self._store_host_bytes,
                    reconsume_times, prepared_tx, body_len)
            except struct.error as exc:
                mm[at:at + HEADER_SIZE] = bytes(HEADER_SIZE)
                raise RecordError(f"a header field is out of range: {exc}") from None
            body_end = at + HEADER_SIZE + body_len
            record_end = at + size
            mm[at + HEADER_SIZE:body_end] = body
            mm[body_end:record_end] = tail
            if buffered:
                mm[at + 4:at + 8] = _MAGIC_BYTES
                self._wb_len = record_end
                # (the record crosses a multiple of COMMIT_CHUNK: another chunk is buffered)
                if record_end % COMMIT_CHUNK < size and self.commit_wakeup is not None:
                    self.commit_wakeup()
            seg.write_pos = end
            end_offset = physical_offset + size
            if index is not None:
                cq_pos = queue_offset * CQ_ENTRY_SIZE
                if cq_pos < index.fast_end:  # ConsumeQueue.put's common case, inlined (see fast_end)
                    cq_seg = index.fast_seg
                    cq_rel = cq_pos - cq_seg.start
                    _PACK_CQ_ENTRY(cq_seg.mm, cq_rel, physical_offset, size, tags_code)
                    cq_seg.write_pos = cq_rel + CQ_ENTRY_SIZE
                    index.max_offset = queue_offset + 1
                    index.last_physical_end = end_offset
                else:
                    index.put(queue_offset, physical_offset, size, tags_code)
            self._dispatched = end_offset
            feed = self.index_feed
            if feed is not None:  # (a keyless record only moves the run's end)
                if feed.end != physical_offset:
                    feed.restart(physical_offset)
                if props and (_KEYS_NAME in props or _UNIQ_NAME in props):
                    keyed = feed.keyed
                    keyed += (physical_offset, ts, msg)
                    if len(keyed) > MAX_KEYED:
                        feed.overflow()
                feed.end = end_offset
                if feed.idle:
                    feed.wake()
        finally:
            lock.release()
        return _new_result(PutResult, (_PUT_OK, (queue_offset,), (physical_offset,), size, end_offset, ts,
                                       self.store_host, ""))

    def append_batch(self, prepared: Sequence[PreparedRecord],
                     messages: Sequence[Message] | None = None) -> PutResult:
        """Append many records under one lock acquisition, encoded into one write per segment
        touched. All or nothing: if a header field is out of range (RecordError) or a new
        segment cannot be created, whatever was written of the batch is truncated away.
        ``messages``: one per record (topic and properties), for the message index (without
        them the index reads the records back)."""
        n = len(prepared)
        if n == 0:
            return PutResult(PutMessageStatus.PUT_OK, [], [], 0, self.max_offset, 0, self.store_host)
        for p in prepared:
            if p.size > self._max_record:
                raise MessageTooLargeError(p.size, self._max_record)
        with self.lock:
            ts = self._begin_batch_locked()
            find, create = self._find, self._create
            assigned: dict[tuple[str, int], list[int]] = {}  # key -> [next queue offset]
            indexes: list[QueueIndex | None] = [None] * n
            queue_offsets = [0] * n
            for i, p in enumerate(prepared):
                if not p.sys_flag & TRANSACTION_PREPARED_TYPE:
                    key = (p.topic, p.queue_id)
                    index = find(key) or create(p.topic, p.queue_id)
                    indexes[i] = index
                    slot = assigned.get(key)
                    if slot is None:
                        slot = assigned[key] = [index.max_offset]
                    queue_offsets[i] = slot[0]
                    slot[0] += 1
            physical_offsets: list[int] = []
            rollback_to = self.max_offset if not self._queue.is_empty() else None
            i = 0
            try:
                while i < n:
                    seg = self._queue.last
                    if seg is None or seg.write_pos + prepared[i].size + END_FILE_MIN_BLANK_LENGTH > seg.size:
                        seg = self._roll()
                        if rollback_to is None:
                            rollback_to = seg.start
                    room = seg.size - seg.write_pos - END_FILE_MIN_BLANK_LENGTH
                    first = seg.start + seg.write_pos
                    j, total = i, 0
                    while j < n and total + prepared[j].size <= room:
                        physical_offsets.append(first + total)
                        total += prepared[j].size
                        j += 1
                    if seg.write_pos + total > seg.refill_pos:
                        self._refill(seg, seg.write_pos + total)
                    data = encode_batch(prepared[i:j], queue_offsets[i:j], first, ts,
                                        self._store_ip, self._store_port)
                    if self._buffered:
                        self._append_buffered(seg, data)
                    else:
                        seg.append(data)
                    i = j
            except BaseException:
                if rollback_to is not None:
                    self._roll_back_batch_locked(rollback_to)
                raise
            wrote = 0
            for p, target, queue_offset, physical_offset in zip(prepared, indexes, queue_offsets,
                                                                physical_offsets, strict=True):
                wrote += p.size
                if target is not None:
                    target.put(queue_offset, physical_offset, p.size, p.tags_code)
            end = physical_offsets[-1] + prepared[-1].size
            self._dispatched = end
            feed = self.index_feed
            if feed is not None and messages is not None and len(messages) == n:
                feed.add_messages(physical_offsets[0], end, physical_offsets, ts, messages)
        return PutResult(PutMessageStatus.PUT_OK, queue_offsets, physical_offsets, wrote, end, ts,
                         self.store_host)

    def _begin_batch_locked(self) -> int:
        """The start of a local batch append (hold the lock): refuse a closed log, wait for a
        direct write of replicated bytes, dispatch replicated records not dispatched yet;
        returns the batch's store timestamp."""
        if self.closed:
            raise StoreClosedError("commit log is closed")
        if self._writing:
            self.wait_writes()
        if self._dispatched != self._queue.max_offset:  # replicated records not yet dispatched
            self._dispatch_locked(None, True)
        return self._store_timestamp()

    def _roll_back_batch_locked(self, offset: int) -> None:
        """A local batch append failed part-way (hold the lock): cut what it wrote (and any
        segment it rolled to) back to ``offset``."""
        self._commit_locked()
        self._queue.truncate(offset)
        self._generation += 1
        if self.index_feed is not None:
            self.index_feed.rolled_back(offset)

    def append_uniform(self, batch: UniformBatch, messages: Sequence[Message] | None = None) -> PutResult:
        """:meth:`append_batch` for records that differ only in their bodies (one topic and
        queue; see :mod:`~services.broker.storage.bulk`): the batch encoded at once into one
        write and indexed with one consume queue write. All or nothing, as
        :meth:`append_batch`; a batch too large for one segment goes through it.
        ``messages``: as for :meth:`append_batch` (what the key index reads)."""
        n = len(batch)
        if batch.max_size > self._max_record:
            raise MessageTooLargeError(batch.max_size, self._max_record)
        total = batch.total
        if total + END_FILE_MIN_BLANK_LENGTH > self._segment_size:
            return self.append_batch(bulk.prepared_records(batch), messages)
        topic, queue_id = batch.topic, batch.queue_id
        with self.lock:
            ts = self._begin_batch_locked()
            index = self._find((topic, queue_id)) or self._create(topic, queue_id)
            first_queue_offset = index.max_offset
            seg = self._queue.last
            rollback_to = self.max_offset if seg is not None else None
            try:
                if seg is None or seg.write_pos + total + END_FILE_MIN_BLANK_LENGTH > seg.size:
                    seg = self._roll()
                    if rollback_to is None:
                        rollback_to = seg.start
                pos = seg.write_pos
                first = seg.start + pos
                if pos + total > seg.refill_pos:
                    self._refill(seg, pos + total)
                data, offsets = bulk.encode_uniform(batch, first_queue_offset, first, ts, self._store_ip,
                                                    self._store_port)
                if self._buffered:
                    self._append_buffered(seg, data)
                else:
                    seg.append(data)
            except BaseException:
                if rollback_to is not None:
                    self._roll_back_batch_locked(rollback_to)
                raise
            end = first + total
            index.put_run(first_queue_offset, bulk.queue_entries(batch, offsets), end)
            self._dispatched = end
            physical_offsets = offsets.tolist()
            feed = self.index_feed
            if feed is not None and messages is not None and len(messages) == n:
                feed.add_messages(first, end, physical_offsets, ts, messages)
        queue_offsets = range(first_queue_offset, first_queue_offset + n)
        return _new_result(PutResult, (PutMessageStatus.PUT_OK, queue_offsets, physical_offsets, total, end,
                                       ts, self.store_host, ""))

    # -- appending (slave) ---------------------------------------------------------------------

    def append_data(self, start_offset: int, data: ReadableBuffer | Sequence[ReadableBuffer]) -> int:
        """Append replicated bytes as they are (one buffer, or several back to back); the reput
        dispatcher (:meth:`reput`) validates and indexes the whole records later (RocketMQ's
        slave: the commit log is acked, the consume queues follow).

        ``start_offset`` must equal :attr:`max_offset` (an empty log accepts any offset at a
        segment boundary). A buffer must not cross a segment boundary (master and slave use
        the same segment size); the buffers of one call may fill a segment and go on in the
        next. The bytes are written with ``pwritev`` into the page cache, unparsed: this is
        the slave's hot path. Returns the new max offset. Raises :class:`OffsetMismatchError`,
        or :class:`CorruptDataError` when the dispatcher found an invalid record in earlier
        data (the log is then cut back to it, and nothing of this call is written).
        """
        pieces = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
        with self._append_data_lock:
            if self._ring is not None and self.reput_wakeup is not None:
                total = sum(len(piece) for piece in pieces)
                if total >= DIRECT_MIN:  # (only bulk appends go through the ring)
                    self._await_dispatcher(start_offset + total)
            return self._append_data(start_offset, pieces)

    def _append_data(self, start_offset: int, pieces: Sequence[ReadableBuffer]) -> int:
        size = self._segment_size
        writes: list[memoryview] | None = None
        with self.lock:
            if self.closed:
                raise StoreClosedError("commit log is closed")
            error = self._dispatch_error
            if error is not None:
                self._dispatch_error = None
                self.truncate_locked(error[0])
                raise CorruptDataError(*error)
            if self._wb_seg is not None:  # (appended as a master before)
                self._commit_locked()
            last = self._queue.last
            if last is None:
                if start_offset % size:
                    raise OffsetMismatchError(start_offset, 0, (
                        f"an empty commit log can only start at a segment boundary "
                        f"(multiple of {size}), not {start_offset}"))
            elif start_offset != last.start + last.write_pos:
                raise OffsetMismatchError(start_offset, last.start + last.write_pos)
            # Split into one run per segment; check everything before writing anything.
            runs: list[tuple[int, list[ReadableBuffer]]] = []
            end = start_offset
            for piece in pieces:
                n = len(piece)
                if not n:
                    continue
                if end // size != (end + n - 1) // size:
                    raise OffsetMismatchError(start_offset, start_offset, (
                        f"{n} bytes at {end} cross the end of the segment at {end - end % size + size}: "
                        "do master and slave use the same mappedFileSizeCommitLog?"))
                if not runs or end % size == 0:
                    runs.append((end, []))
                runs[-1][1].append(piece)
                end += n
            bulk = end - start_offset >= DIRECT_MIN
            if bulk:
                self._last_bulk_append = time.monotonic()
            # Bulk bytes go through the dispatch ring (they are written from there, direct
            # where they can be, and the dispatcher reads them there), else through ``stage``.
            in_ring = bulk and self._keep_for_dispatch(start_offset, pieces, end)
            stage = self._staging() if self._direct_write and bulk and not in_ring else None
            direct = 0
            if (in_ring and self._direct_write and len(runs) == 1 and last is not None
                    and start_offset < last.end):
                # The bytes are safe in the ring: write them outside the lock (below).
                writes = self._ring_views(start_offset, end)
                self._writing = True
                runs = []
            for i, (run_start, run) in enumerate(runs):
                seg = last if last is not None and run_start < last.end else self._new_segment(run_start)
                if last is None:
                    self._dispatched = run_start
                if in_ring:
                    run_end = runs[i + 1][0] if i + 1 < len(runs) else end
                    direct += seg.write_at(run_start - seg.start, self._ring_views(run_start, run_end),
                                           aligned=self._direct_write)
                else:
                    direct += seg.write_at(run_start - seg.start, run, stage)
                last = seg
            if direct:
                self._last_direct_append = self._last_bulk_append
            new_max = self.max_offset
            # Keep the warmer ahead of the writer, so pwritev finds the pages allocated (not
            # while appends go direct: their pages would only be dropped again).
            warm = (bool(runs) and not direct and last is not None
                    and last.warmed_pos < last.write_pos + self._warm_size // 2)
        if writes is not None:
            assert last is not None
            new_max = self._write_outside_lock(last, start_offset, writes)
            runs = [(start_offset, [])]
        if runs:
            wakeup = self.reput_wakeup
            if wakeup is not None:
                wakeup()
            if warm and (wakeup := self.warm_wakeup) is not None:
                wakeup()
        return new_max

    def _write_outside_lock(self, seg: Segment, start: int, views: list[memoryview]) -> int:
        """Write ring bytes at log offset ``start`` of ``seg`` direct, without :attr:`lock`
        (:attr:`_writing` is set): a direct write waits for the disk, and meanwhile the
        dispatcher indexes what came before and readers read. The segment's write position
        moves once the bytes are in the file, so no reader sees them earlier. Returns the new
        max offset."""
        try:
            if seg.write_at(start - seg.start, views, aligned=True):
                self._last_direct_append = self._last_bulk_append
        finally:
            with self._writes_done:
                self._writing = False
                self._writes_done.notify_all()
        return self.max_offset

    def wait_writes(self) -> None:
        """Wait until no :meth:`append_data` writes outside the lock (hold :attr:`lock`: no
        new one starts meanwhile)."""
        if self._writing:
            with self._writes_done:
                while self._writing:
                    self._writes_done.wait()

    def _await_dispatcher(self, end: int) -> None:
        """Before a bulk append up to ``end`` that would overwrite ring bytes the dispatcher
        has not read: wait (at most :data:`RING_WAIT_S`) until it has. So while a slave catches
        up, the dispatcher validates everything from memory, right behind the writer, instead
        of falling behind and reading the log back from the disk at the end (slower than the
        catch-up itself); the catch-up goes at the pace of the slower of the two."""
        room = DISPATCH_RING - SCAN_BYTES
        if (end - self._dispatched <= room or end - self._ring_end > room
                or self._ring_from > self._dispatched):  # (it reads the file: do not wait for it)
            return
        wakeup = self.reput_wakeup
        if wakeup is not None:
            wakeup()
        deadline = time.monotonic() + RING_WAIT_S
        cond = self._dispatch_cond
        with cond:
            self._dispatch_waiters += 1
            try:
                while (end - self._dispatched > room and self._dispatch_error is None
                       and not self.closed):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    cond.wait(min(left, 0.01))
            finally:
                self._dispatch_waiters -= 1

    def _keep_for_dispatch(self, start: int, pieces: Sequence[ReadableBuffer], end: int) -> bool:
        """Copy replicated bytes ``[start, end)`` into the dispatch ring (hold the lock; the
        slave's transient store), so the reput thread validates them from memory instead of
        reading back what went to the disk direct (see :meth:`_read_undispatched`), and the
        direct writes take them from there (page-aligned: no staging copy). Only while the
        dispatcher is less than the ring's size behind: bytes it has not read yet are never
        overwritten. Returns whether the bytes are in the ring."""
        if end - self._dispatched > DISPATCH_RING - SCAN_BYTES:
            self._ring_from = end  # too far behind: the ring starts again later
            return False
        if self._ring is None:
            self._ring = mmap.mmap(-1, DISPATCH_RING)
            self._ring_addr = ctypes.addressof(ctypes.c_char.from_buffer(self._ring))
            self._ring_from = start
        if self._ring_end != start:
            self._ring_from = start
            self._ring_restarts += 1
        ring = self._ring
        at = start % DISPATCH_RING
        for piece in pieces:
            view = memoryview(piece)
            while len(view):
                n = min(len(view), DISPATCH_RING - at)
                if n >= NOGIL_COPY_MIN and view.contiguous:  # (NumPy: the address of a read-only piece)
                    source = np.frombuffer(view[:n], dtype=np.uint8).ctypes.data
                    ctypes.memmove(self._ring_addr + at, source, n)  # (releases the GIL)
                else:
                    ring[at:at + n] = view[:n]
                view = view[n:]
                at = (at + n) % DISPATCH_RING
        self._ring_end = end
        return True

    def _ring_views(self, start: int, end: int) -> list[memoryview]:
        """Views of the ring holding log bytes ``[start, end)`` (two where it wraps)."""
        assert self._ring is not None
        view = memoryview(self._ring)
        at = start % DISPATCH_RING
        first = min(end - start, DISPATCH_RING - at)
        views = [view[at:at + first]]
        if first < end - start:
            views.append(view[:end - start - first])
        return views

    def _read_undispatched(self, seg: Segment, offset: int, buf: memoryview, size: int) -> memoryview:
        """Up to ``size`` bytes from ``offset`` (at most to the segment's write position) in
        ``buf`` (one of the scan buffers): from the dispatch ring if it holds them, else from
        the file, with ``O_DIRECT`` under replicaDirectWrite (what went to the disk direct is
        read back without filling the page cache, which costs more than the scan itself on a
        VM). Returns the view of ``buf`` holding them."""
        n = min(size, len(buf) - DIRECT_ALIGN, seg.write_pos - (offset - seg.start))
        ring = self._ring
        if ring is not None and self._ring_from <= offset < self._ring_end:
            n = min(n, self._ring_end - offset)  # (what the ring holds; the rest next time)
            at = offset % DISPATCH_RING
            first = min(n, DISPATCH_RING - at)
            if first == n:
                # Validated in place: the writer never overwrites ring bytes less than a ring
                # ahead of the dispatcher, which moves only after this scan (a ring restart
                # voids a scan made outside the lock: see _reput_batch).
                return memoryview(ring)[at:at + n]
            buf[:first] = ring[at:at + first]
            if first < n:
                buf[first:n] = ring[:n - first]
            # (the writer only overwrites bytes more than a ring behind the dispatcher)
            if self._ring_from <= offset:
                return buf[:n]
        if self._direct_write:
            view = seg.read_direct_into(offset - seg.start, n, buf)
            if view is not None:
                return view
        return buf[:seg.read_into(offset - seg.start, buf[:n])]

    def _staging(self) -> memoryview:
        if self._stage is None:
            self._stage = mmap.mmap(-1, DIRECT_STAGE)
        return memoryview(self._stage)

    def _refill(self, seg: Segment, end: int) -> None:
        """The writer is about to write up to ``end``, past ``seg.refill_pos``: wake the warmer
        to map more pages ahead (:meth:`warm_ahead`), or, if it fell behind (``end`` is past
        the mapped pages), map the next chunk on this thread. Hold the lock."""
        if not self._populate_size:
            seg.refill_pos = seg.size
            return
        if end > seg.populated_pos:
            self._populate(seg, end)
        elif self._prefault_ok:
            wakeup = self.warm_wakeup
            if wakeup is not None:
                wakeup()
        self._prefault_wanted = self._prefault_ok
        seg.refill_pos = seg.populated_pos

    def _populate(self, seg: Segment, end: int) -> None:
        if not seg.populate(end, min(self._populate_size, POPULATE_STEP), write=self._populate_write):
            log.info("madvise(MADV_POPULATE_%s) is not supported here; pages fault in one by one",
                     "WRITE" if self._populate_write else "READ")
            self._populate_size = 0
        wakeup = self.warm_wakeup
        if wakeup is not None:
            wakeup()

    def batch_pending(self) -> bool:
        """Whether a batch's worth of replicated bytes (:data:`BATCH_DISPATCH_MIN`) waits for
        the dispatcher."""
        return self._queue.max_offset - self._dispatched >= BATCH_DISPATCH_MIN

    def receiving_in_bulk(self) -> bool:
        """Whether an :meth:`append_data` of at least ``DIRECT_MIN`` bytes came in the last
        :data:`BULK_WINDOW_S` (a slave catching up)."""
        return _within_bulk_window(self._last_bulk_append)

    def warm_ahead(self) -> None:
        """For a background thread (takes no lock, and releases the GIL while the kernel
        works): map the pages of the next ``populate_size`` bytes past a master's writer into
        the process (:meth:`Segment.prefault`: the writer then takes no page fault and makes no
        ``madvise`` call itself; it only wakes this thread when it gets within half of that of
        the end), and put the pages of the next ``warm_size`` bytes in the page cache
        (:meth:`Segment.warm`), so mapping finds them allocated and zeroed. No warming while
        bulk appends go direct: the direct writes would only drop those pages again."""
        seg = self._queue.active
        if seg is None or self.closed:
            return
        populate = self._populate_size
        if populate and self._prefault_wanted:
            if seg.prefault(seg.write_pos + populate, write=self._populate_write):
                seg.refill_pos = seg.populated_pos - populate // 2
            else:
                log.info("madvise through ctypes is not available here; the writer maps pages itself")
                self._prefault_ok = self._prefault_wanted = False
        size = self._warm_size
        if not size:
            return
        if _within_bulk_window(self._last_direct_append):
            return
        if not seg.warm(seg.write_pos + size, min(size, WARM_CHUNK)):
            log.info("posix_fadvise(POSIX_FADV_WILLNEED) is not supported here; no warming ahead")
            self._warm_size = 0

    def prefetch_undispatched(self) -> None:
        """Keep :data:`PREFETCH_SIZE` bytes past the dispatcher in the page cache
        (:meth:`Segment.prefetch`): what a slave wrote direct is only on disk, and the reput
        must not wait for the disk while it holds the GIL. For the reput thread: no lock."""
        offset = self._dispatched
        if self._prefetched >= offset + PREFETCH_SIZE // 2 or offset >= self._queue.max_offset:
            return
        if self._ring is not None and self._ring_from <= offset < self._ring_end:
            return  # (it reads the dispatch ring)
        seg = self._queue.find(offset)
        if seg is None:
            return
        pos = max(self._prefetched, offset) - seg.start
        end = min(seg.size, offset - seg.start + PREFETCH_SIZE)
        if pos < end and seg.prefetch(pos, end - pos):
            self._prefetched = seg.start + end

    def _new_segment(self, start: int) -> Segment:
        try:
            return self._queue.create(start)
        except OSError as exc:
            raise CreateSegmentError(exc.errno, f"cannot create commit log segment at {start}: {exc}") \
                from exc

    # -- dispatching (reput) ---------------------------------------------------------------------

    def set_dispatched_offset(self, offset: int) -> None:
        """Where :meth:`dispatch_pending` resumes (recovery; a record boundary)."""
        self._dispatched = offset

    def dispatch_pending(self) -> tuple[int, str, int]:
        """Dispatch whole records from :attr:`dispatched_offset` to the end of the data, body
        CRCs checked (recovery). Returns (records dispatched, reason if an invalid record
        stopped it, its offset)."""
        with self.lock:
            count, reason = self._dispatch_locked(None, True)
            return count, reason, self._dispatched

    def reput(self, max_records: int = REPUT_BATCH, *, batch_only: bool = False) -> int:
        """Dispatch up to ``max_records`` whole records from :attr:`dispatched_offset` (batches
        outside the lock, then one lock acquisition for the rest: call it in a loop, letting
        other threads run in between; ``batch_only``: not the rest, e.g. while the writer is
        just ahead). An invalid record stops dispatching for good: it is logged, reported in
        :attr:`dispatch_error` and never indexed. Returns the records dispatched (0: nothing
        more to do for now)."""
        before = self._dispatched
        count = 0
        if max_records >= BATCH_RECORDS_MIN:
            # Batches outside the lock for as long as they go (the locked path below would
            # hold the appending thread up for its reads and scans).
            while count < max_records:
                more = self._reput_batch(max_records - count)
                if not more:
                    break
                count += more
        if batch_only:
            if count:
                self._dispatched_to(before)
            return count
        with self.lock:
            if self.closed or self._dispatch_error is not None:
                return count
            reason = ""
            if count < max_records:
                more, reason = self._dispatch_locked(max_records - count, self.reput_check_crc)
                count += more
            offset = self._dispatched
            if reason:
                self._dispatch_error = (offset, reason)
                log.error("commit log: INVALID RECORD at %d (%s): dispatching stopped, nothing from "
                          "there on is served; the next replicated append cuts the log back there",
                          offset, reason)
        if offset != before:
            self._dispatched_to(before)
        return count

    def _dispatched_to(self, before: int) -> None:
        """The dispatcher moved on from ``before``: wake its waiters and tell the listener."""
        if self._dispatch_waiters:
            with self._dispatch_cond:
                self._dispatch_cond.notify_all()
        listener = self.on_dispatched
        if listener is not None:
            listener(self._dispatched)

    @property
    def _scanner(self) -> Scanner:
        """The batch validator (made on first use: a master needs it only to recover)."""
        if self._scanner_ is None:
            self._scanner_ = Scanner()
        return self._scanner_

    def _reput_batch(self, max_records: int) -> int:
        """The batch path of :meth:`reput` with the expensive part outside the lock: read and
        validate the records past :attr:`dispatched_offset` (immutable bytes: a slave only
        appends past them, and a truncation bumps ``_generation``), then, under the lock and
        only if nothing moved meanwhile, index them. So the appending thread is not held up
        while the records are checked. Returns the records dispatched (0: the locked path
        takes over, e.g. for a blank, an incomplete or an invalid record)."""
        offset = self._dispatched
        generation = self._generation
        restarts = self._ring_restarts
        seg = self._queue.find(offset)
        if seg is None or self.closed or self._dispatch_error is not None or not seg.hold():
            return 0
        try:
            pos = offset - seg.start
            available = seg.write_pos - pos
            if available < BATCH_DISPATCH_MIN:
                return 0
            data = self._read_undispatched(seg, offset, self._reput_buf, available)
            batch = self._scanner.scan(data, offset, len(data), seg.size - pos, max_records,
                                       self.reput_check_crc)
        finally:
            seg.release()
        if batch is None:
            return 0
        with self.lock:
            if (self.closed or self._dispatched != offset or self._generation != generation
                    or self._ring_restarts != restarts):
                return 0
            self._dispatcher.dispatch_batch(batch)
            self._dispatched = batch.end_offset
            if batch.max_store_timestamp > self._last_store_ts:
                self._last_store_ts = batch.max_store_timestamp
        return len(batch)

    def wait_dispatched(self, offset: int, timeout: float) -> bool:
        """Block until :attr:`dispatched_offset` reaches ``offset`` (True) or ``timeout``
        seconds pass or the dispatcher stopped before it (False)."""
        if self._dispatched >= offset:
            return True
        deadline = time.monotonic() + timeout
        cond = self._dispatch_cond
        with cond:
            self._dispatch_waiters += 1
            try:
                while self._dispatched < offset:
                    if self._dispatch_error is not None or self.closed:
                        return False
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    cond.wait(min(left, 0.05))  # (a wake-up lost to a race costs 50 ms at most)
                return True
            finally:
                self._dispatch_waiters -= 1

    def _dispatch_locked(self, max_records: int | None, check_crc: bool) -> tuple[int, str]:
        """Dispatch whole records from :attr:`dispatched_offset` (hold the lock), at most
        ``max_records`` (None: all). Validates each record as
        :func:`~services.broker.storage.record.check_record` does (inlined: this is the
        slave's hot loop). Returns (records dispatched, reason if an invalid record stopped
        it at the new :attr:`dispatched_offset`)."""
        offset = self._dispatched
        queue = self._queue
        end = queue.max_offset
        count = 0
        limit = max_records if max_records is not None else -1
        reason = ""
        find, create = self._find, self._create
        topics = self._topic_names
        dispatch_batch = self._dispatcher.dispatch_batch
        scan_buf = self._scan_buf
        last_ts = self._last_store_ts
        crc32 = body_crc
        while offset < end and count != limit:
            seg = queue.find(offset)
            if seg is None:
                if offset < queue.min_offset:
                    offset = queue.min_offset
                    continue
                break
            base = seg.start
            pos = offset - base
            write_pos = seg.write_pos
            if pos >= write_pos:
                if seg.is_full:
                    offset = seg.end
                    continue
                break
            size = seg.size
            mm = seg.mm
            view = seg.view
            try_batch = True
            while pos < write_pos and count != limit:
                available = write_pos - pos
                scanner = self._scanner if try_batch and available >= BATCH_DISPATCH_MIN and (
                    limit < 0 or limit - count >= BATCH_RECORDS_MIN) else None
                if scanner is not None:
                    data = self._read_undispatched(seg, base + pos, scan_buf, available)
                    batch = scanner.scan(data, base + pos, len(data), size - pos,
                                         limit - count if limit > 0 else len(data), check_crc)
                    if batch is not None:
                        dispatch_batch(batch)
                        count += len(batch)
                        pos = batch.end_offset - base
                        if batch.max_store_timestamp > last_ts:
                            last_ts = batch.max_store_timestamp
                        continue
                    try_batch = False  # this record goes one at a time (it may be the last)
                    continue
                try_batch = True
                if available < END_FILE_MIN_BLANK_LENGTH:
                    break
                total, magic = _PREFIX(mm, pos)
                if magic != MAGIC_CODE:
                    if magic == BLANK_MAGIC_CODE:
                        if total != size - pos:
                            reason = f"blank record of bad size {total}"
                        elif total <= available:
                            pos = size
                        break
                    reason = "end of data" if total == 0 and magic == 0 else f"bad magic code 0x{magic:08x}"
                    break
                if total < MIN_RECORD_SIZE or total + END_FILE_MIN_BLANK_LENGTH > size - pos:
                    reason = f"bad record size {total}"
                    break
                if total > available:
                    break
                (_, _, crc, queue_id, queue_offset, physical, sys_flag, store_ts,
                 body_len) = _DISPATCH_UNPACK(mm, pos)
                if physical != base + pos:
                    reason = f"PHYSICALOFFSET {physical} != position {base + pos}"
                    break
                body_end = pos + HEADER_SIZE + body_len
                rec_end = pos + total
                if body_len < 0 or body_end + 3 > rec_end:
                    reason = "body length overruns the record"
                    break
                topic_len = mm[body_end]
                props_at = body_end + 1 + topic_len
                if topic_len == 0 or props_at + 2 > rec_end:
                    reason = "bad topic length"
                    break
                (props_len,) = _U16(mm, props_at)
                if props_at + 2 + props_len != rec_end:
                    reason = "field sizes do not add up to TOTALSIZE"
                    break
                if check_crc and crc32(view[pos + HEADER_SIZE:body_end]) != crc:
                    reason = "body CRC mismatch"
                    break
                raw_topic = mm[body_end + 1:props_at]
                topic = topics.get(raw_topic)
                if topic is None:
                    try:
                        topic = raw_topic.decode()
                    except UnicodeDecodeError:
                        reason = "topic is not UTF-8"
                        break
                    if len(topics) >= _TOPICS_MAX:
                        topics.clear()
                    topics[raw_topic] = topic
                if not sys_flag & TRANSACTION_PREPARED_TYPE:
                    tags_code = 0
                    if props_len:
                        props = mm[props_at + 2:rec_end]
                        if _TAGS_KEY in props:
                            tags = property_value(props, PROPERTY_TAGS)
                            if tags:
                                tags_code = tag_hash_code(tags)
                    index = find((topic, queue_id)) or create(topic, queue_id)
                    index.put(queue_offset, base + pos, total, tags_code)
                if store_ts > last_ts:
                    last_ts = store_ts
                pos = rec_end
                count += 1
            offset = base + pos
            if reason or (pos < write_pos and pos < size and count != limit):
                break  # invalid, or an incomplete record at the end of the data
        self._dispatched = offset
        self._last_store_ts = last_ts
        if reason:
            log.error("commit log: invalid record at %d (%s); dispatch stopped", offset, reason)
        return count, reason

    # -- reading -------------------------------------------------------------------------------

    def read(self, offset: int) -> MessageRecord | None:
        """Decode the record at ``offset`` (None if there is none there)."""
        return self.read_many([offset])[0]

    def read_many(self, offsets: Iterable[int]) -> list[MessageRecord | None]:
        """Decode the records at ``offsets``, holding each segment once per run of offsets in it."""
        out: list[MessageRecord | None] = []
        held: Segment | None = None
        try:
            for offset in offsets:
                if held is None or not held.start <= offset < held.end:
                    if held is not None:
                        held.release()
                        held = None
                    seg = self._queue.find(offset)
                    if seg is None or not seg.hold():
                        out.append(None)
                        continue
                    held = seg
                pos = offset - held.start
                if pos >= held.write_pos:
                    out.append(None)
                    continue
                if offset >= self._file_end:
                    self.commit()
                try:
                    out.append(decode_record(held.view, pos, check_crc=False))
                except RecordError:
                    out.append(None)
        finally:
            if held is not None:
                held.release()
        return out

    def store_timestamp_at(self, offset: int) -> int | None:
        """STORETIMESTAMP of the record at ``offset`` (None if the segment is gone)."""
        seg = self._queue.find(offset)
        if seg is None or not seg.hold():
            return None
        try:
            if offset - seg.start >= seg.write_pos:
                return None
            if offset >= self._file_end:
                self.commit()
            return read_store_timestamp(seg.view, offset - seg.start)
        finally:
            seg.release()

    def get_data(self, offset: int, max_bytes: int) -> SegmentSlice | None:
        """Up to ``max_bytes`` written bytes from ``offset``, zero-copy, never crossing a segment
        end (a chunk may end mid-record). None if nothing is there. Release the slice."""
        seg = self._queue.find(offset)
        if seg is None:
            return None
        pos = offset - seg.start
        available = seg.write_pos - pos
        if available <= 0 or max_bytes <= 0:
            return None
        if offset + min(available, max_bytes) > self._file_end:
            self.commit()
        return seg.slice(pos, min(available, max_bytes))

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """Sync written data (:meth:`commit` first); returns the flushed offset. Do not hold
        :attr:`lock`."""
        if self._wb_seg is not None:
            self.commit()
        return self._queue.flush(least_pages)

    # -- the write buffer ----------------------------------------------------------------------

    def _write_target(self, seg: Segment, pos: int, size: int) -> tuple[mmap.mmap, int]:
        """Where a master's append of ``size`` bytes at ``pos`` of the active ``seg`` goes: the
        write buffer and the position in it, committing the buffer first if it holds another
        segment's bytes or is full; a record larger than the buffer goes into the mapping (at
        ``pos``). Hold the lock."""
        if self._wb_seg is not None and (self._wb_seg is not seg or self._wb_len + size > WRITE_BUFFER_SIZE):
            self._commit_locked()
        if size > WRITE_BUFFER_SIZE:
            return seg.mm, pos
        wb = self._wb
        if self._wb_seg is None:
            # (file_pos first: a flush reads write_pos, then file_pos)
            seg.file_pos = pos
            self._file_end = seg.start + pos
            self._wb_seg = seg
            self._wb_base = pos
            self._wb_len = 0
        return wb, self._wb_len

    def _append_buffered(self, seg: Segment, data: bytes | bytearray) -> None:
        """Append ``data`` (whole records) to the active ``seg`` through the write buffer."""
        pos = seg.write_pos
        n = len(data)
        if pos + n > seg.size:
            raise CommitLogError(f"{n} bytes do not fit in {seg!r}")
        mm, at = self._write_target(seg, pos, n)
        if mm is self._wb:
            # the first record's TOTALSIZE and MAGICCODE last: a torn batch there is none
            view = memoryview(data)
            mm[at + 8:at + n] = view[8:]
            mm[at:at + 8] = view[:8]
            self._wb_len = at + n
            if (at + n) // BATCH_COMMIT_CHUNK != at // BATCH_COMMIT_CHUNK and self.commit_wakeup is not None:
                self.commit_wakeup()
        else:
            mm[at:at + n] = data
        seg.write_pos = pos + n

    def commit(self) -> int:
        """Write what the write buffer holds to the file (``pwrite``: the GIL and the lock are
        released meanwhile, appends go on into the other buffer). For the committer thread and
        for readers of bytes past :attr:`_file_end`; do not hold :attr:`lock`. Everything
        appended before the call is in the file when it returns. Returns the bytes written.
        Raises OSError if the write fails (the bytes stay buffered; the next commit retries)."""
        with self._commit_lock:
            retried = self._unwritten is not None
            n = self._commit_chunk()
            if retried:  # that was the chunk whose commit failed; now the rest
                n += self._commit_chunk()
            return n

    def _commit_chunk(self) -> int:
        """One step of :meth:`commit` (hold ``_commit_lock``): the chunk whose commit failed
        if there is one, else the live buffer."""
        with self.lock:
            if self._unwritten is not None:  # the last commit failed: that chunk first
                seg, base, n, chunk = self._unwritten
            else:
                live = self._wb_seg
                base, n = self._wb_base, self._wb_len
                if live is None or not n:
                    return 0
                seg = live
                chunk = self._wb
                # Appends go on into the other buffer, after these bytes.
                self._wb, self._wb_spare = self._wb_spare, chunk
                self._wb_base = base + n
                self._wb_len = 0
            generation = self._wb_generation
            done = self._inflight = threading.Event()
        try:
            seg.write_through(base, memoryview(chunk)[:n])
        except BaseException:
            self._unwritten = (seg, base, n, chunk)
            raise
        else:
            self._unwritten = None
        finally:
            done.set()
        with self.lock:
            if self._wb_generation == generation:
                self._inflight = None
                self._set_mark(seg.start + base + n)
                if self._wb_len:
                    seg.file_pos = base + n
                    self._file_end = seg.start + base + n
                else:  # all in the file
                    self._file_end = ALL_IN_FILE
                    seg.file_pos = ALL_IN_FILE
                    self._wb_seg = None
        return n

    def _commit_locked(self) -> None:
        """Write everything buffered to the file now, waiting for a commit in flight (hold the
        lock: before a roll, a truncation, a slave append, closing)."""
        seg = self._wb_seg
        if seg is None:
            return
        done = self._inflight
        if done is not None:
            done.wait()  # (its pwrite does not need the lock)
        if self._unwritten is not None:  # a failed commit's chunk (precedes the live buffer)
            failed, base, size, chunk = self._unwritten
            failed.write_through(base, memoryview(chunk)[:size])
            self._unwritten = None
        n = self._wb_len
        if n:
            wb = self._wb
            seg.write_through(self._wb_base, memoryview(wb)[:n])
        self._set_mark(seg.start + self._wb_base + n)
        self._wb_generation += 1
        self._inflight = None
        self._wb_len = 0
        self._wb_seg = None
        self._file_end = ALL_IN_FILE
        seg.file_pos = ALL_IN_FILE

    # -- truncation and expiry -----------------------------------------------------------------

    def truncate_locked(self, offset: int) -> None:
        """Cut the log back to ``offset`` (hold :attr:`lock`; the caller fixes the consume
        queues)."""
        self.wait_writes()
        self._commit_locked()
        if self._mark is not None:  # records cut away must never be replayed
            for buf in (self._wb, self._wb_spare):
                buf[:] = bytes(len(buf))
        self._queue.truncate(offset)
        self._set_mark(self.max_offset)
        self._generation += 1
        self._ring_end = self._ring_from = 0
        self._dispatched = min(self._dispatched, self.max_offset)
        error = self._dispatch_error
        if error is not None and error[0] >= self.max_offset:
            self._dispatch_error = None  # the invalid record is gone

    def delete_expired(self, now: int, reserved_ms: int) -> int:
        """Delete the oldest segments last modified ``reserved_ms`` or more before ``now`` (ms),
        never the last segment, one that is held, or one not completely flushed."""
        def expired(seg: Segment) -> bool:
            return seg.flushed_pos >= seg.size and seg.last_modified() * 1000 + reserved_ms <= now

        deleted = self._queue.delete_head(expired)
        for seg in deleted:
            log.info("deleted expired commit log segment %s", seg.path)
        return len(deleted)

    # -- recovery ------------------------------------------------------------------------------

    def load(self) -> None:
        self._queue.load()
        directory = self._wb_dir
        if directory is not None and (self._buffered or os.path.exists(os.path.join(directory, "committed"))):
            os.makedirs(directory, exist_ok=True)
            self._wb, self._wb_spare = (_buffer_file(os.path.join(directory, name)) for name in ("0", "1"))
            self._mark = _buffer_file(os.path.join(directory, "committed"), PAGE_SIZE)

    def _set_mark(self, offset: int) -> None:
        if self._mark is not None:
            _MARK.pack_into(self._mark, 0, offset)

    def replay_write_buffers(self) -> int:
        """After a crash: append the records a killed process left in its write buffer files
        that continue the log exactly (each one whole, its body CRC right, PHYSICALOFFSET at
        the end of the log, in one chain from the start of its buffer). Returns the bytes
        appended (then dispatched like any other records by recovery)."""
        if self._mark is None:
            return 0
        (mark,) = _MARK.unpack_from(self._mark, 0)
        if self.max_offset < mark:
            # The log ends before what was committed (a machine crash lost unflushed pages, or
            # the file is damaged): the buffers hold no record that never reached the file.
            log.info("write buffer not replayed: the log ends at %d, commits reached %d",
                     self.max_offset, mark)
            self._set_mark(self.max_offset)
            return 0
        replayed = 0
        chains = [(buf, _buffer_chain(buf)) for buf in (self._wb, self._wb_spare)]
        for _ in chains:  # the older buffer's chain may continue in the other one
            for buf, (offsets, ends) in chains:
                end = self.max_offset
                if end not in offsets:
                    continue
                k = offsets.index(end)
                first = ends[k - 1] if k else 0
                data = bytes(buf[first:ends[-1]])
                seg = self._queue.last
                if seg is not None and end == seg.end:
                    seg = self._new_segment(end)
                if seg is None or end != seg.start + seg.write_pos \
                        or seg.write_pos + len(data) + END_FILE_MIN_BLANK_LENGTH > seg.size:
                    log.warning("write buffer records at %d do not fit the log; not replayed", end)
                    return replayed
                seg.write_at(seg.write_pos, [data])
                for at in range(k, len(offsets)):
                    self._last_store_ts = max(self._last_store_ts, read_store_timestamp(
                        memoryview(buf), ends[at - 1] if at else 0))
                replayed += len(data)
        if replayed:
            log.warning("appended %d bytes of records from the write buffer of the last run", replayed)
        self._set_mark(self.max_offset)
        return replayed

    def recover_from_checkpoint(self, offset: int, last_store_timestamp: int) -> bool:
        """Clean start: trust ``offset`` (the max offset written at shutdown) if it lies in the
        last segment and nothing is written after it. No records are scanned."""
        last = self._queue.last
        if last is None:
            return offset == 0
        if not last.start <= offset <= last.end:
            return False
        pos = offset - last.start
        probe = last.mm[pos:min(pos + PAGE_SIZE, last.size)]
        if probe.count(0) != len(probe):
            return False
        last.write_pos = last.flushed_pos = last.populated_pos = pos
        self._queue.flushed_where = offset
        self._last_store_ts = last_store_timestamp
        return True

    def recover_by_scan(self, from_offset: int) -> ScanResult:
        """Validate records (magic, sizes, PHYSICALOFFSET, body CRC) from the start of the segment
        containing ``from_offset``; the first invalid one ends the log. The tail after it is
        zeroed and later segments are deleted."""
        segs = self._queue.segments
        if not segs:
            return ScanResult(0, 0, 0, 0, "empty")
        index = min(max((from_offset - segs[0].start) // self._segment_size, 0), len(segs) - 1)
        start = offset = segs[index].start
        records = 0
        reason = ""
        for seg in segs[index:]:
            pos = 0
            while pos < seg.size:
                remaining = seg.size - pos
                check = check_record(seg.view, pos, remaining, expected_offset=seg.start + pos,
                                     segment_remaining=remaining)
                if check.kind is CheckKind.RECORD:
                    assert check.request is not None
                    self._last_store_ts = max(self._last_store_ts, check.request.store_timestamp)
                    pos += check.size
                    records += 1
                elif check.kind is CheckKind.BLANK:
                    pos = seg.size
                else:
                    reason = check.reason
                    break
            offset = seg.start + pos
            if pos < seg.size:
                break
        else:
            reason = reason or "end of last segment"
        self._queue.truncate(offset, sparse=True)
        last = self._queue.last
        if last is not None:
            last.flushed_pos = last.populated_pos = last.write_pos
        self._queue.flushed_where = self.max_offset
        log.info("commit log scanned from %d: %d records, valid end %d (%s)", start, records, offset, reason)
        return ScanResult(start, offset, records, offset - start, reason)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.wait_writes()
            self._commit_locked()
            self._queue.close()
            if self._stage is not None:
                self._stage.close()
                self._stage = None
            if self._ring is not None:
                with contextlib.suppress(BufferError):  # (a view still referenced somewhere)
                    self._ring.close()
                self._ring = None


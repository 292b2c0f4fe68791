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

The replicated appends (with the dispatch ring and the warming around the writer) are
:class:`~services.broker.storage.replica.ReplicaAppends` and the reput is
:class:`~services.broker.storage.reput.Reput`, both bases of :class:`CommitLog` in modules of
their own; they share the one lock and the state set up here. The errors are in
:mod:`.logerrors`. The framing, batch encoding, batch validation, index feed and segment files
live in their own modules too. This module keeps local appends, reading, the write buffer,
truncation and recovery, still over the project's usual size: they share one lock and about
forty fields on the hot path.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from time import time_ns
from typing import NamedTuple, Protocol

from pocketmq.wire.record import header_format
from services.broker.storage import bulk
from services.broker.storage.bulk import UniformBatch
from services.broker.storage.config import CQ_ENTRY_SIZE
from services.broker.storage.consumequeue import ENTRY as CQ_ENTRY
from services.broker.storage.consumequeue import MemoryFile
from services.broker.storage.dispatch import DispatchBatch, Scanner
from services.broker.storage.indexfeed import MAX_KEYED, AppendFeed
from services.broker.storage.indexkeys import may_hold_keys
from services.broker.storage.logerrors import (
    CommitLogError,
    CreateSegmentError,
    StoreClosedError,
)
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_SIZE,
    HOST_V6_FLAGS,
    MAGIC_CODE,
    PREFIX,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANSACTION_PREPARED_TYPE,
    CheckKind,
    Host,
    Message,
    MessageRecord,
    MessageTooLargeError,
    PreparedRecord,
    RecordError,
    body_crc,
    check_record,
    checked_body,
    decode_record,
    encode_batch,
    encode_tail,
    host_bytes,
    read_store_timestamp,
)
from services.broker.storage.replica import (
    QueuedWrite,
    ReplicaAppends,
)
from services.broker.storage.reput import (
    SCAN_BYTES,
    Reput,
)
from services.broker.storage.segment import (
    ALL_IN_FILE,
    DIRECT_ALIGN,
    PAGE_SIZE,
    Segment,
    SegmentSlice,
    SyncFn,
    default_sync,
)
from services.broker.storage.segment_queue import SegmentQueue
from services.broker.storage.status import PutMessageStatus, PutResult, not_available, refused

log = logging.getLogger(__name__)

_BLANK_HEADER = PREFIX
#: Largest record the format allows (TOTALSIZE is a signed 32-bit int).
MAX_RECORD_SIZE = 2**31 - 1
#: Size of each of the two write buffers of a master's appends (``write_buffer``: RocketMQ's
#: transient store pool); a larger record is written through the mapping. The committer swaps
#: the buffers about once per GIL switch interval (5 ms) plus its ``pwrite``, and more than
#: that under load; when the live buffer fills before, the appending thread commits it itself
#: (a synchronous ``pwrite`` of the whole buffer on the put path): 16 MiB leave it about
#: 30 ms of headroom at full speed (4 MiB left 8 ms, and 5-30 % of the bytes were committed
#: by the appender).
WRITE_BUFFER_SIZE = 16 * 1024 * 1024
#: The appender wakes the committer each time this many bytes are buffered.
COMMIT_CHUNK = 128 * 1024
#: ... and a batch appender each time this many: batches fill the buffer fast, and each wake
#: costs the appending thread a thread switch while it holds the GIL (a commit every 512 KiB
#: still leaves the 4 MiB buffer far from full).
BATCH_COMMIT_CHUNK = 512 * 1024

_KEYS_NAME = PROPERTY_KEYS
_UNIQ_NAME = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_MAGIC_BYTES = struct.pack(">I", MAGIC_CODE)
_MARK = struct.Struct(">q")


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
    fast_seg: Segment | MemoryFile

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


#: ``size << 32 | body_len`` -> ``pack_into`` of a struct for the whole record of that shape:
#: header, body and tail in one call (bounded, cleared when full) ...
_record_packers: dict[int, Callable[..., None]] = {}
#: ... made the second time a shape is met (a stream of ever new sizes would spend more on
#: making structs than one saves); the first time the parts go in one by one.
_shapes_seen: set[int] = set()
_RECORD_PACKERS_MAX = 4096


def _record_packer(size: int, body_len: int) -> Callable[..., None]:
    """The packer of records of ``size`` bytes with a ``body_len``-byte body (see above)."""
    key = size << 32 | body_len
    if key not in _shapes_seen:
        if len(_shapes_seen) >= _RECORD_PACKERS_MAX:
            _shapes_seen.clear()
        _shapes_seen.add(key)
        return _pack_parts
    if len(_record_packers) >= _RECORD_PACKERS_MAX:
        _record_packers.clear()
    packer = _record_packers[key] = struct.Struct(
        f"{_PACK.format}{body_len}s{size - HEADER_SIZE - body_len}s").pack_into
    return packer


def _pack_parts(mm: mmap.mmap, at: int, size: int, magic: int, crc: int, queue_id: int, flag: int,
                queue_offset: int, physical_offset: int, sys_flag: int, born_ts: int, born: bytes,
                store_ts: int, store_host: bytes, reconsume_times: int, prepared_tx: int, body_len: int,
                body: bytes, tail: bytes) -> None:
    """A record packer for any shape: the header, then body and tail."""
    _PACK_HEADER(mm, at, size, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
                 born, store_ts, store_host, reconsume_times, prepared_tx, body_len)
    body_end = at + HEADER_SIZE + body_len
    mm[at + HEADER_SIZE:body_end] = body
    mm[body_end:at + size] = tail


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


def append_failed(exc: Exception) -> PutResult:
    """The result of an append that failed for ``exc`` (not for the message: see
    :func:`~services.broker.storage.status.refused`)."""
    if isinstance(exc, StoreClosedError):
        return not_available()
    if isinstance(exc, CreateSegmentError):
        log.error("cannot create a commit log segment: %s", exc)
        return PutResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, error=str(exc))
    log.exception("append failed")
    return PutResult(PutMessageStatus.UNKNOWN_ERROR, error=f"{type(exc).__name__}: {exc}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLog(ReplicaAppends, Reput):
    #: The segment the short path of :meth:`put` writes (while :attr:`_fast_until` >= 0).
    _fast_seg: Segment

    def __init__(self, directory: str, segment_size: int, *, store_host: Host, dispatcher: Dispatcher,
                 sync: SyncFn = default_sync, populate_size: int = 0, populate_write: bool = False,
                 warm_size: int = 0, direct_write: bool = False, write_buffer: bool = False,
                 write_buffer_dir: str | None = None) -> None:
        #: Held while appending, dispatching, truncating; take it to change the log and the
        #: consume queues consistently.
        self.lock = threading.Lock()
        #: One :meth:`append_data` at a time (taken before :attr:`lock`): its direct writes
        #: run outside :attr:`lock`, on the write thread (see :meth:`_write_queued`) ...
        self._append_data_lock = threading.Lock()
        #: ... while this is True; whoever else changes the log under :attr:`lock` first waits
        #: for them (:meth:`wait_writes`).
        self._writing = False
        self._writes_done = threading.Condition(threading.Lock())
        #: Direct writes of dispatch-ring bytes waiting for the write thread, oldest first
        #: (see :meth:`queue_data`; guarded by :attr:`_writes_done`) ...
        self._queued: collections.deque[QueuedWrite] = collections.deque()
        #: ... the log offset where they end, and the bytes queued or being written.
        self._queued_end = 0
        self._queued_bytes = 0
        #: The write thread (made on the first queued write), and whether a run of it that
        #: drains the queue is on its way (guarded by :attr:`_writes_done`).
        self._write_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._writer_busy = False
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
        self._closed = False
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
        #: :meth:`put`'s short path: the log offset of the write buffer's first byte, and
        #: the offset a record must end at or before to take it (-1: none may; see :meth:`_arm`).
        self._fast_start = 0
        self._fast_until = -1
        #: maxMessageSize: :meth:`put` refuses larger records (set by the store).
        self.max_message_size = MAX_RECORD_SIZE

    @property
    def closed(self) -> bool:
        """Set (under the lock) when the log refuses appends from now on."""
        return self._closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self._closed = value
        self._fast_until = -1

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

    def put(self, msg: Message) -> PutResult:
        """Append one message; it is in its consume queue when this returns. Never raises for
        the message or the log: an invalid message (or one whose record exceeds
        :attr:`max_message_size` or a segment) is refused with MESSAGE_ILLEGAL or
        PROPERTIES_SIZE_EXCEEDED and nothing is written; a closed log answers
        SERVICE_NOT_AVAILABLE, a failed segment creation CREATE_MAPPED_FILE_FAILED.

        The validation and encoding of :func:`~services.broker.storage.record.prepare`,
        inlined (hot path: no intermediate objects; the record is packed straight into the
        write buffer). Under the lock, one comparison with :attr:`_fast_until` stands for every
        check of the general path (:meth:`_append_locked`; see :meth:`_arm`). The store hands
        single puts straight to this method when nothing has to happen after the append (see
        ``MessageStore.put_message``), so it is the whole single put: one Python call.
        """
        try:
            (topic, body, queue_id, flag, props, born_ts, born_host, sys_flag, reconsume_times,
             prepared_tx) = msg
            tail, tags_code = encode_tail(topic, props)
            if type(body) is not bytes or queue_id < 0 or sys_flag & HOST_V6_FLAGS:
                body = checked_body(body, queue_id, sys_flag)
            body_len = len(body)
            size = HEADER_SIZE + body_len + len(tail)
            if size > self.max_message_size:
                raise MessageTooLargeError(size, min(self.max_message_size, self._max_record))
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
                at = self._wb_len
                physical_offset = self._fast_start + at
                end_offset = physical_offset + size
                if end_offset > self._fast_until or sys_flag & TRANSACTION_PREPARED_TYPE:
                    return self._append_locked(msg, tail, tags_code, body, size, crc, born)
                ts = time_ns() // 1_000_000
                if ts < self._last_store_ts:  # keep store timestamps monotonic for lookup by time
                    ts = self._last_store_ts
                else:
                    self._last_store_ts = ts
                index = self._find((topic, queue_id)) or self._create(topic, queue_id)
                queue_offset = index.max_offset
                # Into the write buffer: header (MAGICCODE last: a torn record there is none),
                # body, topic and properties.
                mm = self._wb
                pack = _record_packers.get(size << 32 | body_len) or _record_packer(size, body_len)
                try:
                    pack(mm, at, size, 0, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                         born_ts or ts, born, ts, self._store_host_bytes, reconsume_times, prepared_tx,
                         body_len, body, tail)
                except struct.error as exc:
                    mm[at:at + HEADER_SIZE] = bytes(HEADER_SIZE)
                    raise RecordError(f"a header field is out of range: {exc}") from None
                record_end = at + size
                mm[at + 4:at + 8] = _MAGIC_BYTES
                self._wb_len = record_end
                self._fast_seg.write_pos = self._wb_base + record_end
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
        except RecordError as exc:
            return refused(exc)
        except Exception as exc:
            return append_failed(exc)
        return _new_result(PutResult, (_PUT_OK, (queue_offset,), (physical_offset,), size, end_offset, ts,
                                       self.store_host, ""))

    def _arm(self) -> None:
        """Let the next local appends take :meth:`put`'s short path (hold the lock): it
        writes at the end of the write buffer, which holds the end of the active segment, as
        long as the record ends at or before :attr:`_fast_until`, set here to the first offset
        where the general path would do more: roll to a new segment, refill the mapping,
        commit the buffer first, or wake the committer (the record reaches the next
        ``COMMIT_CHUNK``). Anything else that changes what the short path relies on (the
        buffers, the segments, the dispatched offset, ``closed``, a direct write) sets
        :attr:`_fast_until` to -1 under the lock; the next append then takes the general path,
        which arms again."""
        seg = self._wb_seg
        self._fast_until = -1
        if (seg is None or seg is not self._queue.active or self._closed or self._writing
                or seg.write_pos != self._wb_base + self._wb_len
                or self._dispatched != seg.start + seg.write_pos):
            return
        self._fast_seg = seg
        start = self._fast_start = seg.start + self._wb_base
        next_chunk = (self._wb_len // COMMIT_CHUNK + 1) * COMMIT_CHUNK
        self._fast_until = min(seg.start + seg.size - END_FILE_MIN_BLANK_LENGTH, seg.start + seg.refill_pos,
                               start + WRITE_BUFFER_SIZE, start + next_chunk - 1)

    def _append_locked(self, msg: Message, tail: bytes, tags_code: int, body: bytes, size: int, crc: int,
                       born: bytes) -> PutResult:
        """:meth:`put`'s general path, for the record of ``msg`` encoded so far (hold the lock):
        roll, refill, commit or wake as needed, then arm the short path again. Raises what
        :meth:`put` answers for."""
        (topic, _, queue_id, flag, props, born_ts, _, sys_flag, reconsume_times, prepared_tx) = msg
        body_len = len(body)
        if size > self._max_record:  # (the short path's bound keeps larger records off it)
            raise MessageTooLargeError(size, self._max_record)
        if self._closed:
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
        ts = time_ns() // 1_000_000  # (inlined: every append through the mapping comes here)
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
            if cq_pos < index.fast_end:  # (as in put: appends through the mapping come here)
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
        if buffered:
            self._arm()
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
            if feed is not None:
                if not may_hold_keys(batch.tail):  # (one tail for every record of the batch)
                    feed.add_keyless(first, end)
                elif messages is not None and len(messages) == n:
                    feed.add_messages(first, end, physical_offsets, ts, messages)
        queue_offsets = range(first_queue_offset, first_queue_offset + n)
        return _new_result(PutResult, (PutMessageStatus.PUT_OK, queue_offsets, physical_offsets, total, end,
                                       ts, self.store_host, ""))

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
        self._fast_until = -1  # (the next single append arms the short path again)
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
                self._fast_until = -1
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
                    self._fast_until = -1
                    self._file_end = ALL_IN_FILE
                    seg.file_pos = ALL_IN_FILE
                    self._wb_seg = None
        return n

    def _commit_locked(self) -> None:
        """Write everything buffered to the file now, waiting for a commit in flight (hold the
        lock: before a roll, a truncation, a slave append, closing)."""
        self._fast_until = -1
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
            if self._write_thread is not None:
                self._write_thread.shutdown()  # (idle: nothing is queued)
                self._write_thread = None
            self._commit_locked()
            self._queue.close()
            if self._stage is not None:
                self._stage.close()
                self._stage = None
            if self._ring is not None:
                with contextlib.suppress(BufferError):  # (a view still referenced somewhere)
                    self._ring.close()
                self._ring = None


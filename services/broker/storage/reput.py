"""The commit log's dispatcher (the reput): :class:`Reput`, a base of
:class:`~services.broker.storage.commitlog.CommitLog`.

It validates whole records past :attr:`dispatched_offset` (body CRC included) and indexes them
in their consume queues, a batch at a time (:mod:`.dispatch`) outside the lock where it can,
one record at a time under it otherwise; an invalid record stops it for good.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pocketmq.wire.record import header_format
from services.broker.storage.dispatch import Scanner
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_SIZE,
    MAGIC_CODE,
    MIN_RECORD_SIZE,
    PREFIX,
    PROPERTY_TAGS,
    TRANSACTION_PREPARED_TYPE,
    U16,
    body_crc,
    property_value,
    tag_hash_code,
)
from services.broker.storage.segment import Segment
from services.broker.storage.segment_queue import SegmentQueue

if TYPE_CHECKING:
    from services.broker.storage.commitlog import Dispatcher, QueueIndex

log = logging.getLogger(__name__)

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
_TOPICS_MAX = 8192


class Reput:
    """The dispatching half of the commit log (its state is set up by ``CommitLog.__init__``)."""

    # -- the dispatcher's state --
    _dispatcher: Dispatcher
    _find: Callable[[tuple[str, int]], QueueIndex | None]
    _create: Callable[[str, int], QueueIndex]
    _dispatched: int
    _dispatch_error: tuple[int, str] | None
    _dispatch_cond: threading.Condition
    _dispatch_waiters: int
    _topic_names: dict[bytes, str]
    _scanner_: Scanner | None
    _scan_buf: memoryview
    _reput_buf: memoryview
    on_dispatched: Callable[[int], None] | None
    reput_check_crc: bool
    # -- the commit log's, used here --
    lock: threading.Lock
    closed: bool
    _queue: SegmentQueue
    _fast_until: int
    _generation: int
    _last_store_ts: int
    _ring_restarts: int

    if TYPE_CHECKING:
        def _read_undispatched(self, seg: Segment, offset: int, buf: memoryview, size: int) -> memoryview:
            ...

    def set_dispatched_offset(self, offset: int) -> None:
        """Where :meth:`dispatch_pending` resumes (recovery; a record boundary)."""
        with self.lock:
            self._dispatched = offset
            self._fast_until = -1  # (see CommitLog._arm)

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

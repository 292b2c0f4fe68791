"""Consume queues: per (topic, queue id) index of the commit log (RocketMQ's ``ConsumeQueue``).

Entry ``n`` of a queue is the message with queue offset ``n``: 20 bytes at byte position
``n * 20``, commit log offset 8 · size 4 · tag hash code 8 (big-endian). Files hold
``mappedFileSizeConsumeQueue / 20`` entries (300 000) and live in
``<storePathRootDir>/consumequeue/<topic>/<queueId>/<20-digit byte offset>``. Lookup by queue
offset is arithmetic.

A queue whose first message does not have queue offset 0 (a slave that started from the
master's last segment, a queue rebuilt after old commit log files were deleted) starts its first
file with filler entries (offset 0, size 0x7fffffff, tag 0, as RocketMQ's ``fillPreBlank``).
Unwritten entries are zero, so the write position is the first entry of size 0.

Entries are written by the commit log's dispatch, under the commit log lock; readers only
``hold`` the segment they read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from services.broker.storage.config import CQ_ENTRY_SIZE
from services.broker.storage.segment import Segment, SegmentError, SyncFn, default_sync, fsync_dir
from services.broker.storage.segment_queue import SegmentQueue

if TYPE_CHECKING:
    from services.broker.storage.dispatch import DispatchBatch, I64Array

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
_PACK_ENTRY = ENTRY.pack_into
#: Bytes of zeros written through the file after an entry that touches a new page (16 pages).
TOUCH_AHEAD = 64 * 1024
#: Size field of a filler entry.
FILLER_SIZE = 0x7FFFFFFF
FILLER_ENTRY = ENTRY.pack(0, FILLER_SIZE, 0)
_SIZE_FIELD = struct.Struct(">i")
_SIZE_AT = 8

#: One consume queue entry: (commit log offset, size, tag hash code).
Entry = tuple[int, int, int]
#: Bytes a new queue's in-memory first file starts with (it doubles as it fills).
MEMORY_FILE_MIN = 64 * CQ_ENTRY_SIZE


class MemoryFile:
    """A new queue's first file while it is only in memory: ``write_pos`` bytes of entries
    in ``mm`` from the queue's byte ``start`` on, with room for more (``mm`` doubles when it
    fills, up to ``file_size``), so the commit log writes entries into it the way it writes
    them into a file's mapping (:attr:`ConsumeQueue.fast_seg`)."""

    __slots__ = ("file_size", "mm", "start", "write_pos")

    def __init__(self, start: int, data: bytes, file_size: int) -> None:
        self.start = start
        self.file_size = file_size
        self.write_pos = len(data)
        self.mm = bytearray(max(min(MEMORY_FILE_MIN, file_size), min(2 * len(data), file_size), len(data)))
        self.mm[:len(data)] = data

    def add(self, data: bytes) -> None:
        """Append ``data`` (the caller checked that the file holds it)."""
        pos = self.write_pos
        end = pos + len(data)
        if end > len(self.mm):
            self.mm += bytes(max(end, min(2 * len(self.mm), self.file_size)) - len(self.mm))
        self.mm[pos:end] = data
        self.write_pos = end

    def entries(self, rel: int = 0, end: int | None = None) -> bytes:
        """The entries' bytes from ``rel`` (to ``end``, at most ``write_pos``)."""
        stop = self.write_pos if end is None else min(end, self.write_pos)
        return bytes(self.mm[rel:stop])


class ConsumeQueue:
    """One (topic, queue id) index. ``max_offset`` is the queue offset the next message gets
    (the commit log reads it to assign queue offsets); ``min_offset`` the first readable one."""

    #: The active file (or the in-memory first file) while :attr:`fast_end` is set (read
    #: only then).
    fast_seg: Segment | MemoryFile

    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int,
                 *, sync: SyncFn = default_sync, defer_dir_sync: Callable[[str], None] | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self._file_size = file_size
        self._queue = SegmentQueue(directory, file_size, sync=sync, defer_dir_sync=defer_dir_sync,
                                   keep_fd=False)
        #: The file being written (the last one), cached for the append path.
        self._active: Segment | None = None
        #: A new queue's first file, still in memory, until :meth:`materialize` writes the
        #: file, off the send path.
        self._pending: MemoryFile | None = None
        #: Set by :meth:`destroy` (a materialization racing a topic deletion gives up).
        self._destroyed = False
        self.min_offset = 0
        self.max_offset = 0
        #: Commit log offset just past the last record indexed (0 = none).
        self.last_physical_end = 0
        #: Byte position up to which the active file's pages were written through the file
        #: (an entry and zeros after it), so writing entries there through the mapping takes
        #: no expensive first-touch fault (0: none known).
        self._touched = 0
        #: The common case of :meth:`put`, which the commit log's single append inlines: the
        #: entry of ``max_offset`` goes straight into the active file's mapping (``_active``)
        #: when its byte position in the queue is below ``fast_end``, i.e. inside the active
        #: file and its pages already touched (``fast_seg`` is that file), or into the
        #: in-memory first file while it has room (``fast_seg`` is then that). Set by :meth:`put`'s
        #: general path; 0 (never) after anything else changes the files, the write position or
        #: the first file.
        self.fast_end = 0

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic!r}, {self.queue_id}, [{self.min_offset}, {self.max_offset}))"

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._queue.segments

    def load(self) -> None:
        """Map the files and find the write position (first zero-size entry of the last file)."""
        self._queue.load()
        last = self._active = self._queue.last
        self._touched = self.fast_end = 0
        if last is None:
            return
        lo, hi = 0, self._file_size // CQ_ENTRY_SIZE
        while lo < hi:  # first entry index with size 0
            mid = (lo + hi) // 2
            if _SIZE_FIELD.unpack_from(last.mm, mid * CQ_ENTRY_SIZE + _SIZE_AT)[0] != 0:
                lo = mid + 1
            else:
                hi = mid
        last.write_pos = last.flushed_pos = lo * CQ_ENTRY_SIZE
        self.max_offset = (last.start + last.write_pos) // CQ_ENTRY_SIZE
        first = self._queue.first
        assert first is not None
        self.min_offset = first.start // CQ_ENTRY_SIZE
        self._refresh_last_physical_end()

    def _raw_entry(self, index: int) -> Entry | None:
        """Entry number ``index`` without holding (callers hold the commit log lock)."""
        pos = index * CQ_ENTRY_SIZE
        pending = self._pending
        if pending is not None:
            rel = pos - pending.start
            if rel >= 0 and rel + CQ_ENTRY_SIZE <= pending.write_pos:
                found: Entry = ENTRY.unpack_from(pending.mm, rel)
                return found
            return None
        seg = self._queue.find(pos)
        if seg is None:
            return None
        entry: Entry = ENTRY.unpack_from(seg.mm, pos - seg.start)
        return entry

    def _refresh_last_physical_end(self) -> None:
        self.last_physical_end = 0
        if self.max_offset > self.min_offset:
            entry = self._raw_entry(self.max_offset - 1)
            if entry is not None and entry[1] != FILLER_SIZE:
                self.last_physical_end = entry[0] + entry[1]

    # -- writing (under the commit log lock) -----------------------------------------------------

    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Index one record. An entry that already exists (re-dispatch after recovery) is left
        as is and False is returned; a gap is filled with filler entries."""
        pos = queue_offset * CQ_ENTRY_SIZE
        if pos < self.fast_end and queue_offset == self.max_offset:  # (see fast_end)
            fast = self.fast_seg
            rel = pos - fast.start
            _PACK_ENTRY(fast.mm, rel, physical_offset, size, tags_code)
            fast.write_pos = rel + CQ_ENTRY_SIZE
            self.max_offset = queue_offset + 1
            self.last_physical_end = physical_offset + size
            return True
        self.fast_end = 0
        pending = self._pending
        if pending is not None:
            if queue_offset == self.max_offset and pending.write_pos + CQ_ENTRY_SIZE <= self._file_size:
                pending.add(ENTRY.pack(physical_offset, size, tags_code))
                self.max_offset = queue_offset + 1
                self.last_physical_end = physical_offset + size
                self._fast_to_memory(pending)
                return True
            self._materialize_locked()  # a gap or a full first file: the file now
        elif self._active is None and queue_offset == self.max_offset and self._queue.is_empty():
            # A new queue: its file is created by materialize() (the next consume queue
            # flush), not here on the send path (a directory and a file: about 0.5 ms).
            start = queue_offset * CQ_ENTRY_SIZE
            start -= start % self._file_size
            fill = (queue_offset * CQ_ENTRY_SIZE - start) // CQ_ENTRY_SIZE
            entry = ENTRY.pack(physical_offset, size, tags_code)
            pending = self._pending = MemoryFile(start, FILLER_ENTRY * fill + entry, self._file_size)
            self.min_offset = queue_offset
            self.max_offset = queue_offset + 1
            self.last_physical_end = physical_offset + size
            self._fast_to_memory(pending)
            return True
        if queue_offset != self.max_offset:
            if queue_offset < self.max_offset:
                return False
            self._fill_to(queue_offset)
        seg = self._active
        if seg is None or pos - seg.start >= self._file_size:
            if self._queue.is_empty():
                self._fill_to(queue_offset)
                seg = self._active
                assert seg is not None
            else:
                seg = self._active = self._queue.create(pos)
        rel = pos - seg.start
        if pos + CQ_ENTRY_SIZE > self._touched:
            # The entry is the first to touch a page: write it through the file, not the mapping
            # (see Segment.write_through), with zeros for the next pages (see _touched).
            ahead = min(TOUCH_AHEAD, self._file_size - rel - CQ_ENTRY_SIZE)
            seg.write_through(rel, ENTRY.pack(physical_offset, size, tags_code) + bytes(ahead))
            self._touched = pos + CQ_ENTRY_SIZE + ahead
        else:
            _PACK_ENTRY(seg.mm, rel, physical_offset, size, tags_code)
        seg.write_pos = rel + CQ_ENTRY_SIZE
        self.max_offset = queue_offset + 1
        self.last_physical_end = physical_offset + size
        self.fast_seg = seg
        self.fast_end = min(self._touched, seg.start + self._file_size) - CQ_ENTRY_SIZE + 1
        return True

    def _fast_to_memory(self, pending: MemoryFile) -> None:
        """The next entries go straight into the in-memory first file while it has room."""
        self.fast_seg = pending
        self.fast_end = pending.start + len(pending.mm) - CQ_ENTRY_SIZE + 1

    def put_many(self, queue_offsets: I64Array, physical_offsets: I64Array, sizes: I64Array,
                 tags_codes: I64Array) -> int:
        """Index records in commit log order with one write per file touched (entries built as
        one array). Same effect as :meth:`put` per record, which it falls back to unless the
        queue offsets are consecutive from :attr:`max_offset`. Returns the entries written."""
        from services.broker.storage import dispatch  # (loaded already: there is a batch)

        n = len(queue_offsets)
        if not n:
            return 0
        first = int(queue_offsets[0])
        if first != self.max_offset or not dispatch.consecutive(queue_offsets):
            # Re-dispatch after recovery, or a gap: one by one.
            return sum(self.put(int(q), int(p), int(s), int(t)) for q, p, s, t in zip(
                queue_offsets.tolist(), physical_offsets.tolist(), sizes.tolist(), tags_codes.tolist(),
                strict=True))
        # (the queue's in-memory first file included: put_run appends to it)
        self.put_run(first, dispatch.queue_entries(physical_offsets, sizes, tags_codes),
                     int(physical_offsets[-1] + sizes[-1]))
        return n

    def put_run(self, queue_offset: int, entries: bytes, physical_end: int) -> None:
        """Index the records of one append (a master's batch): ``entries`` are their entries
        back to back, for the queue offsets from ``queue_offset``, which is :attr:`max_offset`
        (the commit log assigned them under its lock), the last record ending at commit log
        offset ``physical_end``. Same effect as :meth:`put` per record, with one write."""
        if queue_offset != self.max_offset:
            raise ValueError(f"queue offset {queue_offset} does not continue {self!r} at {self.max_offset}")
        n = len(entries) // CQ_ENTRY_SIZE
        if self._pending is None and self._active is None:
            # The queue's first entry makes its in-memory first file (or its file): put() does.
            physical_offset, size, tags_code = ENTRY.unpack_from(entries)
            self.put(queue_offset, physical_offset, size, tags_code)
            if n == 1:
                return
            entries = entries[CQ_ENTRY_SIZE:]
            queue_offset += 1
            n -= 1
        pending = self._pending
        if pending is not None:
            if pending.write_pos + len(entries) <= self._file_size:
                pending.add(entries)
                self.max_offset = queue_offset + n
                self.last_physical_end = physical_end
                return
            self._materialize_locked()  # the first file fills up: the file now
        self._write_run(queue_offset * CQ_ENTRY_SIZE, entries)
        self.max_offset = queue_offset + n
        self.last_physical_end = physical_end

    def _write_run(self, pos: int, entries: bytes) -> None:
        """Write ``entries`` at byte position ``pos`` of the queue (its end), one write per file
        touched (hold the commit log lock; the queue has a file)."""
        self.fast_end = 0
        data = memoryview(entries)
        done = 0
        while done < len(data):
            seg = self._active
            assert seg is not None
            if pos - seg.start >= self._file_size:
                seg = self._active = self._queue.create(pos)
            rel = pos - seg.start
            chunk = data[done:done + min(len(data) - done, self._file_size - rel)]
            if pos + len(chunk) > self._touched:  # touches a new page (see put)
                ahead = min(TOUCH_AHEAD, self._file_size - rel - len(chunk))
                seg.write_through(rel, bytes(chunk) + bytes(ahead))
                self._touched = pos + len(chunk) + ahead
            else:
                seg.mm[rel:rel + len(chunk)] = chunk
            seg.write_pos = rel + len(chunk)
            pos += len(chunk)
            done += len(chunk)

    def _fill_to(self, queue_offset: int) -> None:
        self.fast_end = 0
        pos = queue_offset * CQ_ENTRY_SIZE
        if self._queue.is_empty():
            start = pos - pos % self._file_size
            seg = self._active = self._queue.create(start)
            if pos > start:
                seg.append(FILLER_ENTRY * ((pos - start) // CQ_ENTRY_SIZE))
            self.min_offset = self.max_offset = queue_offset
            return
        log.warning("consume queue %s-%d: gap from offset %d to %d filled with filler entries",
                    self.topic, self.queue_id, self.max_offset, queue_offset)
        while self.max_offset < queue_offset:
            last = self._queue.last
            assert last is not None
            seg = self._queue.create(last.end) if last.write_pos >= last.size else last
            self._active = seg
            n = min((seg.size - seg.write_pos) // CQ_ENTRY_SIZE, queue_offset - self.max_offset)
            seg.append(FILLER_ENTRY * n)
            self.max_offset += n

    @property
    def pending(self) -> bool:
        """True while the first file's entries are only in memory."""
        return self._pending is not None

    def materialize(self, lock: contextlib.AbstractContextManager[object]) -> None:
        """Write a new queue's first file from its in-memory entries: the file (and its
        directories) is created without ``lock`` (the commit log lock, under which entries are
        added); the entries are written into it and it takes over under the lock."""
        pending = self._pending
        if pending is None:
            return
        try:
            seg = self._queue.create(pending.start)
        except SegmentError:  # put() created it meanwhile, or it cannot be created now
            with lock:
                if self._pending is not None and not self._queue.is_empty():
                    self._materialize_locked()
            return
        with lock:
            if self._destroyed:  # the topic was deleted meanwhile: leave nothing behind
                self._queue.destroy()
                for directory in (self.directory, os.path.dirname(self.directory)):
                    with contextlib.suppress(OSError):
                        os.rmdir(directory)
                return
            if self._pending is not None:
                self._adopt(seg)

    def _materialize_locked(self) -> None:
        """:meth:`materialize` on the append path (the caller holds the commit log lock)."""
        pending = self._pending
        if pending is None:
            return
        seg = self._queue.last
        if seg is None or seg.start != pending.start:
            try:
                seg = self._queue.create(pending.start)
            except SegmentError:
                seg = self._queue.last  # materialize() was creating it
                if seg is None or seg.start != pending.start:
                    raise
        self._adopt(seg)

    def _adopt(self, seg: Segment) -> None:
        """Make ``seg`` (new, empty) the queue's file, holding the in-memory entries (hold the
        commit log lock)."""
        pending = self._pending
        assert pending is not None
        seg.write_through(0, pending.entries())  # (no write fault on the new sparse file)
        seg.write_pos = pending.write_pos
        self._active = seg
        self.fast_end = 0
        # Readers that took the buffer before still see the same entries in it.
        self._pending = None

    def truncate_dirty(self, physical_offset: int) -> None:
        """Drop entries of records that do not end at or before ``physical_offset``."""
        self.fast_end = 0
        pending = self._pending
        if pending is not None:
            if self.last_physical_end <= physical_offset:
                return

            def dirty(index: int) -> bool:
                entry = self._raw_entry(index)
                return entry is not None and entry[1] != FILLER_SIZE and entry[0] + entry[1] > physical_offset

            cut = _search(pending.start // CQ_ENTRY_SIZE, self.max_offset, dirty)
            # (a copy: readers that took the old one still see what they read in it)
            self._pending = MemoryFile(pending.start, pending.entries(0, cut * CQ_ENTRY_SIZE - pending.start),
                                       self._file_size)
            self.max_offset = cut
            self.min_offset = min(self.min_offset, cut)
            self._refresh_last_physical_end()
            return
        first = self._queue.first
        if first is None or self.last_physical_end <= physical_offset:
            return

        def beyond(index: int) -> bool:
            entry = self._raw_entry(index)
            return entry is not None and entry[1] != FILLER_SIZE and entry[0] + entry[1] > physical_offset

        cut = _search(first.start // CQ_ENTRY_SIZE, self.max_offset, beyond)
        self._queue.truncate(cut * CQ_ENTRY_SIZE)
        self._active = self._queue.last
        self._touched = 0
        self.max_offset = cut
        self.min_offset = min(self.min_offset, cut)
        self._refresh_last_physical_end()

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Move the min offset to the first real entry whose record is still in the commit log."""
        first = self._queue.first
        pending = self._pending
        if first is not None:
            start = first.start
        elif pending is not None:
            start = pending.start
        else:
            self.min_offset = self.max_offset
            return

        def live(index: int) -> bool:
            entry = self._raw_entry(index)
            return entry is not None and entry[1] != FILLER_SIZE and entry[0] >= commit_log_min

        lo = max(start // CQ_ENTRY_SIZE, self.min_offset)
        self.min_offset = _search(lo, self.max_offset, live)

    def delete_expired(self, commit_log_min: int) -> int:
        """Delete files whose every record is below the commit log's min offset (never the last
        file). Returns the number deleted."""
        def expired(seg: Segment) -> bool:
            entry: Entry = ENTRY.unpack_from(seg.mm, seg.size - CQ_ENTRY_SIZE)
            return entry[1] == FILLER_SIZE or entry[0] < commit_log_min

        deleted = self._queue.delete_head(expired)
        self.correct_min_offset(commit_log_min)
        return len(deleted)

    # -- reading -------------------------------------------------------------------------------

    def get(self, queue_offset: int) -> Entry | None:
        """The entry of ``queue_offset`` (None if out of range, or a filler)."""
        entries = self.read(queue_offset, 1)
        if not entries or entries[0][1] == FILLER_SIZE:
            return None
        return entries[0]

    def read(self, queue_offset: int, max_count: int) -> list[Entry]:
        """Up to ``max_count`` consecutive entries from ``queue_offset``, from one file (so
        possibly fewer; call again from the next offset). Fillers are included."""
        count = min(max_count, self.max_offset - queue_offset)
        if queue_offset < self.min_offset or count <= 0:
            return []
        pos = queue_offset * CQ_ENTRY_SIZE
        pending = self._pending  # (taken before the files: materialize() adds the file first)
        if pending is not None:
            rel = pos - pending.start  # >= 0: queue_offset >= min_offset
            return list(ENTRY.iter_unpack(pending.mm[rel:rel + count * CQ_ENTRY_SIZE]))
        seg = self._queue.find(pos)
        if seg is None or not seg.hold():
            return []
        try:
            rel = pos - seg.start
            data = seg.mm[rel:min(rel + count * CQ_ENTRY_SIZE, seg.size)]
        finally:
            seg.release()
        return list(ENTRY.iter_unpack(data))

    # -- maintenance ---------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        return self._queue.flush(least_pages)

    def close(self) -> None:
        self._queue.close()
        self._active = None
        self.fast_end = 0

    def destroy(self) -> None:
        self._destroyed = True
        self._pending = None
        self._queue.destroy()
        self._active = None
        self.fast_end = 0
        self.min_offset = self.max_offset = 0
        self.last_physical_end = 0


def _search(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """First index in ``[lo, hi)`` where the monotone ``pred`` holds (else ``hi``)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class ConsumeQueueStore:
    """All consume queues of a store; the commit log dispatches records to it.

    Loaded lazily (``load(lazy=True)``, when the store's checkpoint gives the reput position):
    start-up only lists the queue directories, and a queue's files are opened on its first use
    (a read, or a record dispatched to it). A queue opened late gets the truncations and the
    commit log min offset it missed (:attr:`truncated_to`, :attr:`log_min_offset`), so it
    answers as if it had been opened at start. New files' directory entries are made durable
    by :meth:`flush` (before the checkpoint that relies on them), not on the send path.
    """

    def __init__(self, root_dir: str, file_size: int, *, sync: SyncFn = default_sync) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self._sync = sync
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: Queues found on disk and not opened yet: key -> directory.
        self._unopened: dict[tuple[str, int], str] = {}
        #: Serialises opening a queue with store-wide truncation (lock order: the commit log
        #: lock, then this one).
        self._open_lock = threading.Lock()
        #: Lowest commit log offset queues were truncated to since start (None: never); a queue
        #: opened late is cut back to it.
        self.truncated_to: int | None = None
        #: The commit log's current min offset (set by the store).
        self.log_min_offset: Callable[[], int] = lambda: 0
        #: Directories whose new entries still need an fsync (see :meth:`flush`).
        self._dirs_to_sync: set[str] = set()
        self._dirs_lock = threading.Lock()
        #: ``find((topic, queue_id))`` -> the open queue or None (the dict's own ``get``: the
        #: append path calls it once per message, then :meth:`create` when it gets None).
        self.find: Callable[[tuple[str, int]], ConsumeQueue | None] = self._queues.get
        #: The lock entries are added under (the commit log's; set by the store).
        self.append_lock: contextlib.AbstractContextManager[object] = threading.Lock()
        #: Called with each batch after :meth:`dispatch_batch` (the message index's hook).
        self.batch_listener: Callable[[DispatchBatch], None] | None = None

    def _path(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.root_dir, topic, str(queue_id))

    def _new_queue(self, topic: str, queue_id: int, directory: str) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, directory, self.file_size, sync=self._sync,
                            defer_dir_sync=self._defer_dir_sync)

    def _defer_dir_sync(self, directory: str) -> None:
        # The queue directory holds the new file; its parents may be new too.
        topic_dir = os.path.dirname(directory)
        with self._dirs_lock:
            self._dirs_to_sync.update((directory, topic_dir, os.path.dirname(topic_dir)))

    def load(self, *, lazy: bool = False) -> None:
        """Find the queues on disk; open them all now, or (``lazy``) on first use."""
        if not os.path.isdir(self.root_dir):
            return
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                if not name.isdigit():
                    continue
                directory = os.path.join(topic_dir, name)
                if lazy:
                    self._unopened[(topic, int(name))] = directory
                    continue
                cq = self._new_queue(topic, int(name), directory)
                cq.load()
                self._queues[(topic, int(name))] = cq

    def _open(self, key: tuple[str, int]) -> ConsumeQueue | None:
        """Open a queue found at load (None if there is no such queue)."""
        with self._open_lock:
            cq = self._queues.get(key)
            if cq is not None:
                return cq
            directory = self._unopened.get(key)
            if directory is None:
                return None
            cq = self._new_queue(key[0], key[1], directory)
            cq.load()
            if self.truncated_to is not None:
                cq.truncate_dirty(self.truncated_to)
            cq.correct_min_offset(self.log_min_offset())
            self._queues[key] = cq
            del self._unopened[key]
            return cq

    @property
    def unopened_count(self) -> int:
        return len(self._unopened)

    # -- lookup --------------------------------------------------------------------------------

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None and key in self._unopened:
            return self._open(key)
        return cq

    def queues(self) -> list[ConsumeQueue]:
        """The open queues."""
        return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for cq in self.queues():
            if cq.max_offset or cq.segments:  # not a queue created for a refused message
                found.setdefault(cq.topic, []).append(cq.queue_id)
        for topic, queue_id in list(self._unopened):
            found.setdefault(topic, []).append(queue_id)
        return {topic: sorted(ids) for topic, ids in sorted(found.items())}

    # -- the commit log's interface (called under the commit log lock) ------------------------

    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue id), opened, or created (empty, no file yet) if needed."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = self._open(key) if key in self._unopened else None
            if cq is None:
                cq = self._queues[key] = self._new_queue(topic, queue_id, self._path(topic, queue_id))
        return cq

    def dispatch_batch(self, batch: DispatchBatch) -> None:
        """Index a batch of records (see :mod:`services.broker.storage.dispatch`): one
        :meth:`ConsumeQueue.put_many` per (topic, queue id), each in commit log order."""
        for topic, queue_id, rows in batch.groups():
            cq = self.find((topic, queue_id)) or self.create(topic, queue_id)
            cq.put_many(batch.queue_offsets[rows], batch.physical_offsets[rows], batch.sizes[rows],
                        batch.tags_codes[rows])
        if self.batch_listener is not None:
            self.batch_listener(batch)

    def truncate_dirty(self, physical_offset: int) -> None:
        with self._open_lock:
            if self._unopened and (self.truncated_to is None or physical_offset < self.truncated_to):
                self.truncated_to = physical_offset
            for cq in self.queues():
                cq.truncate_dirty(physical_offset)

    def max_physical_end(self) -> int:
        """Commit log offset past the last record any open queue indexes (0 if none)."""
        return max((cq.last_physical_end for cq in self.queues()), default=0)

    def correct_min_offsets(self, commit_log_min: int) -> None:
        for cq in self.queues():
            cq.correct_min_offset(commit_log_min)

    def delete_expired(self, commit_log_min: int, open_more: int = 16) -> int:
        """Delete expired files of the open queues; open up to ``open_more`` unopened queues
        first, so every queue is visited in time."""
        for key in list(self._unopened)[:open_more]:
            self._open(key)
        return sum(cq.delete_expired(commit_log_min) for cq in self.queues())

    def delete_topic(self, topic: str) -> int:
        """Delete every queue of ``topic`` (files included). Returns how many."""
        with self._open_lock:
            unopened = [key for key in self._unopened if key[0] == topic]
            for key in unopened:
                del self._unopened[key]
        doomed = [key for key in list(self._queues) if key[0] == topic]
        for key in doomed:
            self._queues.pop(key).destroy()
        shutil.rmtree(os.path.join(self.root_dir, topic), ignore_errors=True)
        return len(doomed) + len(unopened)

    # -- maintenance ---------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> None:
        """Write the files of new queues (see :meth:`ConsumeQueue.materialize`), flush the open
        queues and make new files' directory entries durable."""
        for cq in self.queues():
            if cq.pending:
                cq.materialize(self.append_lock)
            cq.flush(least_pages)
        with self._dirs_lock:
            dirs, self._dirs_to_sync = self._dirs_to_sync, set()
        for directory in sorted(dirs, key=len, reverse=True):
            with contextlib.suppress(FileNotFoundError):  # deleted since (its topic was)
                fsync_dir(directory)

    def close(self) -> None:
        for cq in self.queues():
            cq.close()
        self._queues.clear()
        self._unopened.clear()

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

import logging
import os
import shutil
import struct
from collections.abc import Callable

from services.broker.storage.config import CQ_ENTRY_SIZE
from services.broker.storage.segment import Segment, SyncFn, default_sync
from services.broker.storage.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
#: Size field of a filler entry.
FILLER_SIZE = 0x7FFFFFFF
FILLER_ENTRY = ENTRY.pack(0, FILLER_SIZE, 0)
_SIZE_FIELD = struct.Struct(">i")
_SIZE_AT = 8

#: One consume queue entry: (commit log offset, size, tag hash code).
Entry = tuple[int, int, int]


class ConsumeQueue:
    """One (topic, queue id) index. ``max_offset`` is the queue offset the next message gets
    (the commit log reads it to assign queue offsets); ``min_offset`` the first readable one."""

    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int,
                 *, sync: SyncFn = default_sync) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self._file_size = file_size
        self._queue = SegmentQueue(directory, file_size, sync=sync)
        #: The file being written (the last one), cached for the append path.
        self._active: Segment | None = None
        self.min_offset = 0
        self.max_offset = 0
        #: Commit log offset just past the last record indexed (0 = none).
        self.last_physical_end = 0

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic!r}, {self.queue_id}, [{self.min_offset}, {self.max_offset}))"

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._queue.segments

    def load(self) -> None:
        """Map the files and find the write position (first zero-size entry of the last file)."""
        self._queue.load()
        last = self._active = self._queue.last
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
        if queue_offset != self.max_offset:
            if queue_offset < self.max_offset:
                return False
            self._fill_to(queue_offset)
        pos = queue_offset * CQ_ENTRY_SIZE
        seg = self._active
        if seg is None or pos - seg.start >= self._file_size:
            if self._queue.is_empty():
                self._fill_to(queue_offset)
                seg = self._active
                assert seg is not None
            else:
                seg = self._active = self._queue.create(pos)
        rel = pos - seg.start
        ENTRY.pack_into(seg.mm, rel, physical_offset, size, tags_code)
        seg.write_pos = rel + CQ_ENTRY_SIZE
        self.max_offset = queue_offset + 1
        self.last_physical_end = physical_offset + size
        return True

    def _fill_to(self, queue_offset: int) -> None:
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

    def truncate_dirty(self, physical_offset: int) -> None:
        """Drop entries of records that do not end at or before ``physical_offset``."""
        first = self._queue.first
        if first is None or self.last_physical_end <= physical_offset:
            return

        def beyond(index: int) -> bool:
            entry = self._raw_entry(index)
            return entry is not None and entry[1] != FILLER_SIZE and entry[0] + entry[1] > physical_offset

        cut = _search(first.start // CQ_ENTRY_SIZE, self.max_offset, beyond)
        self._queue.truncate(cut * CQ_ENTRY_SIZE)
        self._active = self._queue.last
        self.max_offset = cut
        self.min_offset = min(self.min_offset, cut)
        self._refresh_last_physical_end()

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Move the min offset to the first real entry whose record is still in the commit log."""
        first = self._queue.first
        if first is None:
            self.min_offset = self.max_offset
            return

        def live(index: int) -> bool:
            entry = self._raw_entry(index)
            return entry is not None and entry[1] != FILLER_SIZE and entry[0] >= commit_log_min

        lo = max(first.start // CQ_ENTRY_SIZE, self.min_offset)
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

    def destroy(self) -> None:
        self._queue.destroy()
        self._active = None
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
    """All consume queues of a store; the commit log dispatches records to it."""

    def __init__(self, root_dir: str, file_size: int, *, sync: SyncFn = default_sync) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self._sync = sync
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: ``find((topic, queue_id))`` -> the queue or None (the dict's own ``get``: the append
        #: path calls it once per message).
        self.find: Callable[[tuple[str, int]], ConsumeQueue | None] = self._queues.get

    def _path(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.root_dir, topic, str(queue_id))

    def load(self) -> None:
        if not os.path.isdir(self.root_dir):
            return
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                if not name.isdigit():
                    continue
                cq = ConsumeQueue(topic, int(name), os.path.join(topic_dir, name), self.file_size,
                                  sync=self._sync)
                cq.load()
                self._queues[(topic, int(name))] = cq

    # -- lookup --------------------------------------------------------------------------------

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for cq in self.queues():
            if cq.max_offset or cq.segments:  # not a queue created for a refused message
                found.setdefault(cq.topic, []).append(cq.queue_id)
        return {topic: sorted(ids) for topic, ids in sorted(found.items())}

    # -- the commit log's interface (called under the commit log lock) ------------------------

    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue id), created (empty, no file yet) if needed."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = self._queues[(topic, queue_id)] = ConsumeQueue(
                topic, queue_id, self._path(topic, queue_id), self.file_size, sync=self._sync)
        return cq

    def truncate_dirty(self, physical_offset: int) -> None:
        for cq in self.queues():
            cq.truncate_dirty(physical_offset)

    def max_physical_end(self) -> int:
        """Commit log offset past the last record any queue indexes (0 if none)."""
        return max((cq.last_physical_end for cq in self.queues()), default=0)

    def correct_min_offsets(self, commit_log_min: int) -> None:
        for cq in self.queues():
            cq.correct_min_offset(commit_log_min)

    def delete_expired(self, commit_log_min: int) -> int:
        return sum(cq.delete_expired(commit_log_min) for cq in self.queues())

    def delete_topic(self, topic: str) -> int:
        """Delete every queue of ``topic`` (files included). Returns how many."""
        doomed = [key for key in list(self._queues) if key[0] == topic]
        for key in doomed:
            self._queues.pop(key).destroy()
        shutil.rmtree(os.path.join(self.root_dir, topic), ignore_errors=True)
        return len(doomed)

    # -- maintenance ---------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> None:
        for cq in self.queues():
            cq.flush(least_pages)

    def close(self) -> None:
        for cq in self.queues():
            cq.close()
        self._queues.clear()

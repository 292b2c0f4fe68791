"""An ordered run of equal-size segments in one directory (RocketMQ's ``MappedFileQueue``).

Segment ``i`` covers ``[first.start + i * size, first.start + (i + 1) * size)``, so finding the
segment of an offset is arithmetic. The list is an immutable tuple replaced on every change
(roll, truncation, deletion): readers take a snapshot without locking; writers serialise on a
small lock. Used for the commit log (1 GiB segments) and for every consume queue (6 MB).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

from services.broker.storage.segment import (
    Segment,
    SegmentError,
    SyncFn,
    default_sync,
    fsync_dir,
    parse_segment_name,
    segment_name,
)

log = logging.getLogger(__name__)


class SegmentQueue:
    def __init__(self, directory: str, segment_size: int, *, sync: SyncFn = default_sync,
                 defer_dir_sync: Callable[[str], None] | None = None, keep_fd: bool = True) -> None:
        self.directory = directory
        #: Segments keep their file descriptor open (see Segment).
        self.keep_fd = keep_fd
        self.segment_size = segment_size
        self.sync = sync
        #: Given: a new segment's directory entry is made durable later by the owner (which
        #: must do it before it relies on the file being there after a crash) instead of by an
        #: ``fsync`` of the directory on the creating thread.
        self.defer_dir_sync = defer_dir_sync
        self._segments: tuple[Segment, ...] = ()
        #: The last segment (the one being written), or None; kept in step with the list.
        self.active: Segment | None = None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # flushes from different threads go one at a time
        #: Offset up to which data is known to be on disk.
        self.flushed_where = 0

    def __repr__(self) -> str:
        return f"SegmentQueue({self.directory!r}, {len(self._segments)} segments)"

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing segment files. Every segment is marked fully written and flushed;
        recovery then sets the real write position of the last one(s). Raises SegmentError if
        files are missing in the middle or have the wrong size."""
        if not os.path.isdir(self.directory):
            return
        starts = sorted(
            start for name in os.listdir(self.directory)
            if (start := parse_segment_name(name)) is not None
        )
        segments: list[Segment] = []
        try:
            for start in starts:
                if start % self.segment_size:
                    raise SegmentError(f"segment {segment_name(start)} in {self.directory} is not aligned "
                                       f"to the segment size {self.segment_size}")
                if segments and start != segments[-1].end:
                    raise SegmentError(f"segments of {self.directory} are not contiguous: "
                                       f"{segment_name(segments[-1].start)} then {segment_name(start)}")
                seg = Segment(os.path.join(self.directory, segment_name(start)), start, self.segment_size,
                              keep_fd=self.keep_fd)
                seg.write_pos = seg.flushed_pos = seg.populated_pos = self.segment_size
                segments.append(seg)
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        self._set_segments(tuple(segments))
        self.flushed_where = segments[-1].end if segments else 0

    # -- lookup --------------------------------------------------------------------------------

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._segments

    @property
    def first(self) -> Segment | None:
        segs = self._segments
        return segs[0] if segs else None

    @property
    def last(self) -> Segment | None:
        return self.active

    def _set_segments(self, segments: tuple[Segment, ...]) -> None:
        self._segments = segments
        self.active = segments[-1] if segments else None

    def is_empty(self) -> bool:
        return not self._segments

    @property
    def min_offset(self) -> int:
        segs = self._segments
        return segs[0].start if segs else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the written data (0 when there are no segments)."""
        segs = self._segments
        return segs[-1].start + segs[-1].write_pos if segs else 0

    def find(self, offset: int) -> Segment | None:
        """The segment containing ``offset``, or None."""
        segs = self._segments
        if not segs:
            return None
        index = (offset - segs[0].start) // self.segment_size
        if 0 <= index < len(segs):
            return segs[index]
        return None

    # -- growing -------------------------------------------------------------------------------

    def create(self, start: int) -> Segment:
        """Create and append a new segment starting at ``start`` (the end of the last segment,
        or any aligned offset if the queue is empty)."""
        with self._lock:
            segs = self._segments
            if segs and start != segs[-1].end:
                raise SegmentError(f"new segment at {start} does not follow {segs[-1]!r}")
            if start % self.segment_size:
                raise SegmentError(f"segment start {start} is not a multiple of {self.segment_size}")
            os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, segment_name(start))
            seg = Segment(path, start, self.segment_size, create=True, keep_fd=self.keep_fd)
            if self.defer_dir_sync is not None:
                self.defer_dir_sync(self.directory)
            else:
                try:
                    fsync_dir(self.directory)
                except OSError:
                    seg.destroy()
                    raise
            self._set_segments((*segs, seg))
            if not segs:
                self.flushed_where = start
            return seg

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """Flush from the flushed position onwards (crossing into later segments once earlier
        ones are complete). Returns the new flushed offset."""
        with self._flush_lock:
            segs = self._segments
            if not segs:
                return self.flushed_where
            where = max(self.flushed_where, segs[0].start)
            index = (where - segs[0].start) // self.segment_size
            while index < len(segs):
                seg = segs[index]
                pos = seg.flush(self.sync, least_pages)
                where = seg.start + pos
                if pos < seg.size:
                    break
                index += 1
            if where > self.flushed_where:
                self.flushed_where = where
            return self.flushed_where

    # -- shrinking -----------------------------------------------------------------------------

    def truncate(self, offset: int, *, sparse: bool = False) -> None:
        """Cut the queue back to ``offset``: later data is zeroed, later segments deleted.
        ``sparse`` zeroes by re-truncating the file (recovery only, see Segment)."""
        with self._lock:
            keep: list[Segment] = []
            for seg in self._segments:
                # A segment starting exactly at ``offset`` goes too, unless it is the first: an
                # empty first segment keeps max_offset == offset.
                if seg.start >= offset and not (seg.start == offset and not keep):
                    seg.destroy()
                    continue
                if offset < seg.end:
                    seg.truncate_to(offset - seg.start, sparse=sparse)
                keep.append(seg)
            self._set_segments(tuple(keep))
            self.flushed_where = min(self.flushed_where, offset)
        log.debug("truncated %s to %d", self.directory, offset)

    def delete_head(self, should_delete: Callable[[Segment], bool]) -> list[Segment]:
        """Delete segments from the oldest while ``should_delete`` says so. Never deletes the last
        segment nor one someone holds (stops there, so the queue stays contiguous)."""
        deleted: list[Segment] = []
        with self._lock:
            segs = list(self._segments)
            while len(segs) > 1 and not segs[0].is_held and should_delete(segs[0]):
                seg = segs.pop(0)
                seg.destroy()
                deleted.append(seg)
            self._set_segments(tuple(segs))
        if deleted:
            try:
                fsync_dir(self.directory)
            except OSError:
                log.warning("cannot fsync directory %s", self.directory)
        return deleted

    def destroy(self) -> None:
        """Delete every segment and the directory (if then empty)."""
        with self._lock:
            segs = self._segments
            self._set_segments(())
            for seg in segs:
                seg.destroy()
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)

    def close(self) -> None:
        with self._lock:
            segs = self._segments
            self._set_segments(())
            for seg in segs:
                seg.close()

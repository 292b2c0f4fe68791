"""The commit log's replicated appends: :class:`ReplicaAppends`, a base of
:class:`~services.broker.storage.commitlog.CommitLog`.

A slave appends the bytes its master replicates as they are (:meth:`ReplicaAppends.append_data`,
:meth:`~ReplicaAppends.queue_data`), bulk appends through the dispatch ring (the last replicated
bytes kept in memory for the reput), written direct where they can be, by a write thread of
their own while the next append is copied into the ring; with them, the page warming and
prefetching around the writer and the dispatcher.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import logging
import mmap
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from services.broker.storage import reput
from services.broker.storage.logerrors import (
    CorruptDataError,
    CreateSegmentError,
    OffsetMismatchError,
    StoreClosedError,
)
from services.broker.storage.record import ReadableBuffer
from services.broker.storage.reput import SCAN_BYTES
from services.broker.storage.segment import DIRECT_ALIGN, DIRECT_MIN, Segment
from services.broker.storage.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

#: Bytes per ``posix_fadvise`` call of :meth:`ReplicaAppends.warm_ahead`.
WARM_CHUNK = 4 * 1024 * 1024
#: At most this many bytes are populated (``madvise``) ahead of the writer per append: one call
#: mapping 4 MiB writable holds the writer (and the GIL) for ~10 ms; 256 KiB steps bound it to
#: well under a millisecond (the total work is the same).
POPULATE_STEP = 256 * 1024
#: Bytes per direct write of :meth:`ReplicaAppends.append_data` (the staging buffer's size).
DIRECT_STAGE = 2 * 1024 * 1024
#: Bytes :meth:`ReplicaAppends.prefetch_undispatched` keeps in the page cache past the dispatcher.
PREFETCH_SIZE = 4 * 1024 * 1024
#: The log is :meth:`~ReplicaAppends.receiving_in_bulk` for this long after an append of at least
#: ``DIRECT_MIN`` bytes (a slave catching up).
BULK_WINDOW_S = 0.05
#: A slave keeps the last this many replicated bytes in memory for its dispatcher.
DISPATCH_RING = 64 * 1024 * 1024
#: Pieces of at least this many bytes are copied into the dispatch ring with the GIL released
#: (``ctypes.memmove``: the dispatcher and the event loop run meanwhile).
NOGIL_COPY_MIN = 64 * 1024
#: A bulk append waits at most this long for the dispatcher to free ring space (then the ring
#: starts again past it, and the dispatcher reads the bytes in between from the file).
RING_WAIT_S = 0.5
#: :meth:`ReplicaAppends.queue_data` waits while this many bytes or more wait for the write thread.
QUEUED_MAX = 24 * 1024 * 1024
#: The write thread writes contiguous queued appends of one segment together, up to about this
#: many bytes per call.
WRITE_MAX = 16 * 1024 * 1024


class QueuedWrite(NamedTuple):
    """Ring bytes ``[start, end)`` of the log for the write thread, in ``seg``; ``done`` gets
    the log's max offset once they are in the file."""

    seg: Segment
    start: int
    end: int
    done: concurrent.futures.Future[int]


def _within_bulk_window(stamp: float) -> bool:
    """Whether the ``time.monotonic()`` ``stamp`` is less than :data:`BULK_WINDOW_S` ago."""
    return time.monotonic() - stamp < BULK_WINDOW_S


class ReplicaAppends:
    """The replicated-append half of the commit log (its state is set up by
    ``CommitLog.__init__``)."""

    # -- the replicated appends' state --
    _append_data_lock: threading.Lock
    _writing: bool
    _writer_busy: bool
    _writes_done: threading.Condition
    _queued: collections.deque[QueuedWrite]
    _queued_end: int
    _queued_bytes: int
    _write_thread: concurrent.futures.ThreadPoolExecutor | None
    _direct_write: bool
    _stage: mmap.mmap | None
    _prefetched: int
    _last_bulk_append: float
    _last_direct_append: float
    _populate_size: int
    _populate_write: bool
    _prefault_wanted: bool
    _prefault_ok: bool
    _warm_size: int
    warm_wakeup: Callable[[], None] | None
    reput_wakeup: Callable[[], None] | None
    _ring: mmap.mmap | None
    _ring_addr: int
    _ring_from: int
    _ring_end: int
    _ring_restarts: int
    # -- the dispatcher's (:class:`~services.broker.storage.reput.Reput`), used here --
    _dispatched: int
    _dispatch_error: tuple[int, str] | None
    _dispatch_cond: threading.Condition
    _dispatch_waiters: int
    # -- the commit log's, used here --
    lock: threading.Lock
    closed: bool
    _queue: SegmentQueue
    _segment_size: int
    _wb_seg: Segment | None
    _fast_until: int

    if TYPE_CHECKING:
        @property
        def max_offset(self) -> int:
            ...

        def truncate_locked(self, offset: int) -> None:
            ...

        def _commit_locked(self) -> None:
            ...

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
        return self.queue_data(start_offset, data).result()

    def queue_data(self, start_offset: int,
                   data: ReadableBuffer | Sequence[ReadableBuffer]) -> concurrent.futures.Future[int]:
        """:meth:`append_data`, except that a bulk append copied into the dispatch ring may be
        left for the write thread: the returned future then gets the new max offset once the
        bytes are in the file (or what the write raised), and the next call may already copy
        its bytes meanwhile. ``start_offset`` must equal where the queued appends end. The
        buffers may be reused as soon as this returns. At most :data:`QUEUED_MAX` bytes wait
        for the write thread (this waits for it)."""
        pieces = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
        with self._append_data_lock:
            if self._ring is not None and self.reput_wakeup is not None:
                total = sum(len(piece) for piece in pieces)
                if total >= DIRECT_MIN:  # (only bulk appends go through the ring)
                    self._await_dispatcher(start_offset + total)
            if self._queued_bytes >= QUEUED_MAX:
                with self._writes_done:
                    while self._queued_bytes >= QUEUED_MAX:
                        self._writes_done.wait()
            return self._append_data(start_offset, pieces)

    def ring_space(self, start_offset: int, size: int) -> list[memoryview] | None:
        """Where a bulk append of ``size`` bytes at ``start_offset`` (where the queued appends
        end) can be received in place: writable views of the dispatch ring (two where it
        wraps), to fill and then pass to :meth:`queue_received`, which appends them without
        copying. None when they cannot go there (not a bulk append, no direct writes or no
        dispatcher, a new segment, the dispatcher a ring behind after waiting for it at most
        :data:`RING_WAIT_S`, or an error to report): append them with :meth:`queue_data`
        then. Only the slave's one appending thread calls this; nothing else moves the ring
        meanwhile. The views are free to fill until the next append: the ring bytes they
        cover were read by the dispatcher and written to the file already."""
        end = start_offset + size
        if size < DIRECT_MIN or not self._direct_write or self.reput_wakeup is None:
            return None
        with self._append_data_lock:
            self._await_dispatcher(end)
            if self._queued_bytes >= QUEUED_MAX:
                with self._writes_done:
                    while self._queued_bytes >= QUEUED_MAX:
                        self._writes_done.wait()
            with self.lock:
                last = self._queue.last
                if (self.closed or self._dispatch_error is not None or last is None
                        or not last.start <= start_offset < end <= last.end):
                    return None
                with self._writes_done:
                    expected = self._queued_end if self._writing else last.start + last.write_pos
                if start_offset != expected:
                    raise OffsetMismatchError(start_offset, expected)
                if self._ring_admits(start_offset, end) is None:
                    return None
                return self._ring_views(start_offset, end)

    def queue_received(self, start_offset: int, size: int) -> concurrent.futures.Future[int]:
        """:meth:`queue_data` of the ``size`` bytes received into the views
        :meth:`ring_space` returned for them (nothing is copied)."""
        with self._append_data_lock:
            return self._append_data(start_offset, self._ring_views(start_offset, start_offset + size),
                                     received=True)

    def _append_data(self, start_offset: int, pieces: Sequence[ReadableBuffer],
                     received: bool = False) -> concurrent.futures.Future[int]:
        size = self._segment_size
        queued: QueuedWrite | None = None
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
            else:
                with self._writes_done:  # (the log ends where the queued writes end)
                    expected = self._queued_end if self._writing else last.start + last.write_pos
                if start_offset != expected:
                    raise OffsetMismatchError(start_offset, expected)
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
            # (a small append right after a bulk one goes there too: the ring stays contiguous)
            in_ring = ((bulk or (self._ring_end == start_offset and self._ring is not None
                                 and _within_bulk_window(self._last_bulk_append)))
                       and self._keep_for_dispatch(start_offset, pieces, end, received))
            if (in_ring and self._direct_write and len(runs) == 1 and last is not None
                    and start_offset < last.end):
                # The bytes are safe in the ring: the write thread writes them (below).
                queued = self._queue_write(last, start_offset, end)
                runs = []
            elif self._writing:  # (what is queued goes first)
                self.wait_writes()
            stage = self._staging() if self._direct_write and bulk and not in_ring else None
            direct = 0
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
        if queued is not None:
            return queued.done
        if runs:
            wakeup = self.reput_wakeup
            if wakeup is not None:
                wakeup()
            if warm and (wakeup := self.warm_wakeup) is not None:
                wakeup()
        done: concurrent.futures.Future[int] = concurrent.futures.Future()
        done.set_result(new_max)
        return done

    def _queue_write(self, seg: Segment, start: int, end: int) -> QueuedWrite:
        """Queue the write of ring bytes ``[start, end)`` of ``seg`` for the write thread (hold
        :attr:`lock`; :attr:`_writing` is set until every queued write is done)."""
        queued = QueuedWrite(seg, start, end, concurrent.futures.Future())
        self._fast_until = -1  # (no local append while it is written: see CommitLog._arm)
        with self._writes_done:
            self._queued.append(queued)
            self._queued_end = end
            self._queued_bytes += end - start
            self._writing = True
            if self._writer_busy:
                return queued  # (the write thread takes it after what it writes now)
            self._writer_busy = True
        if self._write_thread is None:
            self._write_thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="CommitLogWriter")
        self._write_thread.submit(self._write_queued)
        return queued

    def _write_queued(self) -> None:
        """On the write thread: write the queued ring bytes direct, oldest first, each time with
        the queued appends right after them in the same segment (up to :data:`WRITE_MAX`), until
        nothing is queued, without :attr:`lock`: meanwhile the next append is copied into the
        ring, the dispatcher indexes what came before and readers read. The segment's write
        position moves once the bytes are in the file, so no reader sees them earlier. A failed
        write fails every queued append after it too (none is written: the log stays without a
        hole)."""
        cond = self._writes_done
        while True:
            with cond:
                if not self._queued:
                    self._writer_busy = False
                    return
                batch = [self._queued.popleft()]
                while (self._queued and self._queued[0].seg is batch[0].seg
                       and self._queued[0].start == batch[-1].end
                       and batch[-1].end - batch[0].start < WRITE_MAX):
                    batch.append(self._queued.popleft())
            seg, start, end = batch[0].seg, batch[0].start, batch[-1].end
            error: BaseException | None = None
            try:
                if seg.write_at(start - seg.start, self._ring_views(start, end), aligned=True):
                    self._last_direct_append = self._last_bulk_append
            except BaseException as exc:  # (reported to whoever waits for these bytes)
                error = exc
            with cond:
                self._queued_bytes -= end - start
                if error is not None:
                    batch.extend(self._queued)
                    self._queued_bytes -= sum(queued.end - queued.start for queued in self._queued)
                    self._queued.clear()
                if not self._queued_bytes:
                    self._writing = False
                cond.notify_all()
            if error is not None:
                for queued in batch:
                    queued.done.set_exception(error)
                continue
            wakeup = self.reput_wakeup
            if wakeup is not None:
                wakeup()
            for queued in batch:
                queued.done.set_result(queued.end)

    def wait_writes(self) -> None:
        """Wait until the write thread wrote everything queued (hold :attr:`lock`: nothing is
        queued meanwhile)."""
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

    def _ring_admits(self, start: int, end: int) -> mmap.mmap | None:
        """The ring, if it may take ``[start, end)`` (hold the lock): the dispatcher is less
        than the ring's size behind ``end``; else None, and the ring starts again later. Maps
        the ring on first use."""
        if end - self._dispatched > DISPATCH_RING - SCAN_BYTES:
            self._ring_from = end  # too far behind: the ring starts again later
            return None
        if self._ring is None:
            self._ring = mmap.mmap(-1, DISPATCH_RING)
            self._ring_addr = ctypes.addressof(ctypes.c_char.from_buffer(self._ring))
            self._ring_from = start
        return self._ring

    def _keep_for_dispatch(self, start: int, pieces: Sequence[ReadableBuffer], end: int,
                           received: bool = False) -> bool:
        """Copy replicated bytes ``[start, end)`` into the dispatch ring (hold the lock; the
        slave's transient store), so the reput thread validates them from memory instead of
        reading back what went to the disk direct (see :meth:`_read_undispatched`), and the
        direct writes take them from there (page-aligned: no staging copy). Only while the
        dispatcher is less than the ring's size behind: bytes it has not read yet are never
        overwritten. ``received``: the pieces are the ring's own views (see
        :meth:`ring_space`): nothing to copy. Returns whether the bytes are in the ring."""
        ring = self._ring_admits(start, end)
        if ring is None:
            return False
        if self._ring_end != start:
            self._ring_from = start
            self._ring_restarts += 1
        if received:
            self._ring_end = end
            return True
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
            whole = memoryview(ring)
            buf[:first] = whole[at:at + first]
            if first < n:
                buf[first:n] = whole[:n - first]
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
        """Whether a batch's worth of replicated bytes (`reput.BATCH_DISPATCH_MIN`) waits for
        the dispatcher."""
        return self._queue.max_offset - self._dispatched >= reput.BATCH_DISPATCH_MIN

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

"""One fixed-size, memory-mapped file of a segment queue (RocketMQ's ``MappedFile``).

A segment is named by its start offset in the log, zero-padded to 20 digits
(``00000000001073741824``), and is always exactly its configured size: it is created sparse with
``ftruncate`` and mapped shared. Bytes past the write position are zero (recovery and truncation
keep it that way), which is how an interrupted log is recognised.

Writes are slice assignments into the mapping. Flushing is ``fdatasync`` on the file descriptor:
on Linux it writes back pages dirtied through a shared mapping exactly as ``msync(MS_SYNC)``
does, and unlike ``mmap.flush()`` it releases the GIL, so writers keep appending while the
flush thread waits for the disk.

Reference counting (RocketMQ's ``ReferenceResource``): the owner holds one reference; readers
:meth:`Segment.hold` / :meth:`Segment.release` around access. :meth:`Segment.destroy` makes the
segment unavailable to new holders and unlinks the file; the mapping and descriptor are closed
when the last holder releases it. :class:`SegmentSlice` is a zero-copy ``memoryview`` over part
of a segment that keeps it held until released.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType

from services.broker.storage.record import ReadableBuffer

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE
NAME_DIGITS = 20
_ZERO_CHUNK = 1 << 20
#: madvise advice (Linux 5.14+); the mmap module only names them from Python 3.13 on.
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
#: posix_fadvise advice for :meth:`Segment.warm` (None where the platform lacks it).
_FADV_WILLNEED: int | None = getattr(os, "POSIX_FADV_WILLNEED", None)

#: Most buffers one ``pwritev`` takes (Linux's IOV_MAX).
_IOV_MAX = 1024
#: ``O_DIRECT`` (None where the platform lacks it).
_O_DIRECT: int | None = getattr(os, "O_DIRECT", None)
#: Alignment of a direct write's file offset, length and buffer (covers 512 B and 4 KiB
#: logical blocks).
DIRECT_ALIGN = 4096
#: A :meth:`Segment.write_at` with a staging buffer writes its whole aligned blocks directly
#: only if they add up to at least this much; smaller appends go through the page cache.
DIRECT_MIN = 64 * 1024
#: :attr:`Segment.file_pos` when every written byte is in the file.
ALL_IN_FILE = 1 << 62



def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes, which releases the GIL during the call (the mmap
    module's ``madvise`` holds it); None where it cannot be loaded."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_madvise_nogil = _libc_madvise()

SyncFn = Callable[[int], None]
#: Data sync of a file descriptor (``os.fdatasync`` where it exists).
default_sync: SyncFn = getattr(os, "fdatasync", os.fsync)


def segment_name(start_offset: int) -> str:
    return f"{start_offset:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """The start offset a file name encodes, or None if it is not a segment name."""
    if len(name) == NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created/removed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentError(OSError):
    """A segment file that cannot be created, opened or is inconsistent."""


class Segment:
    """A mapped file covering log offsets ``[start, start + size)``."""

    __slots__ = ("_addr", "_available", "_direct_fd", "_fd", "_flush_lock", "_ref_lock", "_refs",
                 "file_pos", "flushed_pos", "mm", "path", "populated_pos", "refill_pos", "size", "start",
                 "view", "warmed_pos", "write_pos")

    def __init__(self, path: str, start: int, size: int, *, create: bool = False,
                 keep_fd: bool = True) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise SegmentError(exc.errno, f"cannot {'create' if create else 'open'} segment: {exc.strerror}",
                               path) from exc
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                actual = os.fstat(fd).st_size
                if actual == 0:
                    # killed between creating the file and sizing it: nothing was ever written
                    # to it (writes start after the mapping), so finish its creation
                    log.warning("segment file is empty (creation interrupted); sizing it",
                                extra={"path": path, "size": size})
                    os.ftruncate(fd, size)
                elif actual != size:
                    raise SegmentError(f"segment {path} is {actual} bytes, expected {size} "
                                       "(was the segment size changed?)")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            if create:
                os.unlink(path)
            raise
        if not keep_fd:
            # The mapping holds its own descriptor; with tens of thousands of small files
            # (consume queues) a second one each would exhaust the open-file limit. The rare
            # calls that need a descriptor (flush, write_through) open the file for the call.
            os.close(fd)
            fd = -1
        #: The file's descriptor, or -1 (not kept: see :meth:`_file`).
        self._fd = fd
        #: Descriptor opened with ``O_DIRECT`` for :meth:`write_at` and
        #: :meth:`read_direct_into` (-1: not yet; None: the file system refuses direct I/O).
        self._direct_fd: int | None = -1
        self.path = path
        self.start = start
        self.size = size
        #: Zero-copy view of the whole mapping (released when the segment is cleaned up).
        self.view = memoryview(self.mm)
        #: Bytes written (relative to ``start``); everything past it is zero.
        self.write_pos = 0
        #: Bytes known to be on disk.
        self.flushed_pos = 0
        #: Bytes past this position (up to ``write_pos``) are still in the commit log's write
        #: buffer, not in the file (:data:`ALL_IN_FILE`: none are); a flush stops here.
        self.file_pos = ALL_IN_FILE
        #: Pages mapped ahead of the writer (see :meth:`populate`).
        self.populated_pos = 0
        #: The writer asks for more pages to be mapped (see :meth:`prefault`) once it writes
        #: past this position (set by whoever maps them).
        self.refill_pos = 0
        #: Address of the mapping (for :meth:`prefault`; 0: not looked up yet).
        self._addr = 0
        #: Bytes put in the page cache ahead of the writer by :meth:`warm`.
        self.warmed_pos = 0
        self._refs = 1  # the owner's reference
        self._available = True
        self._ref_lock = threading.Lock()
        self._flush_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"Segment({segment_name(self.start)}, write_pos={self.write_pos}, "
                f"flushed_pos={self.flushed_pos})")

    # -- geometry ------------------------------------------------------------------------------

    @property
    def end(self) -> int:
        """Offset just past the segment."""
        return self.start + self.size

    @property
    def write_offset(self) -> int:
        """Log offset of the write position."""
        return self.start + self.write_pos

    @property
    def is_full(self) -> bool:
        return self.write_pos >= self.size

    # -- writing -------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position; returns the position it was written at."""
        pos = self.write_pos
        end = pos + len(data)
        if end > self.size:
            raise SegmentError(f"{len(data)} bytes do not fit in {self!r}")
        self.mm[pos:end] = data
        self.write_pos = end
        return pos

    def write_at(self, pos: int, pieces: Sequence[ReadableBuffer], stage: memoryview | None = None,
                 *, aligned: bool = False) -> int:
        """Write ``pieces`` back to back at ``pos`` and move the write position to their end,
        which must not pass the end of the segment. For bulk appends of bytes that already
        exist elsewhere (a slave's replicated log). Returns how many bytes went direct.

        The bytes go through the page cache with ``pwritev`` (the kernel allocates the pages,
        so the writer takes no page fault, and the shared mapping sees the bytes at once) ...

        ... unless ``stage`` (a page-aligned buffer, a multiple of :data:`DIRECT_ALIGN` long;
        or ``aligned``: the pieces themselves are slices of such a buffer, cut at block
        boundaries of the file, and are written direct without the copy)
        is given and the whole 4 KiB blocks of the write add up to :data:`DIRECT_MIN`: those
        are copied through ``stage`` and written with ``O_DIRECT``, past the page cache, and
        only the partial blocks at either end take the page cache. A block is thus always
        written the same way, so a block cached by an earlier partial write is never written
        direct. The kernel keeps the two coherent: a direct write first writes back and drops
        any cached page of its range (clean pages that readers or readahead brought in), so
        readers of the mapping see the new bytes. It stores the bytes without allocating a
        page-cache page for each, which is what writing a new file mostly costs, and they are
        on the device, not only in memory, when it returns."""
        views = [memoryview(piece) for piece in pieces]
        total = sum(len(view) for view in views)
        end = pos + total
        if pos < 0 or end > self.size:
            raise SegmentError(f"{total} bytes at {pos} do not fit in {self!r}")
        direct = 0
        lo = -(-pos // DIRECT_ALIGN) * DIRECT_ALIGN
        hi = end // DIRECT_ALIGN * DIRECT_ALIGN
        if (stage is not None or aligned) and hi - lo >= DIRECT_MIN and self._direct_fd is not None:
            head, middle, tail = split_views(views, lo - pos, hi - pos)
            self._pwritev(pos, head)
            if self._pwritev_direct(lo, middle) if stage is None else self._pwrite_direct(lo, middle, stage):
                direct = hi - lo
            else:
                self._pwritev(lo, middle)
            self._pwritev(hi, tail)
        else:
            self._pwritev(pos, views)
        self.write_pos = max(self.write_pos, end)
        return direct

    def write_through(self, pos: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``pos`` with ``pwrite`` (the write position is not moved). For a
        small write that touches a page of the file for the first time: the kernel fills the
        page cache without the mapping's write fault, which on a sparse file costs milliseconds
        (block reservation); the mapping sees the bytes at once."""
        if pos < 0 or pos + len(data) > self.size:
            raise SegmentError(f"{len(data)} bytes at {pos} do not fit in {self!r}")
        self._pwritev(pos, [memoryview(data)])

    @contextlib.contextmanager
    def _file(self) -> Iterator[int]:
        """The file's descriptor: the kept one, or one opened for the duration."""
        if self._fd >= 0:
            yield self._fd
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)

    def _pwritev(self, at: int, views: list[memoryview]) -> None:
        with self._file() as fd:
            self._pwritev_fd(fd, at, views)

    def _pwritev_fd(self, fd: int, at: int, views: list[memoryview]) -> None:
        first = 0
        while first < len(views):
            written = os.pwritev(fd, views[first:first + _IOV_MAX], at)
            if written <= 0:
                raise SegmentError(f"pwritev wrote nothing at {at} in {self!r}")
            at += written
            while first < len(views) and written >= len(views[first]):
                written -= len(views[first])
                first += 1
            if written:  # a short write (rare: a signal; a full disk raises instead)
                views[first] = views[first][written:]

    def _pwrite_direct(self, at: int, views: list[memoryview], stage: memoryview) -> bool:
        """Write ``views`` (whole blocks in all) at the block-aligned ``at`` with ``O_DIRECT``,
        ``len(stage)`` bytes per call. False if the file system refuses direct I/O (then this
        segment never tries again)."""
        fd = self._open_direct()
        if fd is None:
            return False
        room = len(stage)
        filled = 0
        for view in views:
            used = 0
            while used < len(view):
                n = min(len(view) - used, room - filled)
                stage[filled:filled + n] = view[used:used + n]
                filled += n
                used += n
                if filled == room:
                    if not self._pwrite_stage(fd, stage, at):
                        return False
                    at += filled
                    filled = 0
        return not filled or self._pwrite_stage(fd, stage[:filled], at)

    def _pwritev_direct(self, at: int, views: list[memoryview]) -> bool:
        """Write ``views`` (each at a page-aligned address, whole blocks long: a caller's
        ``aligned=True``) at the block-aligned ``at`` with ``O_DIRECT``, without copying them
        through a staging buffer. False if the file system refuses direct I/O."""
        fd = self._open_direct()
        if fd is None:
            return False
        try:
            self._pwritev_fd(fd, at, views)
        except OSError as exc:
            return self._direct_refused(exc)
        return True

    def _direct_refused(self, exc: OSError) -> bool:
        """EINVAL from a direct write: stop using O_DIRECT for this file (False: the caller writes
        the range through the page cache, which is always safe); any other error propagates."""
        if exc.errno != errno.EINVAL:
            raise exc
        log.info("direct writes refused in %s (%s); writing through the page cache", self.path, exc.strerror)
        self._close_direct()
        self._direct_fd = None
        return False

    def _pwrite_stage(self, fd: int, data: memoryview, at: int) -> bool:
        """One staged direct write; False if the file system refuses direct I/O (EINVAL: the
        caller then writes the same range through the page cache, which is always safe)."""
        done = 0
        while done < len(data):
            try:
                written = os.pwrite(fd, data[done:], at + done)
            except OSError as exc:
                return self._direct_refused(exc)
            if written <= 0:
                raise SegmentError(f"direct write wrote nothing at {at + done} in {self!r}")
            done += written
        return True

    def _open_direct(self) -> int | None:
        if self._direct_fd is not None and self._direct_fd < 0:
            if _O_DIRECT is None:
                self._direct_fd = None
            else:
                try:
                    self._direct_fd = os.open(self.path, os.O_RDWR | _O_DIRECT)
                except OSError as exc:
                    log.info("cannot open %s for direct writes (%s); writing through the page cache",
                             self.path, exc.strerror)
                    self._direct_fd = None
        return self._direct_fd

    def _close_direct(self) -> None:
        if self._direct_fd is not None and self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1

    def zero(self, start: int, end: int) -> None:
        """Overwrite ``[start, end)`` with zeros through the mapping (safe while others read)."""
        chunk = bytes(min(_ZERO_CHUNK, max(end - start, 0)))
        while start < end:
            n = min(len(chunk), end - start)
            self.mm[start:start + n] = chunk[:n]
            start += n

    def zero_tail_sparse(self, pos: int) -> None:
        """Zero everything from ``pos`` to the end by truncating the file to ``pos`` and
        extending it again (the tail becomes a hole). Cheap even for a huge dirty tail, but only
        for recovery: touching the tail of the mapping between the two calls raises SIGBUS."""
        with self._file() as fd:
            os.ftruncate(fd, pos)
            os.ftruncate(fd, self.size)
        self.populated_pos = min(self.populated_pos, pos)
        self.refill_pos = min(self.refill_pos, pos)

    def truncate_to(self, pos: int, *, sparse: bool = False) -> None:
        """Cut the written data back to ``pos`` and zero what follows."""
        if sparse:
            self.zero_tail_sparse(pos)
        elif pos < self.write_pos:
            self.zero(pos, self.write_pos)
        self.write_pos = pos
        self.flushed_pos = min(self.flushed_pos, pos)

    # -- flushing ------------------------------------------------------------------------------

    def dirty_pages(self) -> int:
        return self.write_pos // PAGE_SIZE - self.flushed_pos // PAGE_SIZE

    def flush(self, sync: SyncFn = default_sync, least_pages: int = 0) -> int:
        """Sync written data to disk if at least ``least_pages`` pages are dirty (or the segment
        is full). Returns the flushed position."""
        write_pos = self.write_pos
        file_pos = self.file_pos  # (read after write_pos: see CommitLog.commit)
        if file_pos < write_pos:
            write_pos = file_pos
        if write_pos <= self.flushed_pos:
            return self.flushed_pos
        if least_pages > 0 and write_pos < self.size and self.dirty_pages() < least_pages:
            return self.flushed_pos
        with self._flush_lock:
            if write_pos > self.flushed_pos and self.hold():
                try:
                    with self._file() as fd:
                        sync(fd)
                finally:
                    self.release()
                self.flushed_pos = max(self.flushed_pos, write_pos)
            return self.flushed_pos

    def populate(self, end: int, chunk: int, *, write: bool = False) -> bool:
        """Map the pages up to at least ``end`` (and ``chunk`` bytes past the current mapped
        position) in one ``madvise`` call instead of one page fault per page as the writer
        touches them (several times cheaper per byte).

        ``write=False`` (``MADV_POPULATE_READ``): page-cache pages are allocated and mapped
        read-only; the writer still takes a (cheap) write-protect fault per page, and nothing
        is dirtied. ``write=True`` (``MADV_POPULATE_WRITE``, RocketMQ's ``warmMappedFile``):
        the pages are mapped writable, so the writer takes no fault at all, but they are dirty
        (zeros) and the next sync writes them out. Returns False if the kernel does not support
        it (Linux < 5.14)."""
        start = self.populated_pos
        stop = min(self.size, max(end, start + chunk))
        if stop <= start:
            return True
        aligned = start // PAGE_SIZE * PAGE_SIZE
        try:
            self.mm.madvise(MADV_POPULATE_WRITE if write else MADV_POPULATE_READ, aligned, stop - aligned)
        except (OSError, ValueError, AttributeError):
            return False
        self.populated_pos = stop
        return True

    def prefault(self, end: int, *, write: bool = False) -> bool:
        """:meth:`populate` up to ``end`` from a background thread, so the writer finds the
        pages mapped: ``madvise`` is called through ctypes, which releases the GIL (the writer
        goes on appending meanwhile), with the segment held. Returns False if the kernel or the
        platform does not support it."""
        start = self.populated_pos
        stop = min(self.size, end)
        if stop <= start:
            return True
        if _madvise_nogil is None:
            return False
        if not self.hold():
            return True  # closed or deleted meanwhile
        try:
            if not self._addr:
                anchor = ctypes.c_char.from_buffer(self.mm)
                self._addr = ctypes.addressof(anchor)
                del anchor  # (releases its export of the mapping)
            aligned = start // PAGE_SIZE * PAGE_SIZE
            advice = MADV_POPULATE_WRITE if write else MADV_POPULATE_READ
            if _madvise_nogil(self._addr + aligned, stop - aligned, advice) != 0:
                return False
        finally:
            self.release()
        if stop > self.populated_pos:
            self.populated_pos = stop
        return True

    def warm(self, end: int, chunk: int) -> bool:
        """Bring the pages of ``[max(warmed_pos, write_pos), end)`` into the page cache with
        ``posix_fadvise(POSIX_FADV_WILLNEED)``, ``chunk`` bytes per call (RocketMQ's
        ``AllocateMappedFileService`` role). Meant for a background thread: the call releases
        the GIL, and allocating and zeroing fresh pages is the most expensive part of
        appending to a new file, so the writer's :meth:`populate` then only maps pages that
        already exist. Past the write position the file is a hole, so this reads nothing from
        disk and dirties nothing. Returns False if ``posix_fadvise`` is not available."""
        pos = max(self.warmed_pos, self.write_pos // PAGE_SIZE * PAGE_SIZE)
        end = min(end, self.size)
        while pos < end:
            n = min(chunk, end - pos)
            if not self.prefetch(pos, n):
                return False
            pos += n
            self.warmed_pos = pos
        return True

    def prefetch(self, pos: int, size: int) -> bool:
        """``posix_fadvise(POSIX_FADV_WILLNEED)`` on ``[pos, pos + size)``: the kernel reads
        what is on disk into the page cache (and allocates zeroed pages for a hole) without
        holding the GIL, so whoever then reads the mapping takes no fault that waits for the
        disk. False if ``posix_fadvise`` is not available (True if the segment is gone)."""
        if _FADV_WILLNEED is None:
            return False
        if not self.hold():
            return True  # closed or deleted meanwhile
        try:
            with self._file() as fd:
                os.posix_fadvise(fd, pos, size, _FADV_WILLNEED)
        except OSError:
            return False
        finally:
            self.release()
        return True

    # -- reading -------------------------------------------------------------------------------

    def read_direct_into(self, pos: int, size: int, buf: memoryview) -> memoryview | None:
        """Read ``size`` bytes from ``pos`` (fewer past the end of the file) with ``O_DIRECT``
        into ``buf`` (page-aligned, a multiple of :data:`DIRECT_ALIGN` long and at least
        ``size + DIRECT_ALIGN``): whole blocks from the block holding ``pos``, so no page-cache
        page is allocated for bytes read once (on a VM the first touch of a page the guest has
        not used lately is its dearest part); the kernel first writes back any cached dirty
        page of the range, so what :meth:`write_at` wrote either way is read. Returns the view
        of ``buf`` holding the bytes from ``pos``, or None if direct I/O is not available here
        (the caller then uses :meth:`read_into`)."""
        fd = self._open_direct()
        if fd is None:
            return None
        lo = pos - pos % DIRECT_ALIGN
        size = max(0, min(size, self.size - pos, len(buf) - DIRECT_ALIGN))
        want = -(-(pos - lo + size) // DIRECT_ALIGN) * DIRECT_ALIGN
        done = 0
        try:
            while done < want:
                n = os.preadv(fd, [buf[done:want]], lo + done)
                if n <= 0:
                    break
                done += n
        except OSError:
            return None  # (the caller's read through the page cache reports a real error)
        got = max(0, min(done - (pos - lo), size))
        return buf[pos - lo:pos - lo + got]

    def read_into(self, pos: int, buf: memoryview) -> int:
        """Copy the file's bytes from ``pos`` into ``buf`` with ``preadv`` (the GIL is released
        and no page of the mapping is faulted in: cheaper than reading the mapping for bytes
        read once, such as those a slave's dispatcher validates). Returns the bytes read."""
        size = min(len(buf), self.size - pos)
        done = 0
        with self._file() as fd:
            while done < size:
                n = os.preadv(fd, [buf[done:size]], pos + done)
                if n <= 0:
                    break
                done += n
        return done

    def slice(self, pos: int, size: int) -> SegmentSlice | None:
        """A held, zero-copy view of ``[pos, pos + size)``; None if the segment is gone."""
        if not self.hold():
            return None
        return SegmentSlice(self.start + pos, self.view[pos:pos + size], self)

    def last_modified(self) -> float:
        """mtime of the file (seconds), or 0.0 if it is gone."""
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return 0.0

    # -- reference counting --------------------------------------------------------------------

    def hold(self) -> bool:
        """Take a reference; False if the segment is being destroyed/closed."""
        with self._ref_lock:
            if not self._available:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._ref_lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._cleanup()

    @property
    def is_held(self) -> bool:
        """Whether anyone besides the owner holds a reference."""
        return self._refs > 1

    @property
    def available(self) -> bool:
        return self._available

    def close(self) -> None:
        """Give up the owner's reference; the mapping closes when the last holder releases."""
        self._shutdown(delete=False)

    def destroy(self) -> None:
        """Unlink the file now (a new file of the same name may be created at once) and close
        the mapping when the last holder releases it."""
        self._shutdown(delete=True)

    def _shutdown(self, *, delete: bool) -> None:
        with self._ref_lock:
            if not self._available:
                return
            self._available = False
            self._refs -= 1
            last = self._refs == 0
        if delete:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        if last:
            self._cleanup()

    def _cleanup(self) -> None:
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            # A caller kept a memoryview derived from a slice; the mapping goes when it does.
            log.warning("segment %s still has exported views at close", self.path)
        self._close_direct()
        if self._fd >= 0:
            os.close(self._fd)


def split_views(views: list[memoryview], *cuts: int) -> list[list[memoryview]]:
    """``views``, back to back, cut at the byte positions ``cuts`` (ascending): one list of
    (zero-copy) views per part."""
    parts: list[list[memoryview]] = [[]]
    at = 0
    for view in views:
        used = 0
        while used < len(view):
            if len(parts) <= len(cuts) and at == cuts[len(parts) - 1]:
                parts.append([])
                continue
            stop = len(view) if len(parts) > len(cuts) else min(len(view), used + cuts[len(parts) - 1] - at)
            parts[-1].append(view[used:stop])
            at += stop - used
            used = stop
    parts.extend([] for _ in range(len(cuts) + 1 - len(parts)))
    return parts


class SegmentSlice:
    """Zero-copy bytes of one segment, starting at log offset ``start_offset``.

    Holds the segment until :meth:`release` (or the end of a ``with`` block); do not keep
    ``data`` or views derived from it past that.
    """

    __slots__ = ("_segment", "data", "start_offset")

    def __init__(self, start_offset: int, data: memoryview, segment: Segment) -> None:
        self.start_offset = start_offset
        self.data = data
        self._segment: Segment | None = segment

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.data)

    def release(self) -> None:
        segment, self._segment = self._segment, None
        if segment is not None:
            with contextlib.suppress(BufferError):
                self.data.release()
            segment.release()

    def __enter__(self) -> SegmentSlice:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"SegmentSlice(start_offset={self.start_offset}, size={len(self.data)})"

"""The message index: business keys (``KEYS``) and unique client message ids (``UNIQ_KEY``) ->
commit log offsets, in hash-slot index files (RocketMQ's ``IndexService`` / ``IndexFile``).

:class:`IndexService` works on its own thread, behind the dispatcher, one pass per
:data:`GATHER_S`. The commit log hands it what it stores under its own lock, so in log order
(:class:`~services.broker.storage.indexfeed.AppendFeed`): local appends as runs of the log in
which only keyed messages (``KEYS``/``UNIQ_KEY``: their property dicts, no parsing) are kept,
replicated records as the batch dispatcher's batches (the encoded properties it already cut
out, keys found for a whole pass in one vectorised scan); everything else - the records past
the index's end at start-up, records dispatched one at a time - it reads back from the commit
log. Each pass
appends one entry per key to the newest :class:`IndexFile` with one vectorised put. Recovery
resumes from where the index files say they stopped; files whose records are all deleted are
deleted with them. File format, crash behaviour, design and costs: ``docs/message-index.md``."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from services.broker.storage.indexfeed import AppendFeed, Run, appended_entries
from services.broker.storage.indexkeys import (
    Column,
    Entries,
    batch_keys,
    key_hash,
    record_keys,
    scan_records,
)
from services.broker.storage.record import PREFIX
from services.broker.storage.segment import (
    MADV_POPULATE_WRITE,
    PAGE_SIZE,
    SegmentSlice,
    default_sync,
)

if TYPE_CHECKING:
    from services.broker.storage.dispatch import DispatchBatch

log = logging.getLogger(__name__)

#: beginTimestamp 8 · endTimestamp 8 · beginPhyOffset 8 · endPhyOffset 8 · hashSlotCount 4 ·
#: indexCount 4 (RocketMQ's IndexHeader; endPhyOffset here is where indexing stopped).
FILE_HEADER = struct.Struct(">qqqqii")
#: keyHash 4 · phyOffset 8 · timeDiff 4 (seconds since beginTimestamp) · prevIndex 4.
ENTRY = struct.Struct(">Iqii")
SLOT = struct.Struct(">i")
_ENTRY_FIELDS = [("hash", ">u4"), ("offset", ">i8"), ("diff", ">i4"), ("prev", ">i4")]
#: Below this many entries a put is a plain loop (NumPy's fixed cost per call would dominate).
VECTOR_MIN = 64
#: Entries looked at per chain and query at most (bounds a lookup on a degenerate chain).
MAX_CHAIN_STEPS = 1_000_000
#: Bytes of commit log read per batch by the index thread.
READ_CHUNK = 1024 * 1024
#: Seconds between syncs of the index files by the periodic flush (each sync write-protects
#: the hash-slot pages again: every page written after it takes a fault). Whatever a crash
#: leaves unsynced is indexed again from the commit log at start.
FLUSH_INTERVAL_S = 10.0
#: Entry bytes mapped ahead of the index writer per ``madvise``.
POPULATE_STEP = 4 * 1024 * 1024
#: The index thread waits this long after being woken before it indexes what arrived: one
#: pass (and one vectorised put) per this much time, not per append.
GATHER_S = 0.05
_PREFIX = PREFIX.unpack_from
#: ``progress`` (in the index directory, only while no index file exists: a store whose records
#: carry no keys yet): where indexing had got to at the last flush, 8-byte offset + CRC-32, so
#: such a store does not read its whole commit log again at every start. Once a file exists its
#: ``endPhyOffset`` says it and the progress file is removed.
PROGRESS = struct.Struct(">qI")
PROGRESS_FILE = "progress"
#: (Re-exported: the query side hashes keys the same way.)
__all__ = ["IndexFile", "IndexService", "key_hash", "record_keys"]


class IndexFile:
    """One index file: header, ``slots`` hash slots, room for ``capacity`` entries (entry 0 is
    never used: a slot or prevIndex of 0 means none). Not thread-safe: :class:`IndexService`
    serialises writers; readers see entries once the slot that points to them is written."""

    def __init__(self, path: str, slots: int, capacity: int, *,
                 create_at: tuple[int, int] | None = None) -> None:
        self.path = path
        size = FILE_HEADER.size + SLOT.size * slots + ENTRY.size * (capacity + 1)
        if create_at is not None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            os.ftruncate(fd, size)
        else:
            fd = os.open(path, os.O_RDWR)
            actual = os.fstat(fd).st_size
            head = os.pread(fd, FILE_HEADER.size, 0)
            if len(head) == FILE_HEADER.size:
                _, _, _, _, slots_on_disk, _ = FILE_HEADER.unpack(head)
                if slots_on_disk > 0:
                    slots = slots_on_disk  # the file keeps the geometry it was made with
            capacity = (actual - FILE_HEADER.size - SLOT.size * slots) // ENTRY.size - 1
            if capacity < 1:
                os.close(fd)
                raise ValueError(f"index file {path} is truncated ({actual} bytes)")
            size = actual
        try:
            self.mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        #: Kept open for ``fdatasync``: unlike ``mmap.flush`` it releases the GIL.
        self._fd = fd
        self.slots = slots
        self.capacity = capacity
        self._entries_at = FILE_HEADER.size + SLOT.size * slots
        if create_at is not None:
            begin_offset, begin_ts = create_at
            self.begin_ts = self.end_ts = begin_ts
            self.begin_offset = self.end_offset = begin_offset
            self.count = 1
            self.write_header()
        else:
            (self.begin_ts, self.end_ts, self.begin_offset, self.end_offset, _,
             self.count) = FILE_HEADER.unpack_from(self.mm, 0)
            self.count = min(max(self.count, 1), capacity + 1)
        self.dirty = create_at is not None
        #: Bytes of the file mapped writable in advance (no page fault when written).
        self._populated = 0
        if create_at is not None:
            # The hash slots are written at random: map all their pages writable at once (one
            # call per file; the blocks are allocated then) rather than taking a write fault per
            # page on the indexing path.
            with contextlib.suppress(OSError, ValueError, AttributeError):  # (kernel < 5.14)
                self.mm.madvise(MADV_POPULATE_WRITE, 0, self._entries_at)
            self._populated = self._entries_at // PAGE_SIZE * PAGE_SIZE

    def _populate(self, end: int) -> None:
        """Map the entry pages up to ``end`` (and a step ahead) writable in one call."""
        start = self._populated
        stop = min(len(self.mm), max(end, start + POPULATE_STEP))
        if stop > start:
            with contextlib.suppress(OSError, ValueError, AttributeError):  # (kernel < 5.14)
                self.mm.madvise(MADV_POPULATE_WRITE, start, stop - start)
            self._populated = stop

    @property
    def full(self) -> bool:
        return self.count > self.capacity

    def write_header(self) -> None:
        FILE_HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_offset, self.end_offset,
                              self.slots, self.count)

    def put(self, hashes: Column, offsets: Column, stamps: Column, start: int) -> int:
        """Append entries ``start..`` of the parallel lists (key hashes, commit log offsets,
        store timestamps in ms) until the file is full; returns the index of the first one not
        written. Every entry is written before the slot that points to it."""
        n0 = self.count
        k = min(len(hashes) - start, self.capacity + 1 - n0)
        if k <= 0:
            return start
        entries_end = self._entries_at + (n0 + k) * ENTRY.size
        if entries_end > self._populated:
            self._populate(entries_end)
        if k >= VECTOR_MIN:
            self._put_vector(hashes[start:start + k], offsets[start:start + k], stamps[start:start + k])
        else:
            if isinstance(hashes, np.ndarray):  # (plain ints for the loop)
                hashes, offsets, stamps = (list(map(int, x)) for x in (hashes, offsets, stamps))
            self._put_loop(hashes, offsets, stamps, start, k)
        self.end_ts = max(self.end_ts, int(stamps[start + k - 1]))
        self.count = n0 + k
        self.dirty = True
        return start + k

    def _put_loop(self, hashes: Column, offsets: Column, stamps: Column, start: int,
                  k: int) -> None:
        mm = self.mm
        n = self.count
        nslots = self.slots
        base_ts = self.begin_ts
        entries_at = self._entries_at
        slot_at = FILE_HEADER.size
        unpack_slot, pack_slot, pack_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        for i in range(start, start + k):
            h = hashes[i]
            pos = slot_at + (h % nslots) * 4
            (prev,) = unpack_slot(mm, pos)
            pack_entry(mm, entries_at + n * 20, h, offsets[i], (stamps[i] - base_ts) // 1000, prev)
            pack_slot(mm, pos, n)
            n += 1

    def _put_vector(self, hashes: Column, offsets: Column, stamps: Column) -> None:
        """:meth:`_put_loop` in one pass: every entry links to what its slot held, then the
        slots point at the entries. Entries of the batch that share a slot (rare: a batch is
        small next to the slot count) are found after the slots are written, where a slot does
        not hold the row that wrote it (no sort of the batch), then linked to each other in
        order, the slot to the last. Entries are complete before a slot points at them."""
        k = len(hashes)
        n0 = self.count
        h = np.asarray(hashes, dtype=np.uint32)
        slots = h % np.uint32(self.slots)
        slot_view = np.frombuffer(self.mm, dtype=">i4", count=self.slots, offset=FILE_HEADER.size)
        entries = np.frombuffer(self.mm, dtype=np.dtype(_ENTRY_FIELDS), count=k,
                                offset=self._entries_at + n0 * ENTRY.size)
        entries["hash"] = h
        entries["offset"] = offsets
        entries["diff"] = (np.asarray(stamps, dtype=np.int64) - self.begin_ts) // 1000
        entries["prev"] = slot_view[slots]
        own = np.arange(n0, n0 + k, dtype=np.int32)
        slot_view[slots] = own  # (a slot several rows share holds one of them: fixed below)
        lost = np.flatnonzero(slot_view[slots] != own)
        heads: dict[int, int] = {}
        if len(lost):
            # The rows of the repeated slots: those that lost, and the one each slot holds.
            repeated = list(set(slots[lost].tolist()))
            rows = sorted({*lost.tolist(), *(slot_view[repeated] - n0).tolist()})
            prev_field = entries["prev"]
            for row, slot in zip(rows, slots[rows].tolist(), strict=True):
                before = heads.get(slot)
                if before is not None:
                    prev_field[row] = before
                heads[slot] = n0 + row
            del prev_field
        if heads:
            slot_view[list(heads)] = list(heads.values())
        del slot_view, entries  # (exported buffers would keep the mapping from closing)

    def lookup(self, h: int, begin_ms: int, end_ms: int, limit: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries with hash ``h`` stored in ``[begin_ms,
        end_ms]`` (to the second), newest first, until ``out`` holds ``limit``."""
        mm = self.mm
        count = self.capacity + 1  # (slots are written after their entries: any is readable)
        (i,) = SLOT.unpack_from(mm, FILE_HEADER.size + (h % self.slots) * 4)
        lo = (begin_ms - self.begin_ts) // 1000 if begin_ms > self.begin_ts else -1
        hi = (end_ms - self.begin_ts) // 1000
        unpack = ENTRY.unpack_from
        entries_at = self._entries_at
        steps = 0
        while 0 < i < count and len(out) < limit and steps < MAX_CHAIN_STEPS:
            kh, offset, diff, prev = unpack(mm, entries_at + i * 20)
            if diff < lo:
                break  # chains run from new to old
            if kh == h and diff <= hi:
                out.append(offset)
            if prev >= i:
                break  # a torn entry (after an OS crash): do not loop
            i = prev
            steps += 1

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self.write_header()
            default_sync(self._fd)

    def close(self) -> None:
        self.write_header()
        with contextlib.suppress(BufferError):  # (a lookup still reading: the GC closes it)
            self.mm.close()
        os.close(self._fd)


class IndexService:
    """Builds and queries the index files under ``directory`` (see module doc).

    ``read`` is the commit log's ``get_data``; ``dispatched`` returns its dispatched offset
    (only whole, validated records below it are indexed); ``lock`` is the commit log's lock,
    under which the commit log writes :attr:`appends`. :meth:`load` resumes at the index
    files' own end (clamped to ``[min_offset, dispatched]``)."""

    def __init__(self, directory: str, slots: int, capacity: int,
                 read: Callable[[int, int], SegmentSlice | None], dispatched: Callable[[], int],
                 lock: threading.Lock | None = None) -> None:
        self.directory = directory
        self.slots = slots
        self.capacity = capacity
        self._read = read
        self._dispatched = dispatched
        self._log_lock = lock or threading.Lock()
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._topics: dict[bytes, int] = {}
        #: What the commit log hands over as it appends and dispatches (under its lock).
        self.appends = AppendFeed(self._wake.set)
        #: Runs taken from :attr:`appends` and not indexed yet, in log order.
        self._runs: list[Run] = []
        #: Commit log offset up to which records are indexed.
        self.indexed_offset = 0
        #: Entries written since start.
        self.entries_written = 0
        self._next_flush = 0.0
        #: Replicated batches indexed from the dispatcher's properties (not read back).
        self.batches_fed = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def load(self, min_offset: int, max_offset: int) -> None:
        """Open the index files on disk; decide where indexing resumes."""
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit())
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                self._files.append(IndexFile(path, self.slots, self.capacity))
            except (OSError, ValueError) as exc:
                log.warning("index: dropping unreadable index file %s (%s)", path, exc)
                os.unlink(path)
        end = self._files[-1].end_offset if self._files else self._load_progress(min_offset)
        self.indexed_offset = min(max(end, min_offset), max_offset)
        log.info("index loaded: %d file(s), indexing resumes at %d", len(self._files), self.indexed_offset)

    def _load_progress(self, default: int) -> int:
        try:
            with open(os.path.join(self.directory, PROGRESS_FILE), "rb") as f:
                data = f.read(PROGRESS.size)
        except FileNotFoundError:
            return default
        if len(data) == PROGRESS.size:
            offset, crc = PROGRESS.unpack(data)
            if zlib.crc32(data[:8]) == crc:
                return int(offset)
        log.warning("index: ignoring a damaged progress file; indexing from %d", default)
        return default

    def _save_progress(self) -> None:
        """Called with :attr:`_lock` held, only while no index file exists."""
        offset = self.indexed_offset.to_bytes(8, "big", signed=True)
        try:
            fd = os.open(os.path.join(self.directory, PROGRESS_FILE), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, PROGRESS.pack(self.indexed_offset, zlib.crc32(offset)), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # (only costs a scan of the keyless records at the next start)
            log.warning("index: cannot save the indexing progress: %s", exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="IndexService", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """New replicated records are dispatched (cheap: reads a flag, at most sets an event)."""
        if self.appends.idle:
            self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        with self._lock:
            for f in self._files:
                f.flush()
                f.close()
            if not self._files:
                self._save_progress()
            self._files = []

    def _run(self) -> None:
        feed = self.appends
        while not self._stopping:
            feed.idle = True
            if not self._pending():
                self._wake.wait(1.0)
            feed.idle = False
            # Let appends accumulate: one pass per few milliseconds, not per message, keeps the
            # thread from taking the GIL back and forth with the appending threads, and makes
            # the vectorised put long.
            time.sleep(GATHER_S)
            self._wake.clear()
            try:
                while not self._stopping and self.index_pending() > 0:
                    time.sleep(0)  # let the appending threads have the GIL between batches
            except Exception:
                log.exception("index: indexing failed; retrying in 1 s")
                time.sleep(1.0)

    def _pending(self) -> bool:
        return bool(self._runs) or self.appends.pending() or self.indexed_offset < self._dispatched()

    # -- building -------------------------------------------------------------------------------

    def feed_batch(self, batch: DispatchBatch) -> None:
        """The batch dispatcher dispatched ``batch`` (replicated records, in log order; called
        under the commit log lock): index it from the properties it already cut out
        (:attr:`DispatchBatch.props`), without reading or parsing the records again."""
        self.appends.add_batch(batch)

    def _take_runs(self, start: int) -> list[Run]:
        """The fed runs that cover the log contiguously from ``start`` (hold ``_lock``); runs
        wholly before ``start`` (read from the log meanwhile) are dropped."""
        with self._log_lock:
            taken = self.appends.take()
        runs = self._runs
        if taken:
            runs += taken
        skip = 0
        while skip < len(runs) and runs[skip].end <= start:
            skip += 1
        if skip:
            del runs[:skip]
        if not runs or runs[0].start > start:
            return []
        end = runs[0].end
        take = 1
        while take < len(runs) and runs[take].start == end:
            end = runs[take].end
            take += 1
        out = runs[:take]
        del runs[:take]
        return out

    def _run_entries(self, runs: list[Run], start: int) -> Entries:
        """Index entries of contiguous fed runs; those of records before ``start`` left out."""
        parts: list[Entries] = []
        i = 0
        while i < len(runs):
            if runs[i].batch is not None:  # consecutive replicated batches: one vectorised pass
                j = i
                while j < len(runs) and runs[j].batch is not None:
                    j += 1
                batches = [r.batch for r in runs[i:j] if r.batch is not None]
                self.batches_fed += len(batches)
                parts.append(batch_keys(batches, self._topics))
                i = j
            else:
                if runs[i].keyed:
                    parts.append(appended_entries(runs[i].keyed, self._topics))
                i += 1
        parts = [p for p in parts if len(p[0])]
        if runs[0].start < start:  # (partly indexed from the log already)
            parts = [_entries_from(p, start) for p in parts]
        if not parts:
            return (), (), ()
        if len(parts) == 1:
            return parts[0]
        return (np.concatenate([np.asarray(p[0], dtype=np.uint32) for p in parts]),
                np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]),
                np.concatenate([np.asarray(p[2], dtype=np.int64) for p in parts]))

    def index_pending(self, max_bytes: int = READ_CHUNK) -> int:
        """Index the next whole dispatched records after :attr:`indexed_offset`: the fed runs
        that start there, else records read from the commit log (up to about ``max_bytes``,
        within one segment, stopping where the next fed run starts). Returns the bytes of log
        covered (0: nothing to do)."""
        with self._lock:
            start = self.indexed_offset
            runs = self._take_runs(start)
            if runs:
                end = runs[-1].end
                hashes, offsets, stamps = self._run_entries(runs, start)
            else:
                end = self._dispatched()
                if self._runs and self._runs[0].start > start:
                    end = min(end, self._runs[0].start)
                if start >= end:
                    return 0
                scanned = self._scan_log(start, min(max_bytes, end - start))
                if scanned is None:
                    return 0
                end, hashes, offsets, stamps = scanned
            if len(hashes):
                self._append(hashes, offsets, stamps)
            self.indexed_offset = end
            if self._files:
                self._files[-1].end_offset = end
            return end - start

    def _scan_log(self, start: int, max_bytes: int) -> tuple[int, list[int], list[int], list[int]] | None:
        data = self._read(start, max_bytes)
        if data is None:
            return None
        try:
            pos, hashes, offsets, stamps = scan_records(data.data, start, self._topics)
            if pos == 0 and data.size >= 8:  # one record larger than max_bytes
                (total, _) = _PREFIX(data.data, 0)
                if total > data.size:
                    data.release()
                    data = self._read(start, total)
                    if data is None:
                        return None
                    pos, hashes, offsets, stamps = scan_records(data.data, start, self._topics)
        finally:
            if data is not None:
                data.release()
        return start + pos, hashes, offsets, stamps

    def _append(self, hashes: Column, offsets: Column, stamps: Column) -> None:
        i = 0
        n = len(hashes)
        while i < n:
            current = self._files[-1] if self._files else None
            if current is None or current.full:
                first = int(offsets[i])
                if current is not None:
                    current.end_offset = first
                    current.flush()
                path = os.path.join(self.directory, f"{first:020d}")
                current = IndexFile(path, self.slots, self.capacity, create_at=(first, int(stamps[i])))
                if not self._files:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.directory, PROGRESS_FILE))
                self._files.append(current)
                log.info("index: new index file %s", path)
            i = current.put(hashes, offsets, stamps, i)
        self.entries_written += n

    # -- querying -------------------------------------------------------------------------------

    def lookup(self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Commit log offsets of records indexed under ``topic`` + ``key`` stored within
        ``[begin_ms, end_ms]``, newest first, at most ``limit`` (candidates: the hash may
        collide; the caller checks the records)."""
        h = key_hash(topic, key)
        out: list[int] = []
        files = list(self._files)
        for f in reversed(files):
            if len(out) >= limit:
                break
            if f.end_ts < begin_ms - 1000 or f.begin_ts > end_ms:
                continue
            try:
                f.lookup(h, begin_ms, end_ms, limit, out)
            except ValueError:  # closed by stop()
                break
        seen: set[int] = set()
        return [o for o in out if not (o in seen or seen.add(o))]  # type: ignore[func-returns-value]

    # -- maintenance ----------------------------------------------------------------------------

    def flush(self, force: bool = False) -> None:
        """Sync the index files (at most every :data:`FLUSH_INTERVAL_S` unless ``force``)."""
        now = time.monotonic()
        if not force and now < self._next_flush:
            return
        self._next_flush = now + FLUSH_INTERVAL_S
        with self._lock:
            for f in self._files:
                f.flush()
            if not self._files:
                self._save_progress()

    def truncate(self, offset: int) -> None:
        """The commit log was cut back to ``offset``: index again from there (entries past it
        stay in the files and are filtered out when their records do not match)."""
        with self._lock:
            with self._log_lock:
                self.appends.reset()
            self._runs = []
            if self.indexed_offset > offset:
                self.indexed_offset = offset
                if self._files:
                    self._files[-1].end_offset = offset
                else:  # (at once: a crash must not leave it claiming the cut records)
                    self._save_progress()

    def delete_below(self, min_offset: int) -> int:
        """Delete the index files whose records all lie below ``min_offset`` (never the newest);
        returns how many."""
        with self._lock:
            doomed: list[IndexFile] = []
            for f, nxt in zip(self._files, self._files[1:], strict=False):
                if nxt.begin_offset <= min_offset:
                    doomed.append(f)
                else:
                    break
            for f in doomed:
                os.unlink(f.path)
                f.close()
                log.info("index: deleted index file %s (its records expired)", f.path)
            self._files = self._files[len(doomed):]
            return len(doomed)

    def files(self) -> Iterable[IndexFile]:
        return tuple(self._files)


def _entries_from(entries: Entries, start: int) -> Entries:
    """The entries of records at or after ``start``."""
    hashes, offsets, stamps = entries
    keep = [i for i, offset in enumerate(offsets) if offset >= start]
    return [hashes[i] for i in keep], [offsets[i] for i in keep], [stamps[i] for i in keep]

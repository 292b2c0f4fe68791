"""The message index: business keys (``KEYS``) and unique client message ids (``UNIQ_KEY``) ->
commit log offsets, in hash-slot index files (RocketMQ's ``IndexService`` / ``IndexFile``).

:class:`IndexService` follows the commit log on its own thread, behind the dispatcher: it reads
whole dispatched records in batches (zero-copy slices of the segments), takes the keys of those
that have any, and appends one entry per key to the newest :class:`IndexFile`. Masters and
slaves build it the same way (it only reads the commit log), recovery resumes from where the
index files say they stopped, and files whose records are all deleted are deleted with them.
File format, crash behaviour and query semantics: ``docs/message-index.md``.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable

from pocketmq.wire.record import header_format
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    HEADER_SIZE,
    MAGIC_CODE,
    PREFIX,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    U16,
)
from services.broker.storage.segment import SegmentSlice

log = logging.getLogger(__name__)

#: beginTimestamp 8 · endTimestamp 8 · beginPhyOffset 8 · endPhyOffset 8 · hashSlotCount 4 ·
#: indexCount 4 (RocketMQ's IndexHeader; endPhyOffset here is where indexing stopped).
FILE_HEADER = struct.Struct(">qqqqii")
#: keyHash 4 · phyOffset 8 · timeDiff 4 (seconds since beginTimestamp) · prevIndex 4.
ENTRY = struct.Struct(">Iqii")
SLOT = struct.Struct(">i")
#: Entries looked at per chain and query at most (bounds a lookup on a degenerate chain).
MAX_CHAIN_STEPS = 1_000_000
#: Bytes of commit log read per batch by the index thread.
READ_CHUNK = 4 * 1024 * 1024

_RECORD = struct.Struct(header_format(("total_size", "magic", "store_timestamp", "body_length")))
_RECORD_UNPACK = _RECORD.unpack_from
_U16 = U16.unpack_from
_PREFIX = PREFIX.unpack_from
_KEYS = (PROPERTY_KEYS.encode() + b"\x01", PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX.encode() + b"\x01")
_crc32 = zlib.crc32


def key_hash(topic: str, key: str) -> int:
    """The index hash of ``topic`` + ``key``: CRC-32 of ``topic#key`` (UTF-8)."""
    return _crc32(key.encode(), _crc32(topic.encode() + b"#"))


def record_keys(props: bytes) -> list[bytes]:
    """The index keys in encoded properties: each KEYS key (space separated) and UNIQ_KEY."""
    out: list[bytes] = []
    for i, needle in enumerate(_KEYS):
        at = props.find(needle)
        while at > 0 and props[at - 1] != 2:  # must start a pair
            at = props.find(needle, at + 1)
        if at < 0:
            continue
        start = at + len(needle)
        end = props.find(b"\x02", start)
        value = props[start:end if end >= 0 else len(props)]
        if i == 0:
            out.extend(k for k in value.split(b" ") if k)
        elif value:
            out.append(value)
    return out


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
        finally:
            os.close(fd)
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

    @property
    def full(self) -> bool:
        return self.count > self.capacity

    def write_header(self) -> None:
        FILE_HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_offset, self.end_offset,
                              self.slots, self.count)

    def put(self, hashes: list[int], offsets: list[int], stamps: list[int], start: int) -> int:
        """Append entries ``start..`` of the parallel lists until full; returns the index of
        the first one not written."""
        mm = self.mm
        n = self.count
        room = self.capacity + 1 - n
        stop = min(len(hashes), start + room)
        nslots = self.slots
        base_ts = self.begin_ts
        entries_at = self._entries_at
        slot_at = FILE_HEADER.size
        unpack_slot, pack_slot, pack_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        for i in range(start, stop):
            h = hashes[i]
            pos = slot_at + (h % nslots) * 4
            (prev,) = unpack_slot(mm, pos)
            pack_entry(mm, entries_at + n * 20, h, offsets[i], (stamps[i] - base_ts) // 1000, prev)
            pack_slot(mm, pos, n)
            n += 1
        if stop > start:
            self.end_ts = max(self.end_ts, stamps[stop - 1])
        self.count = n
        self.dirty = True
        return stop

    def lookup(self, h: int, begin_ms: int, end_ms: int, limit: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries with hash ``h`` stored in ``[begin_ms,
        end_ms]`` (to the second), newest first, until ``out`` holds ``limit``."""
        mm = self.mm
        count = self.count
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
            self.mm.flush()

    def close(self) -> None:
        self.write_header()
        self.mm.close()


class IndexService:
    """Builds and queries the index files under ``directory`` (see module doc).

    ``read`` is the commit log's ``get_data``; ``dispatched`` returns its dispatched offset
    (only whole, validated records below it are indexed). :meth:`start` begins at the index
    files' own end (clamped to ``[min_offset, dispatched]``)."""

    def __init__(self, directory: str, slots: int, capacity: int,
                 read: Callable[[int, int], SegmentSlice | None], dispatched: Callable[[], int]) -> None:
        self.directory = directory
        self.slots = slots
        self.capacity = capacity
        self._read = read
        self._dispatched = dispatched
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._topics: dict[bytes, int] = {}
        #: Commit log offset up to which records are indexed.
        self.indexed_offset = 0
        #: Entries written since start (a gauge for operators and the benchmark).
        self.entries_written = 0

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
        end = self._files[-1].end_offset if self._files else min_offset
        self.indexed_offset = min(max(end, min_offset), max_offset)
        log.info("index loaded: %d file(s), indexing resumes at %d", len(self._files), self.indexed_offset)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="IndexService", daemon=True)
        self._thread.start()

    def wakeup(self, _offset: int = 0) -> None:
        """Dispatch listener: new records are dispatched (cheap: sets an event)."""
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
            self._files = []

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                while not self._stopping and self.index_pending() > 0:
                    time.sleep(0)  # let the appending threads have the GIL between batches
            except Exception:
                log.exception("index: indexing failed; retrying in 1 s")
                time.sleep(1.0)

    # -- building -------------------------------------------------------------------------------

    def index_pending(self, max_bytes: int = READ_CHUNK) -> int:
        """Index whole dispatched records from :attr:`indexed_offset` (at most about
        ``max_bytes`` of them, within one segment); returns the bytes of log consumed."""
        with self._lock:
            start = self.indexed_offset
            end = self._dispatched()
            if start >= end:
                return 0
            data = self._read(start, min(max_bytes, end - start))
            if data is None:
                return 0
            try:
                pos, hashes, offsets, stamps = self._scan(data.data, start)
                if pos == 0 and data.size >= 8:  # one record larger than max_bytes
                    (total, _) = _PREFIX(data.data, 0)
                    if total > data.size:
                        data.release()
                        data = self._read(start, total)
                        if data is None:
                            return 0
                        pos, hashes, offsets, stamps = self._scan(data.data, start)
            finally:
                if data is not None:
                    data.release()
            if hashes:
                self._append(hashes, offsets, stamps)
            self.indexed_offset = start + pos
            if self._files:
                self._files[-1].end_offset = self.indexed_offset
            return pos

    def _scan(self, buf: memoryview, base: int) -> tuple[int, list[int], list[int], list[int]]:
        """Keys of the whole records in ``buf`` (starting at log offset ``base``): (bytes
        consumed, key hashes, record offsets, store timestamps)."""
        hashes: list[int] = []
        offsets: list[int] = []
        stamps: list[int] = []
        topics = self._topics
        size = len(buf)
        pos = 0
        unpack = _RECORD_UNPACK
        needles = _KEYS
        while pos + 8 <= size:
            if pos + HEADER_SIZE > size:
                total, magic = _PREFIX(buf, pos)
                if magic == BLANK_MAGIC_CODE and total > 0:
                    pos += total
                break
            total, magic, ts, body_len = unpack(buf, pos)
            if magic != MAGIC_CODE:
                # The dispatcher validated everything below the dispatched offset: a blank
                # record fills the rest of its segment (the slice may end before it does).
                if magic == BLANK_MAGIC_CODE and total > 0:
                    pos += total
                break
            end = pos + total
            if total <= 0 or end > size:
                break
            body_end = pos + HEADER_SIZE + body_len
            topic_len = buf[body_end]
            props_at = body_end + 1 + topic_len
            (props_len,) = _U16(buf, props_at)
            if props_len:
                props = bytes(buf[props_at + 2:props_at + 2 + props_len])
                if needles[0] in props or needles[1] in props:
                    raw_topic = bytes(buf[body_end + 1:props_at])
                    prefix = topics.get(raw_topic)
                    if prefix is None:
                        if len(topics) > 8192:
                            topics.clear()
                        prefix = topics[raw_topic] = _crc32(raw_topic + b"#")
                    for key in record_keys(props):
                        hashes.append(_crc32(key, prefix))
                        offsets.append(base + pos)
                        stamps.append(ts)
            pos = end
        return pos, hashes, offsets, stamps

    def _append(self, hashes: list[int], offsets: list[int], stamps: list[int]) -> None:
        i = 0
        while i < len(hashes):
            current = self._files[-1] if self._files else None
            if current is None or current.full:
                if current is not None:
                    current.end_offset = offsets[i]
                    current.flush()
                path = os.path.join(self.directory, f"{offsets[i]:020d}")
                current = IndexFile(path, self.slots, self.capacity, create_at=(offsets[i], stamps[i]))
                self._files.append(current)
                log.info("index: new index file %s", path)
            i = current.put(hashes, offsets, stamps, i)
        self.entries_written += len(hashes)

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

    def flush(self) -> None:
        with self._lock:
            for f in self._files:
                f.flush()

    def truncate(self, offset: int) -> None:
        """The commit log was cut back to ``offset``: index again from there (entries past it
        stay in the files and are filtered out when their records do not match)."""
        with self._lock:
            if self.indexed_offset > offset:
                self.indexed_offset = offset
                if self._files:
                    self._files[-1].end_offset = offset

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
            for f in doomed:  # (their mappings close when the last lookup using them is done)
                os.unlink(f.path)
                log.info("index: deleted index file %s (its records expired)", f.path)
            self._files = self._files[len(doomed):]
            return len(doomed)

    def files(self) -> Iterable[IndexFile]:
        return tuple(self._files)

"""The timer index: pending timer messages ordered by due time, and its snapshot format.

Pure data structures, no I/O. An entry is ``(deliver_ms, commit log offset, size)`` of a record
of the timer topic; the offset identifies it. Removal is lazy (a removed entry stays in the heap
until it reaches the top or the heap is compacted), so add, remove and pop are O(log n).

Snapshot layout (big-endian): magic ``PMQTIMR1`` · entries queue offset 8 · done queue offset 8 ·
count 8 · count x (deliver_ms 8 · offset 8 · size 4) · CRC32 of everything before 4.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from collections.abc import Iterable
from typing import NamedTuple

MAGIC = b"PMQTIMR1"
_HEAD = struct.Struct(">8sqqq")
_ENTRY = struct.Struct(">qqi")
_CRC = struct.Struct(">I")
#: Offsets of delivered entries, packed in the body of a done record.
_OFFSET = struct.Struct(">q")


class TimerEntry(NamedTuple):
    deliver_ms: int
    offset: int
    size: int


class TimerIndex:
    def __init__(self, entries: Iterable[TimerEntry] = ()) -> None:
        self._live: dict[int, TimerEntry] = {}
        self._heap: list[TimerEntry] = []
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, offset: object) -> bool:
        return offset in self._live

    def add(self, entry: TimerEntry) -> bool:
        """Add an entry; False (and no change) when its offset is already pending."""
        if entry.offset in self._live:
            return False
        self._live[entry.offset] = entry
        heapq.heappush(self._heap, entry)
        return True

    def remove(self, offset: int) -> bool:
        """Forget a pending entry (delivered elsewhere); False when it is not pending."""
        if self._live.pop(offset, None) is None:
            return False
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            self._heap = list(self._live.values())
            heapq.heapify(self._heap)
        return True

    def _top(self) -> TimerEntry | None:
        heap, live = self._heap, self._live
        while heap:
            top = heap[0]
            if live.get(top.offset) == top:
                return top
            heapq.heappop(heap)
        return None

    def next_due(self) -> int | None:
        """The earliest pending delivery time (epoch ms), None when nothing is pending."""
        top = self._top()
        return None if top is None else top.deliver_ms

    def pop_due(self, now_ms: int, limit: int) -> list[TimerEntry]:
        """Remove and return up to ``limit`` entries due at ``now_ms`` (earliest first)."""
        due: list[TimerEntry] = []
        while len(due) < limit:
            top = self._top()
            if top is None or top.deliver_ms > now_ms:
                break
            heapq.heappop(self._heap)
            del self._live[top.offset]
            due.append(top)
        return due

    def entries(self) -> list[TimerEntry]:
        """Every pending entry (no particular order)."""
        return list(self._live.values())


def encode_done(offsets: Iterable[int]) -> bytes:
    """Body of a done record: the delivered entries' commit log offsets."""
    return b"".join(_OFFSET.pack(o) for o in offsets)


def decode_done(body: bytes) -> list[int]:
    if len(body) % _OFFSET.size:
        raise ValueError(f"done record body of {len(body)} bytes is not a list of 8-byte offsets")
    return [o for (o,) in _OFFSET.iter_unpack(body)]


class Snapshot(NamedTuple):
    #: Next queue offsets to read of the entries queue and the done queue.
    entries_offset: int
    done_offset: int
    pending: list[TimerEntry]


def encode_snapshot(snapshot: Snapshot) -> bytes:
    parts = [_HEAD.pack(MAGIC, snapshot.entries_offset, snapshot.done_offset, len(snapshot.pending))]
    parts.extend(_ENTRY.pack(*e) for e in snapshot.pending)
    data = b"".join(parts)
    return data + _CRC.pack(zlib.crc32(data))


def decode_snapshot(data: bytes) -> Snapshot:
    """Inverse of :func:`encode_snapshot`; ValueError for a torn or corrupt snapshot."""
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError(f"timer snapshot too short ({len(data)} bytes)")
    magic, entries_offset, done_offset, count = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a timer snapshot (bad magic)")
    end = _HEAD.size + count * _ENTRY.size
    if count < 0 or len(data) != end + _CRC.size:
        raise ValueError(f"timer snapshot length {len(data)} does not match its {count} entries")
    (crc,) = _CRC.unpack_from(data, end)
    if crc != zlib.crc32(memoryview(data)[:end]):
        raise ValueError("timer snapshot CRC mismatch")
    pending = [TimerEntry(*e) for e in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size:end])]
    return Snapshot(entries_offset, done_offset, pending)

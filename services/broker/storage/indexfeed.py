"""What the message index is handed as records are stored: :class:`AppendFeed`, written under
the commit log lock, so in log order (see ``docs/message-index.md``, "Building it").

The commit log covers every record it appends or dispatches in batches with a *run*
``[start, end)``: a keyless local append only moves ``end``, as does a bulk-encoded batch whose
shared properties hold no key; a keyed one (``KEYS`` or ``UNIQ_KEY``) adds (offset, store time,
message) to the run's flat list; a batch of local appends adds its messages; a batch of
replicated records (the batch dispatcher's
:class:`~services.broker.storage.dispatch.DispatchBatch`) becomes a run of its own. A record
that does not continue the current run (replicated records dispatched one at a time, a
truncation, a run dropped because the index thread is far behind) starts a new one; whatever
no run covers the index reads back from the commit log. The index thread takes every run
at once, under the same lock.

:func:`appended_entries` turns a run's keyed messages into index entries with C-level passes
over all of them (``map`` over the property dicts, CRC-32 per key), not a Python loop per
message.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from services.broker.storage.indexkeys import Entries, key_crc32, message_keys, topic_prefix
from services.broker.storage.record import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
)

if TYPE_CHECKING:
    from services.broker.storage.dispatch import DispatchBatch

#: Keyed appends a run holds at most (3 list items each); past it the run is dropped and its
#: records are read back from the log (the index thread is far behind or stopped).
MAX_KEYED = 3 * 800_000
#: Memory the closed runs may hold: the log bytes a run of local appends covers (its keyed
#: messages), or what a replicated batch holds (:func:`batch_weight`).
MAX_CLOSED_BYTES = 64 * 1024 * 1024
#: Bytes a replicated batch holds per record besides its properties (its NumPy columns), and
#: per property pair (where it starts and ends, its row).
BATCH_ROW_BYTES = 80
PAIR_BYTES = 24

KEYS = PROPERTY_KEYS
UNIQ_KEY = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_crc32 = key_crc32
_properties = itemgetter(4)
_topic = itemgetter(0)


class Run(NamedTuple):
    """Records ``[start, end)`` of the log and what the index needs of them: ``keyed`` (flat:
    offset, store time, message per keyed record; the others have no key) or ``batch``."""

    start: int
    end: int
    keyed: list[Any]
    batch: DispatchBatch | None


class AppendFeed:
    """The current run and the runs closed before it (see module doc). Every method and
    every write of :attr:`end` / :attr:`keyed` happens under the commit log lock."""

    def __init__(self, wake: Callable[[], None]) -> None:
        #: The current run ``[start, end)`` (-1: none).
        self.start = -1
        self.end = -1
        #: Keyed records of the current run: offset, store time, message, ...
        self.keyed: list[Any] = []
        self.closed: list[Run] = []
        self._closed_bytes = 0
        #: The index thread waits for work: the next append calls :meth:`wake`.
        self.idle = True
        self._wake = wake

    def wake(self) -> None:
        self.idle = False
        self._wake()

    def restart(self, offset: int) -> None:
        """A record at ``offset`` does not continue the current run: close it, start anew."""
        self._close()
        self.start = self.end = offset

    def _close(self) -> None:
        if self.end > self.start >= 0 and self._closed_bytes + self.end - self.start <= MAX_CLOSED_BYTES:
            self.closed.append(Run(self.start, self.end, self.keyed, None))
            self._closed_bytes += self.end - self.start
        self.keyed = []
        self.start = self.end

    def overflow(self) -> None:
        """Too many keyed records wait: drop the run, and cover nothing until the index thread
        takes the runs again (the index reads those records from the log)."""
        self.keyed = []
        self.start = -1

    def rolled_back(self, offset: int) -> None:
        """A failed batch cut the log back to ``offset`` after a segment roll covered its blank."""
        if self.end > offset:
            self.end = offset
            self.start = min(self.start, offset)

    def add_messages(self, start: int, end: int, offsets: Sequence[int], store_timestamp: int,
                     messages: Sequence[Message]) -> None:
        """A batch of local appends at ``offsets`` covering ``[start, end)``. Every message
        goes into the flat list, keyed or not, with three C-level slice writes: the index thread
        sorts out the keyless ones in its passes over all of them (:func:`appended_entries`),
        rather than the appending thread in a loop per message."""
        if len(offsets) != len(messages):
            raise ValueError(f"{len(offsets)} offsets for {len(messages)} messages")
        if self.end != start:
            self.restart(start)
        keyed = self.keyed
        at = len(keyed)
        keyed += repeat(store_timestamp, 3 * len(messages))
        keyed[at::3] = offsets
        keyed[at + 2::3] = messages
        self.end = end
        if len(keyed) > MAX_KEYED:
            self.overflow()
        if self.idle:
            self.wake()

    def add_keyless(self, start: int, end: int) -> None:
        """Local appends covering ``[start, end)``, none of them keyed: only the run's end
        moves (nothing per message, for the appending thread or the index thread)."""
        if self.end != start:
            self.restart(start)
        self.end = end
        if self.idle:
            self.wake()

    def add_batch(self, batch: DispatchBatch) -> None:
        """Replicated records dispatched as one batch (a run of their own). It counts what it
        holds, not the log bytes it covers: a slave catching up feeds hundreds of MB per
        second, and a dropped batch makes the index thread read those records back from the
        log, which costs more than the batch dispatch itself."""
        start, end = int(batch.physical_offsets[0]), batch.end_offset
        self.restart(start)
        weight = batch_weight(batch)
        if self._closed_bytes + weight <= MAX_CLOSED_BYTES:
            self.closed.append(Run(start, end, [], batch))
            self._closed_bytes += weight
        self.start = self.end = end
        if self.idle:
            self.wake()

    def take(self) -> list[Run]:
        """Every run fed so far, in log order; the current one is closed."""
        self._close()
        runs, self.closed = self.closed, []
        self._closed_bytes = 0
        return runs

    def pending(self) -> bool:
        return bool(self.closed) or self.end > self.start >= 0

    def reset(self) -> None:
        """The log was cut back: forget everything fed."""
        self.closed = []
        self._closed_bytes = 0
        self.keyed = []
        self.start = self.end = -1


def batch_weight(batch: DispatchBatch) -> int:
    """Bytes a fed replicated batch holds (its columns and the properties it cut out)."""
    props = batch.props
    held = 0 if props is None else props.flat.nbytes + PAIR_BYTES * len(props.pair_starts)
    return len(batch) * BATCH_ROW_BYTES + held


def appended_entries(keyed: list[Any], prefixes: dict[bytes, int]) -> Entries:
    """Index entries (key hashes, offsets, store times; commit log order) of the flat keyed
    list of a run: a few C-level passes over all the messages; a Python loop only where a
    ``KEYS`` value holds several keys."""
    messages: list[Message] = keyed[2::3]
    offsets: list[int] = keyed[0::3]
    stamps: list[int] = keyed[1::3]
    n = len(messages)
    if not n:
        return _loop_entries(messages, offsets, stamps, prefixes)
    props = list(map(_properties, messages))
    try:
        columns: list[list[Any]] = [list(map(dict.get, props, repeat(KEYS))),
                                    list(map(dict.get, props, repeat(UNIQ_KEY)))]
    except TypeError:  # a properties mapping that is not a dict
        return _loop_entries(messages, offsets, stamps, prefixes)
    topics = set(map(_topic, messages))
    row_prefix: list[int] | None = None
    if len(topics) == 1:
        prefix = topic_prefix(topics.pop(), prefixes)
    else:
        table = {topic: topic_prefix(topic, prefixes) for topic in topics}
        row_prefix = list(map(table.__getitem__, map(_topic, messages)))
    found: list[tuple[Any, Any]] = []  # (rows or None for all, hashes) per property
    for column, values in enumerate(columns):
        if not any(values):
            continue
        rows = None
        if not all(values):  # (None: no such property; "": an empty value, no key)
            rows = [i for i, v in enumerate(values) if v]
            values = [values[i] for i in rows]
        if column == 0 and " " in "".join(values):  # several keys in one value: the loop
            return _loop_entries(messages, offsets, stamps, prefixes)
        prefixes_of = (repeat(prefix) if row_prefix is None else
                       row_prefix if rows is None else map(row_prefix.__getitem__, rows))
        hashes = np.fromiter(map(_crc32, map(str.encode, values), prefixes_of), dtype=np.uint32,
                             count=len(values))
        found.append((rows, hashes))
    if not found:
        return (), (), ()
    offset_array, stamp_array = np.array(offsets, dtype=np.int64), np.array(stamps, dtype=np.int64)
    if len(found) == 1:
        rows, hashes = found[0]
        if rows is None:
            return hashes, offset_array, stamp_array
        row_index = np.array(rows, dtype=np.int64)
    elif found[0][0] is None and found[1][0] is None:  # every message has both: interleave
        hashes = np.empty(2 * n, dtype=np.uint32)
        hashes[0::2], hashes[1::2] = found[0][1], found[1][1]
        return hashes, np.repeat(offset_array, 2), np.repeat(stamp_array, 2)
    else:  # merge by row, a message's KEYS entry first
        parts = [np.arange(n) if rows is None else np.array(rows, dtype=np.int64) for rows, _ in found]
        joined_rows = np.concatenate(parts)
        order = np.argsort(joined_rows, kind="stable")
        row_index = joined_rows[order]
        hashes = np.concatenate([h for _, h in found])[order]
    return hashes, offset_array[row_index], stamp_array[row_index]


def _loop_entries(messages: Sequence[Message], offsets: Sequence[int], stamps: Sequence[int],
                  prefixes: dict[bytes, int]) -> Entries:
    """:func:`appended_entries` one message at a time (plain Python lists)."""
    hashes = array("I")
    counts = array("I")
    message_keys(messages, prefixes, hashes, counts)
    return (list(hashes), [o for o, c in zip(offsets, counts, strict=True) for _ in range(c)],
            [t for t, c in zip(stamps, counts, strict=True) for _ in range(c)])

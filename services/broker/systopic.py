"""Reading broker-internal queues (timer, transaction half/op topics) record by record, for the
services that build an index from them by following their consume queues."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol

from services.broker.storage import record
from services.broker.storage.consumequeue import FILLER_SIZE

log = logging.getLogger(__name__)

#: Consume queue entries read per store call.
READ_BATCH = 256


class QueueReader(Protocol):
    def queue_entries(self, topic: str, queue_id: int, queue_offset: int,
                      max_count: int) -> list[tuple[int, int, int]]: ...

    def read_message(self, physical_offset: int) -> record.MessageRecord | None: ...

    def min_queue_offset(self, topic: str, queue_id: int) -> int: ...

    def max_queue_offset(self, topic: str, queue_id: int) -> int: ...


def clamp_offset(store: QueueReader, topic: str, queue_id: int, offset: int) -> int:
    """``offset`` moved into the queue's ``[min, max]`` (logged when it moves: files deleted, or
    an index snapshot ahead of a store that lost its unflushed tail)."""
    low, high = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
    fixed = min(max(offset, low), high)
    if fixed != offset:
        log.warning("system queue offset corrected", extra={
            "topic": topic, "queue_id": queue_id, "from": offset, "to": fixed})
    return fixed


def follow(store: QueueReader, topic: str, queue_id: int, offset: int,
           limit: int) -> Iterator[tuple[int, record.MessageRecord | None]]:
    """``(next queue offset, record)`` for up to ``limit`` entries from ``offset``; the record
    is None for a filler entry or a record no longer readable (deleted file)."""
    done = 0
    while done < limit:
        entries = store.queue_entries(topic, queue_id, offset, min(READ_BATCH, limit - done))
        if not entries:
            return
        for physical_offset, size, _tags in entries:
            offset += 1
            done += 1
            yield offset, (None if size == FILLER_SIZE else store.read_message(physical_offset))

"""What a pop asks for and hands out (pure values)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from services.broker import validation as v
from services.broker.pop.handle import ReceiptHandle
from services.broker.pop.state import Entry
from services.broker.storage import record

__all__ = ["PopRequest", "Popped", "PoppedBatch"]


@dataclasses.dataclass(frozen=True)
class Popped:
    """One popped message (the RocketMQ 5 API hands them out one by one)."""

    rec: record.MessageRecord
    entry: Entry
    handle: ReceiptHandle
    #: The topic the consumer subscribed to (a retry message's original topic).
    topic: str


@dataclasses.dataclass(frozen=True)
class PoppedBatch:
    """The messages of one checkpoint, as PocketMQ's own PopMessages returns them: the records
    as stored (``records``) or decoded (``recs``: FIFO groups, tag filters, queues with gaps)."""

    topic: str
    queue_id: int
    ck_id: int
    pop_ms: int
    deadline_ms: int
    offsets: Sequence[int]
    #: Delivery attempt per offset; empty = each record's reconsume times + 1.
    attempts: Sequence[int]
    records: bytes = b""
    recs: Sequence[record.MessageRecord] = ()


@dataclasses.dataclass(frozen=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int
    batch: int
    invisible_ms: int
    tag_filter: v.TagFilter
    poll_s: float
    client_id: str = ""
    auto_renew: bool = False

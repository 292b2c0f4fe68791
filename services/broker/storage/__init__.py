"""The broker's storage engine: commit log, consume queues, flush, recovery.

Layering follows Apache RocketMQ's ``store/``: :mod:`.segment` (one mapped file) ->
:mod:`.segment_queue` (a directory of them) -> :mod:`.commitlog` / :mod:`.consumequeue`, with
:mod:`.record` (the byte format, pure), :mod:`.flush` (flush threads, group commit),
:mod:`.checkpoint` (recovery markers) and :mod:`.store` (the :class:`MessageStore` facade the
broker uses).
"""

from services.broker.storage.config import FlushDiskType, StoreConfig
from services.broker.storage.logerrors import CorruptDataError, OffsetMismatchError, StoreClosedError
from services.broker.storage.record import Message, MessageRecord, tag_hash_code
from services.broker.storage.segment import SegmentSlice
from services.broker.storage.status import (
    GetMessageStatus,
    GetResult,
    PutMessageStatus,
    PutResult,
    RecoveryInfo,
)
from services.broker.storage.store import MessageStore, StoreError

__all__ = [
    "CorruptDataError",
    "FlushDiskType",
    "GetMessageStatus",
    "GetResult",
    "Message",
    "MessageRecord",
    "MessageStore",
    "OffsetMismatchError",
    "PutMessageStatus",
    "PutResult",
    "RecoveryInfo",
    "SegmentSlice",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "tag_hash_code",
]

"""Statuses and results of :class:`services.broker.storage.store.MessageStore` calls.

The enum member names are RocketMQ's (``PutMessageStatus``, ``GetMessageStatus``) so logs,
dashboards and client error mapping read the same.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

from services.broker.storage.record import (
    Host,
    MessageRecord,
    PropertiesTooLargeError,
    RecordError,
    offset_msg_id,
)


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    #: SYNC_FLUSH: stored, but not on disk within ``syncFlushTimeout``.
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    #: SYNC_MASTER: stored, but no slave acknowledged it within ``slaveTimeout``.
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    #: SYNC_MASTER: stored, but no slave is connected or in sync.
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    #: The store is not running (not started, shutting down) or is a slave.
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    #: Bad topic, body larger than ``maxMessageSize``, field out of range.
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


#: Statuses for which the message(s) are stored (and will be consumable).
STORED_STATUSES = frozenset({
    PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
})


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    #: Entries were scanned but none matched the tag filter.
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    #: The entries point below the commit log's minimum offset (files already deleted).
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    #: An entry's record could not be read.
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    #: Requested queue offset > max offset.
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    #: Requested queue offset == max offset (caught up; long-poll).
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    #: Requested queue offset < min offset.
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    #: The queue has never had a message.
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class PutResult(NamedTuple):
    """Outcome of a put/append. Offsets are per message, in input order."""

    status: PutMessageStatus
    queue_offsets: Sequence[int] = ()
    physical_offsets: Sequence[int] = ()
    #: Total bytes appended to the commit log (records only, not segment padding).
    wrote_bytes: int = 0
    #: Commit log offset just past the last record: wait for flush/replication up to here.
    end_offset: int = 0
    store_timestamp: int = 0
    store_host: Host = ("0.0.0.0", 0)
    #: Why a message was refused (MESSAGE_ILLEGAL, ...).
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def stored(self) -> bool:
        """True if the messages are in the log, even if a flush/slave wait failed."""
        return self.status in STORED_STATUSES

    @property
    def msg_ids(self) -> list[str]:
        """Offset message ids (store host + physical offset), RocketMQ's ``offsetMsgId``."""
        return [offset_msg_id(self.store_host, offset) for offset in self.physical_offsets]


class GetResult(NamedTuple):
    status: GetMessageStatus
    messages: list[MessageRecord]
    #: Queue offset to pull from next.
    next_begin_offset: int
    min_offset: int
    max_offset: int

    @property
    def found(self) -> bool:
        return self.status is GetMessageStatus.FOUND


class RecoveryInfo(NamedTuple):
    """What :meth:`MessageStore.start` did to bring the store back."""

    #: An ``abort`` file was found: the previous run did not shut down cleanly.
    abnormal: bool
    #: ``"empty"`` (new store), ``"checkpoint"`` (clean shutdown, no scan),
    #: ``"scan"`` (records validated from ``scan_from``).
    mode: str
    scan_from: int
    scanned_records: int
    scanned_bytes: int
    #: Commit log max offset after recovery.
    commit_log_end: int
    #: Where consume queue dispatch resumed, and how many records were (re)dispatched.
    reput_from: int
    redispatched: int
    #: Why the scan stopped (``"end of data"``, ``"body CRC mismatch"``, ...).
    stop_reason: str = ""


def refused(exc: RecordError) -> PutResult:
    """The result of a put refused for ``exc`` (an invalid message: nothing was written)."""
    status = (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED if isinstance(exc, PropertiesTooLargeError)
              else PutMessageStatus.MESSAGE_ILLEGAL)
    return PutResult(status, error=str(exc))


def not_available() -> PutResult:
    """The result of a put while the store is not running."""
    return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="message store is not running")

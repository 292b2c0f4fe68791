"""Storage configuration: the ``broker.conf`` keys of RocketMQ's ``MessageStoreConfig`` we support.

Every field's camelCase form is the RocketMQ key (``mapped_file_size_commit_log`` <->
``mappedFileSizeCommitLog``), so :mod:`services.common.config` loads this section from the same
file as :class:`services.broker.config.BrokerConfig`. Units follow RocketMQ: sizes in bytes,
intervals and timeouts in milliseconds, ``fileReservedTime`` in hours.

Keys that are ours, not RocketMQ's: ``populateAheadSize``, ``warmAheadSize`` and
``replicaDirectWrite`` (see :class:`StoreConfig`). ``transientStorePoolEnable`` is RocketMQ's key
with our meaning (a write buffer, see the field).
"""

from __future__ import annotations

import dataclasses
import enum
import os

from services.common.config import require

#: Size of one consume queue entry: commit log offset 8 · size 4 · tag hash code 8.
CQ_ENTRY_SIZE = 20


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class FlushDiskType(enum.Enum):
    """When an append counts as durable."""

    #: Reply at once; a background thread flushes every ``flushIntervalCommitLog`` ms.
    ASYNC_FLUSH = "ASYNC_FLUSH"
    #: Reply once the record is on disk; concurrent writers share one fdatasync (group commit).
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    #: Root directory: ``commitlog/``, ``consumequeue/``, ``checkpoint``, ``abort``, ``lock``.
    store_path_root_dir: str = "./data/store"
    #: Size of one commit log segment file (bytes).
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    #: Size of one consume queue file (bytes, a multiple of 20: 300 000 entries by default).
    mapped_file_size_consume_queue: int = 300_000 * CQ_ENTRY_SIZE
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    #: ASYNC_FLUSH: how often the flush thread syncs the commit log (ms).
    flush_interval_commit_log: int = 500
    #: ASYNC_FLUSH: skip a periodic flush while fewer pages than this are dirty (0 = always).
    flush_commit_log_least_pages: int = 4
    #: ASYNC_FLUSH: flush regardless of ``flushCommitLogLeastPages`` at least this often (ms).
    flush_commit_log_thorough_interval: int = 10_000
    #: How often consume queues are flushed and the checkpoint written (ms).
    flush_interval_consume_queue: int = 1_000
    #: SYNC_FLUSH: how long a writer waits for its flush before FLUSH_DISK_TIMEOUT (ms).
    sync_flush_timeout: int = 5_000
    #: Commit log segments not modified for this many hours are deleted (never the active one).
    file_reserved_time: int = 72
    #: How often expired files are looked for (ms).
    clean_resource_interval: int = 10_000
    #: Largest accepted record (bytes, whole encoded record).
    max_message_size: int = 4 * 1024 * 1024
    #: A pull returns at most this many messages ...
    max_transfer_count_on_message_in_memory: int = 32
    #: ... and at most this many bytes (at least one message is always returned).
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: Ours: a background thread keeps this many bytes past the commit log writer mapped into
    #: the process with ``madvise(MADV_POPULATE_READ)`` (through ctypes: the GIL is released),
    #: so the writer takes no page fault per 4 KiB page and makes no ``madvise`` call itself
    #: (the role of RocketMQ's ``warmMapedFileEnable``); the writer maps the next 256 KiB itself
    #: only if that thread fell behind. 0 disables; ignored where the kernel lacks it (< 5.14).
    #: Under ASYNC_FLUSH the pages are mapped writable (``MADV_POPULATE_WRITE``: no fault at
    #: all when the writer reaches them; they are dirty, so the next flush writes at most this
    #: many bytes of zeros); under SYNC_FLUSH read-only, so a sync never waits for them.
    populate_ahead_size: int = 4 * 1024 * 1024
    #: Ours: a background thread keeps this many bytes past the commit log writer in the page
    #: cache (``posix_fadvise(WILLNEED)`` on the file hole: allocated and zeroed, not dirty),
    #: so allocating fresh pages, the dearest part of appending, happens off the writer's
    #: thread (the role of RocketMQ's ``AllocateMappedFileService``). 0 disables.
    warm_ahead_size: int = 32 * 1024 * 1024
    #: Ours: a slave writes the whole 4 KiB blocks of a large replicated append (at least
    #: 64 KiB of them: catch-up, bursts) with ``O_DIRECT``, past the page cache; small appends
    #: and the partial blocks at either end go through it. Storing bytes in a new file mostly
    #: costs allocating a page-cache page for each, and a slave rarely reads what it just
    #: received. Falls back to the page cache by itself where the file system refuses direct
    #: I/O. Only replicated appends: a master writes through the mapping.
    replica_direct_write: bool = True
    #: A master appends into a write buffer (two 4 MiB files under ``writebuffer/``, mapped)
    #: that a committer thread writes to the commit log file with ``pwrite`` in large chunks
    #: (RocketMQ's transient store pool); the segment mapping stays for reading, a reader of
    #: bytes not yet committed commits them first, and a flush commits before it syncs. What
    #: a killed process had buffered is still in the page cache and is appended at the next
    #: start, so this changes no durability (unlike RocketMQ's pool, whence our default
    #: ``true``). SYNC_FLUSH always does it; ``false`` makes ASYNC_FLUSH masters write through
    #: the mapping (with the warmer preparing the pages).
    transient_store_pool_enable: bool = True
    #: How often the committer writes the write buffer out when fewer than 128 KiB are
    #: buffered (ms; RocketMQ's default is 200).
    commit_interval_commit_log: int = 20
    #: Index message keys (``KEYS``) and unique message ids (``UNIQ_KEY``) for lookups by key
    #: (``index/``; see ``docs/message-index.md``).
    message_index_enable: bool = True
    #: Hash slots per index file (4 bytes each).
    max_hash_slot_num: int = 5_000_000
    #: Entries per index file (20 bytes each); a full file is followed by a new one.
    max_index_num: int = 20_000_000

    def __post_init__(self) -> None:
        if isinstance(self.flush_disk_type, str):  # tolerate plain strings from Python callers
            try:
                object.__setattr__(self, "flush_disk_type", FlushDiskType[self.flush_disk_type.upper()])
            except KeyError:
                require(False, "flushDiskType", f"invalid value {self.flush_disk_type!r} "
                        "(expected ASYNC_FLUSH | SYNC_FLUSH)")
        require(isinstance(self.flush_disk_type, FlushDiskType), "flushDiskType",
                "expected ASYNC_FLUSH | SYNC_FLUSH")
        require(bool(str(self.store_path_root_dir).strip()), "storePathRootDir", "must not be empty")
        require(isinstance(self.replica_direct_write, bool), "replicaDirectWrite",
                f"must be true or false, got {self.replica_direct_write!r}")
        require(isinstance(self.message_index_enable, bool), "messageIndexEnable",
                f"must be true or false, got {self.message_index_enable!r}")
        require(isinstance(self.transient_store_pool_enable, bool), "transientStorePoolEnable",
                f"must be true or false, got {self.transient_store_pool_enable!r}")
        positive = {
            "mappedFileSizeCommitLog": self.mapped_file_size_commit_log,
            "mappedFileSizeConsumeQueue": self.mapped_file_size_consume_queue,
            "flushIntervalCommitLog": self.flush_interval_commit_log,
            "commitIntervalCommitLog": self.commit_interval_commit_log,
            "flushCommitLogThoroughInterval": self.flush_commit_log_thorough_interval,
            "flushIntervalConsumeQueue": self.flush_interval_consume_queue,
            "syncFlushTimeout": self.sync_flush_timeout,
            "fileReservedTime": self.file_reserved_time,
            "cleanResourceInterval": self.clean_resource_interval,
            "maxMessageSize": self.max_message_size,
            "maxTransferCountOnMessageInMemory": self.max_transfer_count_on_message_in_memory,
            "maxTransferBytesOnMessageInMemory": self.max_transfer_bytes_on_message_in_memory,
            "maxHashSlotNum": self.max_hash_slot_num,
            "maxIndexNum": self.max_index_num,
        }
        for key, value in positive.items():
            require(_is_int(value), key, f"must be an integer, got {value!r}")
            require(value > 0, key, f"must be > 0, got {value}")
        for key, value in {"flushCommitLogLeastPages": self.flush_commit_log_least_pages,
                           "populateAheadSize": self.populate_ahead_size,
                           "warmAheadSize": self.warm_ahead_size}.items():
            require(_is_int(value), key, f"must be an integer, got {value!r}")
            require(value >= 0, key, f"must be >= 0, got {value}")
        for key, value in {"maxHashSlotNum": self.max_hash_slot_num,
                           "maxIndexNum": self.max_index_num}.items():
            require(value < 2**31 - 1, key, f"must be < 2^31 - 1, got {value}")
        require(self.mapped_file_size_commit_log >= 4096, "mappedFileSizeCommitLog", "must be >= 4096")
        require(self.mapped_file_size_commit_log < 2**62, "mappedFileSizeCommitLog", "too large")
        require(self.mapped_file_size_consume_queue % CQ_ENTRY_SIZE == 0, "mappedFileSizeConsumeQueue",
                f"must be a multiple of {CQ_ENTRY_SIZE} (one entry), "
                f"got {self.mapped_file_size_consume_queue}")
        # A record must fit in a segment with room left for the end-of-file blank record.
        require(self.max_message_size + 8 <= self.mapped_file_size_commit_log, "maxMessageSize",
                f"{self.max_message_size} must be at most mappedFileSizeCommitLog "
                f"({self.mapped_file_size_commit_log}) - 8")

    @property
    def write_buffer(self) -> bool:
        """Whether a master appends through the write buffer (``transientStorePoolEnable``)."""
        return self.transient_store_pool_enable or self.flush_disk_type is FlushDiskType.SYNC_FLUSH

    # -- derived paths -------------------------------------------------------------------------

    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def write_buffer_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "writebuffer")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

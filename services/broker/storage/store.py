"""``MessageStore``: the broker's storage facade (RocketMQ's ``DefaultMessageStore``).

Usage::

    with MessageStore(StoreConfig(store_path_root_dir="/data/store")) as store:
        r = store.put_message(Message("orders", b"...", queue_id=1, properties={"TAGS": "paid"}))
        assert r.status is PutMessageStatus.PUT_OK
        got = store.get_messages("orders", 1, queue_offset=0, max_count=32)

All methods are thread-safe.  Directory layout, threads, the write and read paths, replicated
data and recovery are described in ``docs/architecture.md`` ("The message store").
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from services.broker.storage.checkpoint import (
    Checkpoint,
    CheckpointFile,
    create_abort_file,
    remove_abort_file,
)
from services.broker.storage.commitlog import CommitLog, append_failed, now_ms
from services.broker.storage.config import FlushDiskType, StoreConfig
from services.broker.storage.consumequeue import FILLER_SIZE, ConsumeQueueStore
from services.broker.storage.flush import FlushRealTimeService, GroupCommitService, ServiceThread
from services.broker.storage.index import IndexService
from services.broker.storage.logerrors import StoreClosedError
from services.broker.storage.record import (
    Host,
    Message,
    MessageRecord,
    MessageTooLargeError,
    PreparedRecord,
    ReadableBuffer,
    RecordError,
    prepare,
)
from services.broker.storage.segment import SegmentSlice, SyncFn, default_sync
from services.broker.storage.status import (
    GetMessageStatus,
    GetResult,
    PutMessageStatus,
    PutResult,
    RecoveryInfo,
    not_available,
)
from services.broker.storage.status import refused as refused  # (re-exported: callers that encode records)

if TYPE_CHECKING:
    from services.broker.storage.bulk import UniformBatch

log = logging.getLogger(__name__)

#: Entries a filtered pull may scan (RocketMQ's maxFilterMessageCount).
MAX_FILTER_SCAN = 16_000
#: Records the reput thread dispatches per lock acquisition while replicated data keeps
#: arriving (~50 us of work for 1 KiB ones: the appending thread waits at most that long for
#: the GIL and the lock; the acks, which SYNC_MASTER producers wait for, come first) ...
REPUT_BATCH_STREAMING = 16
#: ... and how long it sleeps between those batches (the appender gets the GIL back at once) ...
REPUT_PAUSE_S = 0.0002
#: ... and per call once the stream pauses, or while the slave receives in bulk
#: (``CommitLog.receiving_in_bulk``: it is catching up): then whole batches (``storage/
#: dispatch.py``: about 0.4 us of CPU a 1 KiB record) from the dispatch ring, outside the
#: commit log lock, right behind the writer, which waits for them when it gets a ring ahead
#: (so nothing is read back from the disk: that cost more than the validation itself) ...
REPUT_BATCH_IDLE = 8192
#: ... with this pause when less than a batch is there (the records at the writer then go
#: :data:`REPUT_BATCH_STREAMING` at a time).
REPUT_PAUSE_BULK_S = 0.002

AppendListener = Callable[[int], None]
DispatchListener = Callable[[int], None]


class QueueSelection(NamedTuple):
    """The records a pull takes from one consume queue (:meth:`MessageStore.select_entries`)."""

    #: FOUND when records were picked, else why none were (out of range, filtered, removed).
    status: GetMessageStatus
    #: Commit log offsets of the picked records, in queue order.
    offsets: list[int]
    #: The same records as ``(start, end)`` commit log ranges, contiguous records merged.
    runs: list[tuple[int, int]]
    #: Bytes of the picked records.
    total: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: The status to report if none of the picked records can be read after all.
    miss_status: GetMessageStatus


class StoreError(Exception):
    """The store cannot start (locked by another process, inconsistent files)."""


class MessageStore:
    """Commit log + consume queues + flush + recovery behind one small API (see module doc).

    ``store_host`` is written into every record (STOREHOSTADDRESS) and makes the offset
    message ids. ``sync`` replaces ``fdatasync`` for every file (a test seam: e.g. a function
    that blocks to provoke FLUSH_DISK_TIMEOUT).
    """

    #: ``put_message(msg)``: append one message; under SYNC_FLUSH wait until it is on disk
    #: (:meth:`_put_message`). While nothing has to happen after the append (the store runs,
    #: ASYNC_FLUSH, no listeners) it is the commit log's ``put`` itself (see :meth:`_route_puts`):
    #: look it up for each call rather than keeping it across a start, a shutdown or a listener
    #: added.
    put_message: Callable[[Message], PutResult]
    #: ``append_message(msg)``: append one message without waiting for the disk
    #: (:meth:`_append_message`; routed like :attr:`put_message`).
    append_message: Callable[[Message], PutResult]

    def __init__(self, config: StoreConfig, *, store_host: Host = ("127.0.0.1", 10911),
                 sync: SyncFn | None = None) -> None:
        self.config = config
        self.store_host = store_host
        self._sync: SyncFn = sync or default_sync
        self._cq = ConsumeQueueStore(config.consume_queue_dir, config.mapped_file_size_consume_queue,
                                     sync=self._sync)
        self._log = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log,
                              store_host=store_host, dispatcher=self._cq, sync=self._sync,
                              populate_size=config.populate_ahead_size,
                              populate_write=config.flush_disk_type is FlushDiskType.ASYNC_FLUSH,
                              warm_size=config.warm_ahead_size,
                              direct_write=config.replica_direct_write,
                              write_buffer=config.write_buffer,
                              write_buffer_dir=config.write_buffer_dir)
        self._cq.append_lock = self._log.lock
        self._log.max_message_size = config.max_message_size
        self._checkpoint = CheckpointFile(config.checkpoint_path)
        #: The message key index (None when ``messageIndexEnable`` is off).
        self.index: IndexService | None = None
        if config.message_index_enable:
            log_ = self._log
            self.index = IndexService(config.index_dir, config.max_hash_slot_num, config.max_index_num,
                                      log_.get_data, lambda: log_.dispatched_offset, log_.lock)
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout = config.sync_flush_timeout / 1000
        self._max_message_size = config.max_message_size
        self._listeners: tuple[AppendListener, ...] = ()
        self._dispatch_listeners: tuple[DispatchListener, ...] = ()
        self.put_message = self._put_message
        self.append_message = self._append_message
        self._reput: ServiceThread | None = None
        self._flush_service: FlushRealTimeService | None = None
        self._group_commit: GroupCommitService | None = None
        self._maintenance: ServiceThread | None = None
        self._warmer: ServiceThread | None = None
        self._committer: ServiceThread | None = None
        self._lock_fd: int | None = None
        self._running = False
        self._closed = False
        self._next_cq_flush = 0.0
        self._next_clean = 0.0
        #: How the last :meth:`start` recovered (None before start).
        self.recovery: RecoveryInfo | None = None

    # ==========================================================================================
    # lifecycle
    # ==========================================================================================

    def start(self) -> None:
        """Lock the directory, recover, create the ``abort`` file and start the threads."""
        if self._running or self._closed:
            raise StoreError("a MessageStore can be started once")
        cfg = self.config
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        self._lock_fd = os.open(cfg.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StoreError(f"store {cfg.store_path_root_dir} is in use by another process") from None
        try:
            self.recovery = self._recover()
            if self.index is not None:
                self.index.load(self._log.min_offset, self._log.dispatched_offset)
            create_abort_file(cfg.abort_path)
        except BaseException:
            self._log.close()
            self._cq.close()
            self._release_lock()
            raise
        if self._sync_flush:
            self._group_commit = GroupCommitService(
                lambda: self._log.flush(0), self._log.flushed_offset,
                idle_interval=cfg.flush_interval_commit_log / 1000)
            self._group_commit.start()
        else:
            self._flush_service = FlushRealTimeService(
                self._log.flush, cfg.flush_interval_commit_log, cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval)
            self._flush_service.start()
        if cfg.write_buffer:
            self._committer = ServiceThread("CommitRealTimeService", cfg.commit_interval_commit_log / 1000,
                                            self._log.commit)
            self._log.commit_wakeup = self._committer.wakeup
            self._committer.start()
        now = time.monotonic()
        self._next_cq_flush = now + cfg.flush_interval_consume_queue / 1000
        self._next_clean = now + cfg.clean_resource_interval / 1000
        tick = min(cfg.flush_interval_consume_queue, cfg.clean_resource_interval, 1000) / 1000
        self._maintenance = ServiceThread("StoreMaintenance", tick, self._maintain)
        self._maintenance.start()
        self._reput = ServiceThread("ReputMessageService", 1.0, self._reput_pending)
        self._log.reput_wakeup = self._reput.wakeup
        self._log.on_dispatched = self._notify_dispatched
        self._reput.start()
        if self.index is not None:
            self.index.start()
            # Local appends wake it by feeding it; replicated records once dispatched.
            wake_index = self.index.wakeup
            notify = self._notify_dispatched

            def on_reput_dispatched(offset: int) -> None:
                wake_index()
                notify(offset)

            self._log.on_dispatched = on_reput_dispatched
            # Local appends are recorded for it under the commit log lock; replicated records:
            # the batch dispatcher hands over the properties it cut out (under the lock too).
            with self._log.lock:
                self._log.index_feed = self.index.appends
            self._cq.batch_listener = self.index.feed_batch
        if cfg.warm_ahead_size or cfg.populate_ahead_size:
            self._warmer = ServiceThread("CommitLogWarmer", 1.0, self._log.warm_ahead)
            self._log.warm_wakeup = self._warmer.wakeup
            self._warmer.start()
            self._warmer.wakeup()
        self._running = True
        self._route_puts()
        log.info("message store started", extra={"root": cfg.store_path_root_dir,
                                                  "recovery": self.recovery.mode if self.recovery else "",
                                                  "max_offset": self._log.max_offset})

    def shutdown(self) -> None:
        """Stop the threads, flush everything, write the checkpoint, remove ``abort``."""
        if not self._running:
            return
        self._running = False
        self._closed = True
        self._route_puts()
        if self._maintenance is not None:
            self._maintenance.stop()
        if self._reput is not None:
            self._log.reput_wakeup = None
            self._reput.stop()
        if self._warmer is not None:
            self._log.warm_wakeup = None
            self._warmer.stop()
        if self.index is not None:
            self._cq.batch_listener = None
            with self._log.lock:
                self._log.index_feed = None
            self.index.stop()
        if self._flush_service is not None:
            self._flush_service.stop()
        if self._committer is not None:
            self._log.commit_wakeup = None
            self._committer.stop()
        with self._log.lock:  # no append in flight after this
            self._log.closed = True
            self._log.wait_writes()
        self._log.flush(0)
        if self._group_commit is not None:
            self._group_commit.stop()
        self._cq.flush(0)
        self._checkpoint.save(Checkpoint(
            physic_msg_timestamp=self._log.last_store_timestamp, logics_msg_timestamp=now_ms(),
            physic_offset=self._log.max_offset, logics_offset=self._log.dispatched_offset))
        self._checkpoint.close()
        self._log.close()
        self._cq.close()
        remove_abort_file(self.config.abort_path)
        self._release_lock()
        log.info("message store shut down", extra={"root": self.config.store_path_root_dir})

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> MessageStore:
        if not self._running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    # ==========================================================================================
    # recovery
    # ==========================================================================================

    def _recover(self) -> RecoveryInfo:
        cfg = self.config
        abnormal = os.path.exists(cfg.abort_path)
        checkpoint = self._checkpoint.load()
        self._log.load()
        segments = self._log.segments
        scan_from = scanned_records = scanned_bytes = 0
        stop_reason = ""
        if not segments:
            mode = "empty"
        elif (not abnormal and checkpoint is not None and self._log.recover_from_checkpoint(
                checkpoint.physic_offset, checkpoint.physic_msg_timestamp)):
            mode = "checkpoint"
        else:
            mode = "scan"
            if abnormal:
                scan_from = checkpoint.physic_offset if checkpoint is not None else segments[0].start
            else:  # clean shutdown but the checkpoint does not match: check the last segments
                scan_from = segments[max(0, len(segments) - 3)].start
            scan = self._log.recover_by_scan(scan_from)
            scan_from, scanned_records, scanned_bytes, stop_reason = (
                scan.start, scan.records, scan.bytes, scan.stop_reason)
        if abnormal:
            # What the killed process had appended but not yet written to the file.
            self._log.replay_write_buffers()
        # With a trusted checkpoint (it matched the commit log, or the last run crashed and it
        # bounds what was flushed), dispatch resumes from its consume queue offset: no queue
        # has to be opened to find it, so queues open on first use (start time does not grow
        # with them). No queue on disk at all: they are rebuilt from the commit log.
        lazy = checkpoint is not None and (mode == "checkpoint" or (abnormal and mode == "scan"))
        self._cq.log_min_offset = lambda: self._log.min_offset
        self._cq.load(lazy=lazy)
        end = self._log.max_offset
        log_min = self._log.min_offset
        with self._log.lock:
            self._cq.truncate_dirty(end)
            if lazy and self._cq.unopened_count:
                assert checkpoint is not None
                reput = checkpoint.logics_offset
            else:
                reput = self._cq.max_physical_end() or log_min
            if abnormal:
                # Entries past the last checkpointed consume queue flush may be missing or torn:
                # drop them and rebuild from the commit log.
                safe = checkpoint.logics_offset if checkpoint is not None else log_min
                reput = max(min(reput, safe), log_min)
                self._cq.truncate_dirty(reput)
            reput = min(max(reput, log_min), end)
        self._log.set_dispatched_offset(reput)
        redispatched, reason, bad_offset = self._log.dispatch_pending()
        with self._log.lock:
            if reason:  # garbage after a trusted end: cut it off
                log.error("recovery: invalid record at %d (%s); truncating the commit log there",
                          bad_offset, reason)
                self._log.truncate_locked(bad_offset)
                self._cq.truncate_dirty(bad_offset)
            self._cq.correct_min_offsets(self._log.min_offset)
        info = RecoveryInfo(abnormal, mode, scan_from, scanned_records, scanned_bytes, self._log.max_offset,
                            reput, redispatched, stop_reason)
        log.info("store recovered: %s", info)
        return info

    # ==========================================================================================
    # writing
    # ==========================================================================================

    def _route_puts(self) -> None:
        """Point :attr:`put_message` and :attr:`append_message` at the commit log's ``put``
        while nothing has to happen after an append (one Python call per single put), else at
        the store's methods that do it."""
        direct = self._running and not self._listeners and not self._dispatch_listeners
        self.append_message = self._log.put if direct else self._append_message
        self.put_message = self._log.put if direct and not self._sync_flush else self._put_message

    def _put_message(self, msg: Message) -> PutResult:
        """:attr:`put_message` when it is more than the commit log's ``put``: refuse while not
        running, notify the listeners, under SYNC_FLUSH wait until the record is on disk."""
        result = self._append_message(msg)
        if self._sync_flush and result.status is PutMessageStatus.PUT_OK:
            return self._wait_flushed(result)
        return result

    def put_messages(self, msgs: Sequence[Message]) -> PutResult:
        """Append a batch (one lock acquisition, one write per segment touched); under
        SYNC_FLUSH wait until it is on disk. All messages are validated first: one illegal
        message refuses the whole batch."""
        result = self.append_messages(msgs)
        if self._sync_flush and result.status is PutMessageStatus.PUT_OK:
            return self._wait_flushed(result)
        return result

    def _wait_flushed(self, result: PutResult) -> PutResult:
        gc = self._group_commit
        if gc is not None and gc.wait(result.end_offset, self._sync_timeout):
            return result
        timeout = self.config.sync_flush_timeout
        return result._replace(status=PutMessageStatus.FLUSH_DISK_TIMEOUT,
                               error=f"not flushed within syncFlushTimeout ({timeout} ms); "
                                     "the message is stored")

    def _append_message(self, msg: Message) -> PutResult:
        """:attr:`append_message` when it is more than the commit log's ``put`` (see
        :meth:`_put_message`): never waits for the disk (see :meth:`flush_future`)."""
        if not self._running:
            return not_available()
        result = self._log.put(msg)
        if result.status is PutMessageStatus.PUT_OK:
            self._appended(result)
        return result

    def append_messages(self, msgs: Sequence[Message]) -> PutResult:
        """Append a batch without waiting for the disk (see :meth:`flush_future`)."""
        if not self._running:
            return not_available()
        try:
            prepared = [prepare(msg) for msg in msgs]
        except RecordError as exc:
            return refused(exc)
        return self.append_prepared(prepared, msgs)

    def append_prepared(self, prepared: Sequence[PreparedRecord], messages: Sequence[Message]) -> PutResult:
        """Append records already validated and encoded by
        :func:`~services.broker.storage.record.prepare` (or built the same way in bulk, e.g. a
        produce batch sharing one topic, queue and property set); sizes are checked against
        ``maxMessageSize`` here. ``messages``: one per record, what the key index reads (topic
        and properties; the body and other fields may be left empty)."""
        if not self._running:
            return not_available()
        limit = self._max_message_size
        for p in prepared:
            if p.size > limit:
                return refused(MessageTooLargeError(p.size, limit))
        try:
            result = self._log.append_batch(prepared, messages)
        except RecordError as exc:
            return refused(exc)
        except Exception as exc:
            return append_failed(exc)
        if prepared:
            self._appended(result)
        return result

    def append_uniform(self, batch: UniformBatch, messages: Sequence[Message] | None = None) -> PutResult:
        """:meth:`append_prepared` for a batch whose records differ only in their bodies, made
        by :func:`~services.broker.storage.bulk.uniform_batch` (encoded and indexed in bulk).
        ``messages`` (what the key index reads) matter only when the shared tail holds keys."""
        if not self._running:
            return not_available()
        if batch.max_size > self._max_message_size:
            return refused(MessageTooLargeError(batch.max_size, self._max_message_size))
        try:
            result = self._log.append_uniform(batch, messages)
        except RecordError as exc:
            return refused(exc)
        except Exception as exc:
            return append_failed(exc)
        self._appended(result)
        return result

    def _appended(self, result: PutResult) -> None:
        """After an append of at least one record: the listeners (the key index was fed under
        the commit log lock)."""
        if self._listeners:
            self._notify(self._log.max_offset)
        if self._dispatch_listeners:
            self._notify_dispatched(result.end_offset)

    def flush_future(self, end_offset: int) -> Future[PutMessageStatus]:
        """A future resolving to PUT_OK once the commit log is flushed up to ``end_offset``
        (at once under ASYNC_FLUSH). Bound the wait by ``syncFlushTimeout`` and report
        FLUSH_DISK_TIMEOUT when it expires, e.g.
        ``await asyncio.wait_for(asyncio.wrap_future(f), timeout)`` (cancelling is fine)."""
        gc = self._group_commit
        if gc is not None and self._running:
            return gc.request(end_offset)
        future: Future[PutMessageStatus] = Future()
        future.set_result(PutMessageStatus.PUT_OK if self._running or not self._sync_flush
                          else PutMessageStatus.SERVICE_NOT_AVAILABLE)
        return future

    def flush(self) -> int:
        """Flush the commit log and consume queues now; returns the flushed commit log offset."""
        flushed = self._log.flush(0)
        self._cq.flush(0)
        return flushed

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call ``listener(max_offset)`` after every append (on the appending thread; keep it
        cheap and non-blocking, e.g. ``loop.call_soon_threadsafe``)."""
        self._listeners = (*self._listeners, listener)
        self._route_puts()

    def remove_append_listener(self, listener: AppendListener) -> None:
        self._listeners = tuple(x for x in self._listeners if x != listener)
        self._route_puts()

    def _notify(self, offset: int) -> None:
        for listener in self._listeners:
            try:
                listener(offset)
            except Exception:
                log.exception("append listener failed")

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call ``listener(dispatched_offset)`` whenever messages became readable: after every
        local append (on the appending thread) and after each batch of replicated records the
        reput thread dispatched (on that thread). Keep it cheap and non-blocking."""
        self._dispatch_listeners = (*self._dispatch_listeners, listener)
        self._route_puts()

    def _notify_dispatched(self, offset: int) -> None:
        for listener in self._dispatch_listeners:
            try:
                listener(offset)
            except Exception:
                log.exception("dispatch listener failed")

    def _reput_pending(self) -> None:
        """ReputMessageService tick: dispatch replicated records in batches until none are
        left. While a steady stream comes in, small batches with real sleeps between them, so
        the appending thread (the event loop) is never held up long: the ack counts the commit
        log, not the consume queues. While it comes in bulk (a catch-up), whole batches validated
        in the dispatch ring right behind the writer, outside the commit log lock, so the
        consume queues keep up with the commit log (see ``docs/replication.md``)."""
        commit_log = self._log
        reput = commit_log.reput
        prefetch = commit_log.prefetch_undispatched
        bulk = commit_log.receiving_in_bulk
        batch = REPUT_BATCH_STREAMING
        while True:
            if bulk():
                # Catching up: whole batches right behind the writer, from the dispatch ring
                # (the writer waits for them when it gets a ring ahead). What the batch path
                # cannot take goes a few at a time, as in a steady stream; the last records
                # before the writer wait for the next append.
                if reput(REPUT_BATCH_IDLE, batch_only=True):
                    time.sleep(0)
                elif commit_log.batch_pending():
                    reput(REPUT_BATCH_STREAMING)  # (a segment's end, an invalid record)
                else:  # right behind the writer: wait for more (no read of the disk meanwhile)
                    time.sleep(REPUT_PAUSE_BULK_S)
                continue
            prefetch()
            before = commit_log.max_offset
            if not reput(batch):
                break
            streaming = commit_log.max_offset != before
            batch = REPUT_BATCH_STREAMING if streaming else REPUT_BATCH_IDLE
            time.sleep(REPUT_PAUSE_S if streaming else 0.0)

    def wait_dispatched(self, offset: int, timeout: float) -> bool:
        """Block until every whole record below ``offset`` is dispatched (readable through the
        consume queues): True, or False after ``timeout`` seconds or if the dispatcher stopped
        before ``offset`` (:attr:`dispatch_error`). For callers that must read what they
        replicated (tests, tools); never call it on an event loop."""
        return self._log.wait_dispatched(offset, timeout)

    @property
    def dispatch_error(self) -> tuple[int, str] | None:
        """(commit log offset, reason) of the invalid replicated record that stopped the
        dispatcher, or None."""
        return self._log.dispatch_error

    # ==========================================================================================
    # reading
    # ==========================================================================================

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32,
                     max_bytes: int | None = None, tag_hashes: Collection[int] | None = None) -> GetResult:
        """Pull up to ``max_count`` messages (and ``max_bytes``; at least one) of a queue from
        ``queue_offset``, chosen by :meth:`select_entries`. Continue from ``next_begin_offset``."""
        sel = self.select_entries(topic, queue_id, queue_offset, max_count, max_bytes, tag_hashes)
        if not sel.offsets:
            return GetResult(sel.status, [], sel.next_begin_offset, sel.min_offset, sel.max_offset)
        messages = [m for m in self._log.read_many(sel.offsets) if m is not None]
        return GetResult(GetMessageStatus.FOUND if messages else sel.miss_status, messages,
                         sel.next_begin_offset, sel.min_offset, sel.max_offset)

    def select_entries(self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32,
                       max_bytes: int | None = None,
                       tag_hashes: Collection[int] | None = None, *,
                       count_cap: bool = True) -> QueueSelection:
        """Choose the records a pull of a queue from ``queue_offset`` returns (the one place
        that does, for decoded and raw pulls alike): up to ``max_count`` and ``max_bytes`` (at
        least one record), capped by ``maxTransferBytesOnMessageInMemory`` and, unless
        ``count_cap`` is off (a stream's raw replies), ``maxTransferCountOnMessageInMemory``.
        ``tag_hashes``: keep only records whose tag hash code (see
        :func:`~services.broker.storage.record.tag_hash_code`) is in it (None = all); a filtered
        pull scans at most :data:`MAX_FILTER_SCAN` entries. Filler entries and records below the
        commit log's min offset (deleted) are skipped."""
        cq = self._cq.get(topic, queue_id)
        if cq is None or cq.max_offset == 0:
            return _selection(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if queue_offset < min_offset:
            return _selection(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if queue_offset == max_offset:
            return _selection(GetMessageStatus.OFFSET_OVERFLOW_ONE, queue_offset, min_offset, max_offset)
        if queue_offset > max_offset:
            return _selection(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)
        cfg = self.config
        if count_cap:
            max_count = min(max_count, cfg.max_transfer_count_on_message_in_memory)
        max_count = max(1, max_count)
        byte_cap = cfg.max_transfer_bytes_on_message_in_memory
        max_bytes = byte_cap if max_bytes is None else min(max_bytes, byte_cap)
        scan_limit = max(max_count, MAX_FILTER_SCAN) if tag_hashes is not None else max_count
        log_min = self._log.min_offset
        offset = queue_offset
        offsets: list[int] = []
        runs: list[tuple[int, int]] = []
        run_start = run_end = -1
        total = scanned = filtered = removed = 0
        full = False
        while not full and offset < max_offset and scanned < scan_limit:
            entries = cq.read(offset, min(scan_limit - scanned, max_offset - offset))
            if not entries:
                break
            for physical_offset, size, tags_code in entries:
                if size == FILLER_SIZE:
                    pass
                elif physical_offset < log_min:
                    removed += 1
                elif tag_hashes is not None and tags_code not in tag_hashes:
                    filtered += 1
                else:
                    if offsets and total + size > max_bytes:
                        full = True
                        break
                    offsets.append(physical_offset)
                    if physical_offset != run_end:
                        if run_start >= 0:
                            runs.append((run_start, run_end))
                        run_start = run_end = physical_offset
                    run_end += size
                    total += size
                offset += 1
                scanned += 1
                if len(offsets) >= max_count:
                    full = True
                    break
        if run_start >= 0:
            runs.append((run_start, run_end))
        if filtered:
            miss = GetMessageStatus.NO_MATCHED_MESSAGE
        elif removed:
            miss = GetMessageStatus.MESSAGE_WAS_REMOVING
        else:
            miss = GetMessageStatus.OFFSET_FOUND_NULL
        return QueueSelection(GetMessageStatus.FOUND if offsets else miss, offsets, runs, total, offset,
                              min_offset, max_offset, miss)

    def read_message(self, physical_offset: int) -> MessageRecord | None:
        """The record at a commit log offset (e.g. from an offset message id)."""
        return self._log.read(physical_offset)

    def read_messages(self, physical_offsets: Iterable[int]) -> list[MessageRecord | None]:
        """The records at commit log offsets (None where there is none)."""
        return self._log.read_many(physical_offsets)

    def query_by_key(self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**62, limit: int = 64,
                     unique: bool = False) -> list[MessageRecord]:
        """Messages of ``topic`` with business key ``key`` (or, ``unique``, with the unique
        client message id ``key``) stored within ``[begin_ms, end_ms]``: newest first, at most
        ``limit``, through the message index (``[]`` when it is off). Every candidate is read
        and checked, so hash collisions and stale entries never show."""
        index = self.index
        if index is None or limit <= 0:
            return []
        candidates = index.lookup(topic, key, begin_ms, end_ms, limit + 16)
        out: list[MessageRecord] = []
        for rec in self._log.read_many(candidates):
            if (rec is None or rec.topic != topic or not begin_ms <= rec.store_timestamp <= end_ms
                    or (rec.uniq_key != key if unique else key not in rec.keys and rec.uniq_key != key)):
                continue
            out.append(rec)
            if len(out) >= limit:
                break
        return out

    def queue_entries(self, topic: str, queue_id: int, queue_offset: int,
                      max_count: int) -> list[tuple[int, int, int]]:
        """Raw consume queue entries ``(commit log offset, size, tag hash code)`` from
        ``queue_offset`` on, for callers that pick records themselves (raw pulls): up to
        ``max_count``, all from one consume queue file, so possibly fewer (call again from the
        next offset). ``[]`` for an unknown queue or an offset outside
        ``[min_queue_offset, max_queue_offset)``. Filler entries (``size ==``
        :data:`~services.broker.storage.consumequeue.FILLER_SIZE`) are included, and entries
        may point below :attr:`min_offset` (their records are deleted): skip both."""
        cq = self._cq.get(topic, queue_id)
        return cq.read(queue_offset, max_count) if cq is not None else []

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cq.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message gets (= messages ever stored in the queue)."""
        cq = self._cq.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def queue_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``
        (``max_queue_offset`` if none; binary search over store timestamps)."""
        cq = self._cq.get(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.get(mid)
            ts = self._log.store_timestamp_at(entry[0]) if entry is not None else None
            if ts is None or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def set_max_message_size(self, size: int) -> None:
        """maxMessageSize changed live (validated by the config rules)."""
        self._max_message_size = self._log.max_message_size = size

    @property
    def unopened_queue_count(self) -> int:
        """Consume queues found on disk at start and not opened yet (they open on first use)."""
        return self._cq.unopened_count

    def topics(self) -> dict[str, list[int]]:
        """Topic -> queue ids that have a consume queue."""
        return self._cq.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self._cq.topics().get(topic, [])

    # ==========================================================================================
    # commit log level (replication, admin)
    # ==========================================================================================

    @property
    def max_offset(self) -> int:
        """Commit log offset past the last byte written (slave: may be mid-record)."""
        return self._log.max_offset

    @property
    def min_offset(self) -> int:
        return self._log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self._log.flushed_offset

    @property
    def dispatched_offset(self) -> int:
        """Commit log offset up to which whole records are indexed in the consume queues."""
        return self._log.dispatched_offset

    def get_data(self, offset: int, max_bytes: int) -> SegmentSlice | None:
        """Zero-copy commit log bytes from ``offset`` (at most ``max_bytes``, within one
        segment); None if nothing is there yet. Release it (or use ``with``)."""
        return self._log.get_data(offset, max_bytes)

    def append_data(self, start_offset: int, data: ReadableBuffer | Sequence[ReadableBuffer]) -> int:
        """Slave: append replicated bytes verbatim at ``start_offset`` (must equal
        :attr:`max_offset`; an empty store accepts a segment boundary); ``data`` is one buffer
        or several back to back. The bytes are in the commit log when this returns; the reput
        thread validates and dispatches the whole records soon after (see
        :meth:`wait_dispatched`). Returns the new max offset. Raises
        :class:`~services.broker.storage.logerrors.OffsetMismatchError` or
        :class:`~services.broker.storage.logerrors.CorruptDataError` (an invalid record the
        dispatcher found in earlier data: the log is cut back to it)."""
        if not self._running:
            raise StoreClosedError("message store is not running")
        return self.queue_data(start_offset, data).result()

    def queue_data(self, start_offset: int,
                   data: ReadableBuffer | Sequence[ReadableBuffer]) -> Future[int]:
        """:meth:`append_data` that may return before a bulk append's bytes are in the file:
        the future gets the new max offset once they are (or what their write raised), while
        the next call already goes on; the next ``start_offset`` is where this one ends. The
        buffers may be reused when this returns (see
        :meth:`~services.broker.storage.replica.ReplicaAppends.queue_data`)."""
        if not self._running:
            raise StoreClosedError("message store is not running")
        return self._watched(self._log.queue_data(start_offset, data))

    def ring_space(self, start_offset: int, size: int) -> list[memoryview] | None:
        """Slave: writable views of the dispatch ring to receive the ``size`` bytes at
        ``start_offset`` into, then append with :meth:`queue_received` (no copy); None when
        they must go through :meth:`queue_data` (see
        :meth:`~services.broker.storage.replica.ReplicaAppends.ring_space`)."""
        if not self._running:
            raise StoreClosedError("message store is not running")
        return self._log.ring_space(start_offset, size)

    def queue_received(self, start_offset: int, size: int) -> Future[int]:
        """:meth:`queue_data` of the bytes received into the views of :meth:`ring_space`."""
        if not self._running:
            raise StoreClosedError("message store is not running")
        return self._watched(self._log.queue_received(start_offset, size))

    def _watched(self, done: Future[int]) -> Future[int]:
        """``done``, the listeners told of the new max offset once it is set (if any listen)."""
        if self._listeners:
            done.add_done_callback(self._notify_written)
        return done

    def _notify_written(self, done: Future[int]) -> None:
        if done.exception() is None:
            self._notify(done.result())

    def truncate_dirty(self, offset: int) -> None:
        """Cut the commit log back to ``offset`` (a record boundary) and drop consume queue
        entries past it, e.g. for a slave whose log diverged from a new master's."""
        with self._log.lock:
            self._log.truncate_locked(offset)
            self._cq.truncate_dirty(self._log.max_offset)
        if self.index is not None:
            self.index.truncate(self._log.max_offset)
        if self._group_commit is not None:
            self._group_commit.reset(self._log.flushed_offset)
        log.warning("commit log truncated to %d", self._log.max_offset)

    def delete_topic(self, topic: str) -> int:
        """Drop the topic's consume queues (its records stay in the commit log until they
        expire). Returns the number of queues deleted."""
        with self._log.lock:
            return self._cq.delete_topic(topic)

    def delete_expired(self, now: int | None = None) -> int:
        """Delete commit log segments older than ``fileReservedTime`` (never the active one or
        one being read) and consume queue files wholly below the commit log min offset.
        ``now`` in ms (default: the clock). Returns the number of files deleted."""
        now = now_ms() if now is None else now
        deleted = self._log.delete_expired(now, self.config.file_reserved_time * 3_600_000)
        with self._log.lock:
            deleted += self._cq.delete_expired(self._log.min_offset)
        if self.index is not None:
            deleted += self.index.delete_below(self._log.min_offset)
        return deleted

    # ==========================================================================================
    # maintenance thread
    # ==========================================================================================

    def _maintain(self) -> None:
        cfg = self.config
        now = time.monotonic()
        if now >= self._next_cq_flush:
            self._next_cq_flush = now + cfg.flush_interval_consume_queue / 1000
            self._flush_consume_queues()
        if now >= self._next_clean:
            self._next_clean = now + cfg.clean_resource_interval / 1000
            self.delete_expired()

    def _flush_consume_queues(self) -> None:
        # Read the offsets first: everything they cover is written before the flushes start.
        logics_offset = self._log.dispatched_offset
        physic_ts = self._log.last_store_timestamp
        physic_offset = self._log.flushed_offset
        self._cq.flush(0)
        if self.index is not None:
            self.index.flush()
        self._checkpoint.save(Checkpoint(physic_msg_timestamp=physic_ts, logics_msg_timestamp=now_ms(),
                                         physic_offset=physic_offset, logics_offset=logics_offset))


def _selection(status: GetMessageStatus, next_begin: int, min_offset: int, max_offset: int) -> QueueSelection:
    """A selection that picked nothing because the offset is outside the queue."""
    return QueueSelection(status, [], [], 0, next_begin, min_offset, max_offset, status)

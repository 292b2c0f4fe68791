"""The timer service: builds the timer index from the timer topic and, on masters, delivers due
messages to their real topic.

Records:
- queue 0 of :data:`~services.broker.validation.TIMER_TOPIC`: timer messages, written by the
  send path with ``TIMER_DELIVER_MS`` and their real topic/queue in ``REAL_TOPIC``/``REAL_QID``;
- queue 1: done records, one per delivery batch, whose body lists the delivered entries' commit
  log offsets. A delivery appends the real messages and their done record in ONE store append.

Both queues are in the commit log, so a slave builds the same index by following them. The
index is snapshotted (``<store>/timer/snapshot``) every ``timerFlushIntervalMs`` when it changed;
on start the snapshot is loaded and both queues are replayed from the snapshot's offsets (the
entries queue first, then the done queue), so the index is exactly "timer messages stored minus
those delivered", whatever happened to the process. A master delivers only after that replay
reached the end of both queues. See docs/timer-and-transactions.md for the guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client import Counter, Histogram

from services.broker.delay import restore_message
from services.broker.longpoll import QueueNotifier
from services.broker.metadata.base import write_file_atomic
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.systopic import QueueReader, clamp_offset, follow
from services.broker.timer.index import (
    Snapshot,
    TimerEntry,
    TimerIndex,
    decode_done,
    decode_snapshot,
    encode_done,
    encode_snapshot,
)
from services.broker.validation import TIMER_TOPIC

log = logging.getLogger(__name__)

ENTRIES_QUEUE = 0
DONE_QUEUE = 1
#: The timer topic's queue count.
TIMER_QUEUES = 2
#: How long an idle follower waits for new timer records before looking again.
IDLE_WAIT_S = 5.0
#: How long a delivery that the store refused waits before it is retried.
RETRY_DELAY_S = 1.0
_LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)

Append = Callable[[Sequence[record.Message]], PutResult]


def deliver_ms_of(rec: record.MessageRecord) -> int | None:
    value = rec.properties.get(record.PROPERTY_TIMER_DELIVER_MS)
    return int(value) if value is not None and value.isdigit() else None


class TimerService:
    def __init__(
        self,
        store: QueueReader,
        snapshot_path: Path,
        *,
        append: Append,
        notifier: QueueNotifier,
        master: bool,
        flush_interval_s: float = 1.0,
        deliver_batch: int = 64,
        store_host: record.Host = ("127.0.0.1", 0),
        registry_labels: tuple[object, list[str]] | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.snapshot_path = snapshot_path
        self.append = append
        self.notifier = notifier
        self.master = master
        self.flush_interval_s = flush_interval_s
        self.deliver_batch = deliver_batch
        self.store_host = store_host
        self.clock_ms = clock_ms
        self.index = TimerIndex()
        self.entries_offset = 0
        self.done_offset = 0
        self.delivered = 0
        self.lost = 0
        self.last_lateness_ms = 0
        #: The earliest due time as of the last index change (read by the metrics thread, which
        #: must not touch the heap itself).
        self.next_due_ms: int | None = None
        self._dirty = False
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._delivered_counter: Counter | None = None
        self._lateness: Histogram | None = None
        if registry_labels is not None:
            registry, ident = registry_labels
            names = ["cluster", "broker", "broker_id"]
            self._delivered_counter = Counter(
                "pocketmq_broker_timer_delivered_messages", "Timer messages delivered to their topic.",
                names, registry=registry).labels(*ident)  # type: ignore[arg-type]
            self._lateness = Histogram(
                "pocketmq_broker_timer_lateness_seconds",
                "How late timer messages were delivered (store time - delivery time).",
                names, buckets=_LATENESS_BUCKETS, registry=registry).labels(*ident)  # type: ignore[arg-type]

    # -- index ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Load the snapshot (if any, and valid) and replay the timer queues to their end."""
        snapshot: Snapshot | None = None
        try:
            snapshot = decode_snapshot(self.snapshot_path.read_bytes())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("timer snapshot unreadable; rebuilding the timer index from the timer topic",
                      extra={"file": str(self.snapshot_path), "error": str(exc)})
        if snapshot is not None:
            self.index = TimerIndex(snapshot.pending)
            self.entries_offset, self.done_offset = snapshot.entries_offset, snapshot.done_offset
        else:
            self.index = TimerIndex()
            self.entries_offset = self.done_offset = 0
        self.entries_offset = clamp_offset(self.store, TIMER_TOPIC, ENTRIES_QUEUE, self.entries_offset)
        self.done_offset = clamp_offset(self.store, TIMER_TOPIC, DONE_QUEUE, self.done_offset)
        started = time.monotonic()
        replayed = self.catch_up(limit=None)
        repaired = self.repair_torn_delivery() if self.master else 0
        log.info("timer index loaded", extra={
            "snapshot": snapshot is not None, "pending": len(self.index), "replayed": replayed,
            "repaired": repaired, "seconds": round(time.monotonic() - started, 3)})

    def repair_torn_delivery(self) -> int:
        """Find delivered messages whose done record a crash cut off, and write it.

        A delivery is one append of the messages and then their done record; at a commit log
        segment boundary that append is two writes, so a crash between them can keep messages
        without their done record. Such messages are the last records of their queues, and
        their entries are among the earliest due: check the tails of those queues for a record
        naming the entry (TIMER_SOURCE_OFFSET)."""
        due = sorted(e for e in self.index.entries() if e.deliver_ms <= self.clock_ms())[:self.deliver_batch]
        found: list[int] = []
        tails: dict[tuple[str, int], set[str]] = {}
        for entry in due:
            rec = self.store.read_message(entry.offset)
            msg = restore_message(rec) if rec is not None else None
            if msg is None:
                continue
            key = (msg.topic, msg.queue_id)
            if key not in tails:
                tails[key] = self._tail_sources(*key)
            if str(entry.offset) in tails[key]:
                found.append(entry.offset)
        if not found:
            return 0
        done = record.Message(TIMER_TOPIC, encode_done(found), DONE_QUEUE, born_timestamp=self.clock_ms(),
                              born_host=self.store_host)
        result = self.append([done])
        if not result.stored:
            raise RuntimeError(f"cannot write the repaired timer done record: {result.status.name}")
        for offset in found:
            self.index.remove(offset)
        self.catch_up(limit=None)
        log.warning("timer deliveries completed after a crash cut off their done record",
                    extra={"messages": len(found)})
        return len(found)

    def _tail_sources(self, topic: str, queue_id: int) -> set[str]:
        """TIMER_SOURCE_OFFSET values of the last ``deliver_batch`` records of a queue."""
        end = self.store.max_queue_offset(topic, queue_id)
        start = max(self.store.min_queue_offset(topic, queue_id), end - self.deliver_batch)
        sources: set[str] = set()
        for _next, rec in follow(self.store, topic, queue_id, start, end - start):
            if rec is not None:
                value = rec.properties.get(record.PROPERTY_TIMER_SOURCE_OFFSET)
                if value is not None:
                    sources.add(value)
        return sources

    def catch_up(self, limit: int | None = 4096) -> int:
        """Index new records of the entries queue, then of the done queue (a done record always
        follows the entries it names in the commit log). Returns the records read."""
        budget = limit if limit is not None else 1 << 62
        before = self.index.next_due()
        count = 0
        for next_offset, rec in follow(self.store, TIMER_TOPIC, ENTRIES_QUEUE, self.entries_offset, budget):
            self.entries_offset = next_offset
            count += 1
            if rec is None:
                continue
            due = deliver_ms_of(rec)
            if due is None:
                log.error("timer record without a valid TIMER_DELIVER_MS ignored",
                          extra={"offset": rec.physical_offset})
                continue
            self.index.add(TimerEntry(due, rec.physical_offset, rec.store_size))
        for next_offset, rec in follow(self.store, TIMER_TOPIC, DONE_QUEUE, self.done_offset, budget):
            self.done_offset = next_offset
            count += 1
            if rec is None:
                continue
            try:
                for offset in decode_done(rec.body):
                    self.index.remove(offset)
            except ValueError as exc:
                log.error("bad timer done record ignored", extra={"offset": rec.physical_offset,
                                                                  "error": str(exc)})
        if count:
            self._dirty = True
            after = self.next_due_ms = self.index.next_due()
            if after is not None and (before is None or after < before):
                self._wake.set()
        return count

    def caught_up(self) -> bool:
        return (self.entries_offset >= self.store.max_queue_offset(TIMER_TOPIC, ENTRIES_QUEUE)
                and self.done_offset >= self.store.max_queue_offset(TIMER_TOPIC, DONE_QUEUE))

    def snapshot_bytes(self) -> bytes:
        return encode_snapshot(Snapshot(self.entries_offset, self.done_offset, self.index.entries()))

    async def save_snapshot(self) -> None:
        """Write the snapshot if the index changed (state captured on the loop, written in a
        thread)."""
        if not self._dirty:
            return
        self._dirty = False
        data = self.snapshot_bytes()
        try:
            await asyncio.to_thread(write_file_atomic, self.snapshot_path, data)
        except OSError as exc:
            self._dirty = True
            log.error("cannot write the timer snapshot", extra={"file": str(self.snapshot_path),
                                                                 "error": str(exc)})

    @property
    def pending(self) -> int:
        return len(self.index)

    def lag_ms(self) -> int:
        """How far behind its due time the earliest pending message is (0 when none is due).
        Safe from any thread."""
        due = self.next_due_ms
        return 0 if due is None else max(0, self.clock_ms() - due)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow_loop(), name="timer-follow"))
        self._tasks.append(asyncio.create_task(self._snapshot_loop(), name="timer-snapshot"))
        if self.master:
            self._tasks.append(asyncio.create_task(self._deliver_loop(), name="timer-deliver"))
        log.info("timer service started", extra={"master": self.master, "pending": self.pending})

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._dirty = True
        await self.save_snapshot()

    async def _sleep(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(0.0, seconds))
        return self._stop.is_set()

    async def _follow_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.catch_up() == 0:
                    await self.notifier.wait(TIMER_TOPIC, ENTRIES_QUEUE, self.entries_offset, IDLE_WAIT_S)
                else:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer index update failed, retrying")
                await self._sleep(RETRY_DELAY_S)

    async def _snapshot_loop(self) -> None:
        while not await self._sleep(self.flush_interval_s):
            await self.save_snapshot()

    async def _deliver_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self._deliver_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer delivery failed, retrying")
                await self._sleep(RETRY_DELAY_S)

    async def _deliver_round(self) -> None:
        # Deliver only what the index knows is undelivered: every done record read first.
        self.catch_up(limit=None)
        now = self.clock_ms()
        due = self.index.pop_due(now, self.deliver_batch)
        self.next_due_ms = self.index.next_due()
        if not due:
            nxt = self.next_due_ms
            self._wake.clear()
            wait_s = IDLE_WAIT_S if nxt is None else min(IDLE_WAIT_S, (nxt - now) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.001, wait_s))
            return
        # No await between popping and appending: a snapshot never sees the entries gone
        # without their done record in the log.
        messages: list[record.Message] = []
        for entry in due:
            rec = self.store.read_message(entry.offset)
            msg = restore_message(rec) if rec is not None else None
            if msg is None:
                self.lost += 1
                log.error("timer message unreadable or without REAL_TOPIC/REAL_QID; dropped",
                          extra={"offset": entry.offset})
                continue
            messages.append(msg._replace(properties={
                **msg.properties, record.PROPERTY_TIMER_SOURCE_OFFSET: str(entry.offset)}))
        done = record.Message(TIMER_TOPIC, encode_done(e.offset for e in due), DONE_QUEUE,
                              born_timestamp=now, born_host=self.store_host)
        result = self.append([*messages, done])
        if not result.stored:
            for entry in due:
                self.index.add(entry)
            log.warning("timer delivery refused by the store, will retry",
                        extra={"status": result.status.name, "error": result.error})
            await self._sleep(RETRY_DELAY_S)
            return
        self._dirty = True
        self.delivered += len(messages)
        stored_at = self.clock_ms()
        self.last_lateness_ms = stored_at - due[-1].deliver_ms
        if self._delivered_counter is not None and messages:
            self._delivered_counter.inc(len(messages))
        if self._lateness is not None:
            for entry in due:
                self._lateness.observe(max(0, stored_at - entry.deliver_ms) / 1000)
        await asyncio.sleep(0)

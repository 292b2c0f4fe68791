"""POP consumption on a master broker: pop, ack, change invisible time, revive, dead letters.

State lives in the commit log (CK/ACK records of the revive topic, see :mod:`.state`), so it is
replicated to slaves like any message and rebuilt after a crash by replaying the revive topic
from the last progress point. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from services.broker.longpoll import QueueNotifier
from services.broker.metadata import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.pop.handle import ReceiptHandle
from services.broker.pop.metrics import PopMetrics
from services.broker.pop.model import Popped, PoppedBatch, PopRequest
from services.broker.pop.state import (
    OP_ACK,
    OP_CHECKPOINT,
    OP_RESET,
    PROPERTY_POP_OP,
    AckBatch,
    Checkpoint,
    Ck,
    Entry,
    InFlight,
    QueueKey,
    ResetItem,
    decode_acks,
    decode_reset,
    encode_acks,
    encode_reset,
)
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.storage.store import MessageStore
from services.common.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: Invisible time of push consumers (auto_renew), renewed while their client is connected
#: (defaults; brokers pass defaultInvisibleTimeMills, renewAheadTimeMillis, renewMaxTimeMillis).
AUTO_RENEW_MS = 60_000
RENEW_AHEAD_MS = 10_000
RENEW_MAX_MS = 3 * 3600 * 1000
REVIVE_TICK_S = 0.1
PROGRESS_EVERY_S = 1.0
REPLAY_BATCH = 256
_DROP_PROPS = frozenset({record.PROPERTY_DELAY_TIME_LEVEL, record.PROPERTY_TIMER_DELIVER_MS,
                         record.PROPERTY_REAL_TOPIC, record.PROPERTY_REAL_QUEUE_ID,
                         record.PROPERTY_TRANSACTION_PREPARED, PROPERTY_POP_OP})

Append = Callable[[Sequence[record.Message]], PutResult]
#: (topic, queue id, from offset, max count) -> (records as stored, how many, next offset).
ReadRaw = Callable[[str, int, int, int], tuple[bytes, int, int]]
GroupConfig = Callable[[str], SubscriptionGroupConfig]
Connected = Callable[[str], bool]
_T = TypeVar("_T")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


class PopService:
    def __init__(self, *, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 notifier: QueueNotifier, append: Append, group_config: GroupConfig, cluster: str,
                 broker_name: str, metrics: PopMetrics, connected: Connected = lambda _c: False,
                 read_raw: ReadRaw | None = None, auto_renew_ms: int = AUTO_RENEW_MS,
                 renew_ahead_ms: int = RENEW_AHEAD_MS, renew_max_ms: int = RENEW_MAX_MS) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.notifier = notifier
        self.append = append
        self.read_raw = read_raw
        self.group_config = group_config
        self.broker_name = broker_name
        self.revive_topic = revive_topic(cluster)
        self.metrics = metrics
        self.connected = connected
        self.auto_renew_ms = auto_renew_ms
        self.renew_ahead_ms = renew_ahead_ms
        self.renew_max_ms = renew_max_ms
        self.inflight = InFlight()
        #: (deadline ms, checkpoint id) of every live checkpoint.
        self._heap: list[tuple[int, int]] = []
        self._task: asyncio.Task[None] | None = None
        self._rounds = 0
        self._ensured: set[str] = set()
        self._groups_seen: set[str] = set()
        #: True while this broker is the master of its group and serves pops.
        self.active = False
        metrics.add_gauges(self._gauges)

    # -- role -------------------------------------------------------------------------------

    async def set_role(self, master: bool) -> None:
        """The one entry point of the broker's role (at start and on an in-place switch).
        Master: rebuild the in-flight table from the revive topic (replicated to slaves, so a
        promoted slave has it) and start reviving. Slave: stop reviving and drop the table (it
        goes stale; it is rebuilt from the commit log on the next promotion)."""
        if master == self.active:
            return
        if master:
            self.inflight = InFlight()
            self._heap = []
            await asyncio.to_thread(self.load)
            self._task = asyncio.create_task(self._revive_loop(), name="pop-revive")
            self.active = True
        else:
            await self.stop()
            self.inflight = InFlight()
            self._heap = []
        log.info("pop service role", extra={"master": master, "in_flight": len(self.inflight)})

    def load(self) -> int:
        """Replay the revive topic from the saved progress point; returns records replayed."""
        start = self.offsets.query(REVIVE_GROUP, self.revive_topic, 0) or 0
        offset = max(start, self.store.min_queue_offset(self.revive_topic, 0))
        end = self.store.max_queue_offset(self.revive_topic, 0)
        replayed = 0
        while offset < end:
            result = self.store.get_messages(self.revive_topic, 0, offset, REPLAY_BATCH)
            if not result.messages:
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
                continue
            for rec in result.messages:
                self._replay(rec)
                replayed += 1
            offset = result.next_begin_offset
        for ck in self.inflight:
            heapq.heappush(self._heap, (ck.deadline_ms, ck.ck_id))
        log.info("pop state recovered", extra={"records": replayed, "in_flight": len(self.inflight),
                                               "from_offset": start})
        return replayed

    def _replay(self, rec: record.MessageRecord) -> None:
        op = rec.properties.get(PROPERTY_POP_OP)
        try:
            if op == OP_CHECKPOINT:
                self.inflight.checkpoint(Checkpoint.decode(rec.body), rec.queue_offset)
            elif op == OP_ACK:
                group, acks, resets = decode_acks(rec.body)
                for topic, qid, ck_id, offsets in acks:
                    ck = self.inflight.live(group, topic, qid, ck_id)
                    if ck is not None:
                        self.inflight.discard(ck, offsets)
                for topic, qid, offset, attempt in resets:
                    self.inflight.reset((group, topic, qid, offset), attempt)
            elif op == OP_RESET:
                group, topic, positions = decode_reset(rec.body)
                for qid, offset in positions.items():
                    self.inflight.drop_queue((group, topic, qid), offset)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("unreadable pop record skipped", extra={"offset": rec.queue_offset, "error": str(exc)})

    async def stop(self) -> None:
        self.active = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self._save_progress()

    def _check_active(self) -> None:
        if not self.active:
            raise FailedPreconditionError(f"broker {self.broker_name} is not the master of its group: "
                                          "pop from the master")

    # -- pop --------------------------------------------------------------------------------

    def _cursor(self, qk: QueueKey) -> int:
        cursor = self.inflight.cursors.get(qk)
        committed = self.offsets.query(*qk)
        if cursor is None:
            cursor = committed if committed is not None else self.store.min_queue_offset(qk[1], qk[2])
        elif committed is not None and committed > cursor:
            cursor = committed
        return cursor

    def _queues(self, req: PopRequest) -> list[tuple[str, int]]:
        tc = self.topics.get(req.topic)
        if tc is None:
            raise InvalidArgumentError(f"topic {req.topic!r} does not exist on broker {self.broker_name}")
        n = tc.read_queue_nums
        start = req.queue_id if 0 <= req.queue_id < n else self._rounds % max(n, 1)
        queues = [(req.topic, (start + i) % n) for i in range(n)]
        retry = (retry_topic(req.group), 0)
        self._rounds += 1
        # Alternate which comes first so neither retries nor new messages starve.
        return [retry, *queues] if self._rounds % 2 else [*queues, retry]

    async def pop(self, req: PopRequest, stopping: Callable[[], bool]) -> list[Popped]:
        """Pop up to ``req.batch`` messages, one :class:`Popped` each (the RocketMQ 5 API)."""
        return await self._poll(req, stopping, self._pop_queue)

    async def pop_batches(self, req: PopRequest, stopping: Callable[[], bool]) -> list[PoppedBatch]:
        """Pop up to ``req.batch`` messages, one :class:`PoppedBatch` per checkpoint."""
        return await self._poll(req, stopping, self._pop_batch)

    async def _poll(self, req: PopRequest, stopping: Callable[[], bool],
                    take: Callable[[PopRequest, str, int, int, bool], tuple[list[_T], int]]) -> list[_T]:
        deadline = time.monotonic() + req.poll_s
        fifo = self.group_config(req.group).consume_message_orderly
        while True:
            # Also after a long-poll wait: the broker may have become a slave meanwhile.
            self._check_active()
            queues = self._queues(req)
            out: list[_T] = []
            n = 0
            for topic, qid in queues:
                if n >= req.batch:
                    break
                items, k = take(req, topic, qid, req.batch - n, fifo)
                out.extend(items)
                n += k
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stopping() or self.notifier.closed or not self.active:
                return out
            waits = [asyncio.ensure_future(self.notifier.wait(t, q, self.store.max_queue_offset(t, q) - 1,
                                                              remaining)) for t, q in queues]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _take_decoded(self, req: PopRequest, topic: str, qid: int, n: int,
                      fifo: bool) -> tuple[list[record.MessageRecord], Ck | None]:
        qk: QueueKey = (req.group, topic, qid)
        if fifo and self.inflight.busy(qk):
            return [], None
        cursor = self._cursor(qk)
        if cursor >= self.store.max_queue_offset(topic, qid):
            return [], None
        result = self.store.get_messages(topic, qid, cursor, n, tag_hashes=req.tag_filter.hash_codes)
        recs = [r for r in result.messages if req.tag_filter.matches(r.tags)]
        if result.next_begin_offset > cursor:
            self.inflight.cursors[qk] = result.next_begin_offset
        if not recs:
            self._commit(qk)
            return [], None
        fifo_attempts = self.inflight.fifo_attempts
        attempts = tuple(fifo_attempts.pop((req.group, topic, qid, r.queue_offset), r.reconsume_times + 1)
                         for r in recs)
        return recs, self._checkpoint(req, topic, qid, tuple(r.queue_offset for r in recs), attempts)

    def _checkpoint(self, req: PopRequest, topic: str, qid: int, offsets: tuple[int, ...],
                    attempts: tuple[int, ...]) -> Ck:
        now = int(time.time() * 1000)
        ck = Checkpoint(req.group, topic, qid, offsets, attempts, now, now + req.invisible_ms,
                        req.client_id, req.auto_renew)
        ck_id = self._write(OP_CHECKPOINT, ck.encode())
        live = self.inflight.checkpoint(ck, ck_id)
        heapq.heappush(self._heap, (live.deadline_ms, ck_id))
        self._commit(live.qk)
        self.metrics.popped(req.group, len(offsets))
        self._groups_seen.add(req.group)
        return live

    def _pop_queue(self, req: PopRequest, topic: str, qid: int, n: int,
                   fifo: bool) -> tuple[list[Popped], int]:
        recs, ck = self._take_decoded(req, topic, qid, n, fifo)
        if ck is None:
            return [], 0
        out = []
        for rec in recs:
            entry = ck.entry(rec.queue_offset)
            subscribed = rec.properties.get(record.PROPERTY_RETRY_TOPIC, topic)
            out.append(Popped(rec, entry, self._handle(entry), subscribed))
        return out, len(out)

    def _pop_batch(self, req: PopRequest, topic: str, qid: int, n: int,
                   fifo: bool) -> tuple[list[PoppedBatch], int]:
        if fifo or not req.tag_filter.matches_all or self.read_raw is None:
            return self._decoded_batch(req, topic, qid, n, fifo)
        qk: QueueKey = (req.group, topic, qid)
        cursor = self._cursor(qk)
        end = self.store.max_queue_offset(topic, qid)
        if cursor >= end:
            return [], 0
        parts: list[bytes] = []
        offsets: list[int] = []
        pos = cursor
        while len(offsets) < n and pos < end:
            data, found, nxt = self.read_raw(topic, qid, pos, n - len(offsets))
            if found == 0:
                if nxt <= pos:
                    break
                pos = nxt  # filler entries or deleted records: skipped
                continue
            if nxt - pos != found:
                # Entries skipped among the records: only decoding tells which offsets they are.
                if not offsets:
                    return self._decoded_batch(req, topic, qid, n, fifo)
                break
            parts.append(data)
            offsets.extend(range(pos, nxt))
            pos = nxt
        if pos > cursor:
            self.inflight.cursors[qk] = max(pos, self.inflight.cursors.get(qk, 0))
        if not offsets:
            self._commit(qk)
            return [], 0
        ck = self._checkpoint(req, topic, qid, tuple(offsets), ())
        return [PoppedBatch(topic, qid, ck.ck_id, ck.pop_ms, ck.deadline_ms, offsets, (),
                            records=b"".join(parts))], len(offsets)

    def _decoded_batch(self, req: PopRequest, topic: str, qid: int, n: int,
                       fifo: bool) -> tuple[list[PoppedBatch], int]:
        recs, ck = self._take_decoded(req, topic, qid, n, fifo)
        if ck is None:
            return [], 0
        return [PoppedBatch(topic, qid, ck.ck_id, ck.pop_ms, ck.deadline_ms, list(ck.pending),
                            tuple(ck.pending.values()), recs=recs)], len(recs)

    def _handle(self, entry: Entry) -> ReceiptHandle:
        _g, topic, qid, offset = entry.key
        return ReceiptHandle(topic, qid, offset, entry.ck_id, entry.deadline_ms, self.broker_name)

    def _write(self, op: str, body: bytes) -> int:
        result = self.append([record.Message(self.revive_topic, body, 0, 0, {PROPERTY_POP_OP: op})])
        if not result.stored:
            raise UnavailableError(f"cannot store pop state: {result.error or result.status.name}")
        return int(result.queue_offsets[0])

    def reset_queues(self, group: str, topic: str, positions: dict[int, int]) -> None:
        """The group's offsets of queues of ``topic`` were reset (queue id -> new offset): POP
        consumers read from there next (messages popped and not acked are dropped; their
        receipts become invalid). The queues this service holds a position of get a RESET
        record first, so a restart replaying their older checkpoints ends at the new position."""
        moved = {qid: off for qid, off in positions.items()
                 if (qk := (group, topic, qid)) in self.inflight.cursors or self.inflight.busy(qk)}
        if not moved:
            return
        if self.active:
            self._write(OP_RESET, encode_reset(group, topic, moved))
        for qid, offset in moved.items():
            self.inflight.drop_queue((group, topic, qid), offset)
        log.info("pop positions reset", extra={"group": group, "topic": topic,
                                                "queues": ",".join(f"{q}:{o}" for q, o in moved.items())})

    def _commit(self, qk: QueueKey) -> None:
        offset = self.inflight.committable(qk)
        if offset is not None:
            self.offsets.commit(qk[0], qk[1], qk[2], offset)

    # -- ack / change / forward -------------------------------------------------------------

    def _live(self, group: str, handle: ReceiptHandle) -> Ck:
        ck = self.inflight.live(group, handle.topic, handle.queue_id, handle.ck_id)
        if ck is None or handle.offset not in ck.pending:
            raise FailedPreconditionError(
                "receipt handle is no longer valid (acked, expired and redelivered, or replaced by "
                "ChangeInvisibleDuration)")
        return ck

    def ack(self, group: str, handles: Sequence[ReceiptHandle]) -> list[str]:
        """Ack each handle; returns "" per handle acked, else why not."""
        self._check_active()
        results: list[str] = []
        todo: dict[int, tuple[Ck, list[int]]] = {}
        for handle in handles:
            try:
                ck = self._live(group, handle)
            except FailedPreconditionError as exc:
                results.append(str(exc))
                continue
            todo.setdefault(ck.ck_id, (ck, []))[1].append(handle.offset)
            results.append("")
        if todo:
            self._resolve(group, list(todo.values()))
        return results

    def ack_batches(self, group: str, batches: Sequence[AckBatch]) -> tuple[int, list[AckBatch]]:
        """Ack whole batches of offsets per checkpoint (one ACK record for all); returns how
        many were acked and the offsets that were not (no longer in flight)."""
        self._check_active()
        todo: list[tuple[Ck, list[int]]] = []
        failed: list[AckBatch] = []
        for topic, qid, ck_id, offsets in batches:
            ck = self.inflight.live(group, topic, qid, ck_id)
            if ck is None:
                failed.append((topic, qid, ck_id, offsets))
                continue
            pending = ck.pending
            ok = [o for o in offsets if o in pending]
            if len(ok) != len(offsets):
                failed.append((topic, qid, ck_id, [o for o in offsets if o not in pending]))
            if ok:
                todo.append((ck, ok))
        return (self._resolve(group, todo) if todo else 0), failed

    def _resolve(self, group: str, todo: Sequence[tuple[Ck, Sequence[int]]],
                 resets: Sequence[ResetItem] = (), *, count_acked: bool = True) -> int:
        """Ack offsets of checkpoints durably (one ACK record); ``resets``: FIFO messages handed
        out again from their own queue at their next attempt."""
        self._write(OP_ACK, encode_acks(group, [(ck.topic, ck.queue_id, ck.ck_id, offs) for ck, offs in todo],
                                        resets))
        done = 0
        queues: set[QueueKey] = set()
        for ck, offs in todo:
            done += len(self.inflight.discard(ck, offs))
            queues.add(ck.qk)
        for topic, qid, offset, attempt in resets:
            self.inflight.reset((group, topic, qid, offset), attempt)
        for qk in queues:
            self._commit(qk)
        if count_acked and done:
            self.metrics.acked(group, done)
        return done

    def _change(self, ck: Ck, offsets: Sequence[int], invisible_ms: int) -> Ck:
        now = int(time.time() * 1000)
        attempts = tuple(ck.pending[o] for o in offsets)
        new = Checkpoint(ck.group, ck.topic, ck.queue_id, tuple(offsets), attempts, ck.pop_ms,
                         now + invisible_ms, ck.client_id, False, ck.ck_id)
        ck_id = self._write(OP_CHECKPOINT, new.encode())
        live = self.inflight.checkpoint(new, ck_id)
        heapq.heappush(self._heap, (live.deadline_ms, ck_id))
        self.metrics.nacked(ck.group, len(offsets))
        return live

    def change_invisible(self, group: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        self._check_active()
        ck = self._change(self._live(group, handle), [handle.offset], invisible_ms)
        return self._handle(ck.entry(handle.offset))

    def change_batches(self, group: str, batches: Sequence[AckBatch],
                       invisible_ms: int) -> tuple[list[Ck], list[AckBatch]]:
        """ChangeInvisibleDuration for whole batches: one new checkpoint per old one."""
        self._check_active()
        out: list[Ck] = []
        failed: list[AckBatch] = []
        for topic, qid, ck_id, offsets in batches:
            ck = self.inflight.live(group, topic, qid, ck_id)
            pending = ck.pending if ck is not None else {}
            ok = [o for o in dict.fromkeys(offsets) if o in pending]
            missing = [o for o in offsets if o not in pending]
            if missing:
                failed.append((topic, qid, ck_id, missing))
            if ck is not None and ok:
                out.append(self._change(ck, ok, invisible_ms))
        return out, failed

    def forward_to_dlq(self, group: str, handle: ReceiptHandle) -> None:
        self._check_active()
        ck = self._live(group, handle)
        rec = self._read(ck.topic, ck.queue_id, handle.offset)
        if rec is not None:
            self._put_again(dlq_topic(group), rec, self._attempt(ck.pending[handle.offset], rec))
            self.metrics.dead_lettered(group)
        self._resolve(group, [(ck, [handle.offset])])

    # -- revive -----------------------------------------------------------------------------

    def _read(self, topic: str, qid: int, offset: int) -> record.MessageRecord | None:
        result = self.store.get_messages(topic, qid, offset, 1)
        return result.messages[0] if result.messages and result.messages[0].queue_offset == offset else None

    @staticmethod
    def _attempt(stored: int, rec: record.MessageRecord | None) -> int:
        if stored:
            return stored
        return rec.reconsume_times + 1 if rec is not None else 1

    def _ensure(self, topic: str) -> None:
        if topic not in self._ensured:
            if self.topics.get(topic) is None:
                self.topics.ensure_system_topic(TopicConfig(topic, 1, 1))
            self._ensured.add(topic)

    def _put_again(self, topic: str, rec: record.MessageRecord, attempt: int) -> None:
        props = {k: val for k, val in rec.properties.items() if k not in _DROP_PROPS}
        props.setdefault(record.PROPERTY_RETRY_TOPIC, rec.topic)
        props.setdefault(record.PROPERTY_ORIGIN_MESSAGE_ID, rec.msg_id)
        # The consumer sees the same message id on every attempt.
        props.setdefault(record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, rec.msg_id)
        self._ensure(topic)
        result = self.append([record.Message(topic, rec.body, 0, rec.flag, props, rec.born_timestamp,
                                             rec.born_host, rec.sys_flag & 0x3, attempt)])
        if not result.stored:
            raise UnavailableError(f"cannot store to {topic}: {result.error or result.status.name}")

    def revive(self, ck: Ck) -> None:
        """Every pending message of an expired checkpoint goes to the retry topic (FIFO groups:
        back to its own queue), or after the last attempt to the dead-letter topic."""
        group = ck.group
        config = self.group_config(group)
        fifo = config.consume_message_orderly and not ck.topic.startswith(RETRY_PREFIX)
        done: list[int] = []
        resets: list[ResetItem] = []
        try:
            for offset, stored in list(ck.pending.items()):
                rec = self._read(ck.topic, ck.queue_id, offset)
                attempt = self._attempt(stored, rec)
                last = attempt >= config.retry_max_times + 1
                if rec is not None and fifo and not last:
                    # FIFO: the message stays in its queue, in order, and comes back from there.
                    resets.append((ck.topic, ck.queue_id, offset, attempt + 1))
                    self.metrics.retried(group)
                elif rec is not None and last:
                    self._put_again(dlq_topic(group), rec, attempt)
                    self.metrics.dead_lettered(group)
                    log.info("message dead-lettered", extra={"group": group, "topic": rec.topic,
                                                             "attempts": attempt})
                elif rec is not None:
                    self._put_again(retry_topic(group), rec, attempt)
                    self.metrics.retried(group)
                self.metrics.revived(group)
                done.append(offset)
        finally:
            if done:
                self._resolve(group, [(ck, done)], resets, count_acked=False)

    def _due(self, now_ms: int) -> list[Ck]:
        due: list[Ck] = []
        heap = self._heap
        cks = self.inflight.cks
        while heap and heap[0][0] <= now_ms:
            deadline, ck_id = heapq.heappop(heap)
            ck = cks.get(ck_id)
            if ck is None:
                continue
            if ck.deadline_ms > deadline:  # renewed: wait for the new deadline
                heapq.heappush(heap, (ck.deadline_ms, ck_id))
                continue
            due.append(ck)
        return due

    def _renew(self, now_ms: int) -> None:
        for ck in self.inflight.cks.values():
            if (ck.auto_renew and ck.deadline_ms - now_ms < self.renew_ahead_ms
                    and now_ms - ck.pop_ms < self.renew_max_ms and self.connected(ck.client_id)):
                ck.deadline_ms = now_ms + self.auto_renew_ms
                ck.renewed += 1

    def tick(self) -> int:
        """One revive round; returns how many messages were due."""
        now_ms = int(time.time() * 1000)
        self._renew(now_ms)
        n = 0
        for ck in self._due(now_ms):
            n += len(ck.pending)
            try:
                self.revive(ck)
            except UnavailableError as exc:
                log.warning("revive failed; retried", extra={"error": str(exc)})
                heapq.heappush(self._heap, (now_ms + 1000, ck.ck_id))
        return n

    def _save_progress(self) -> None:
        first = self.inflight.min_ck_id()
        progress = first if first is not None else self.store.max_queue_offset(self.revive_topic, 0)
        if progress != (self.offsets.query(REVIVE_GROUP, self.revive_topic, 0) or 0):  # (none yet = 0)
            self.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, progress)

    async def _revive_loop(self) -> None:
        last_progress = time.monotonic()
        while True:
            await asyncio.sleep(REVIVE_TICK_S)
            try:
                self.tick()
                if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                    self._save_progress()
                    last_progress = time.monotonic()
            except Exception:
                log.exception("pop revive round failed")

    # -- metrics ----------------------------------------------------------------------------

    def _gauges(self) -> dict[str, tuple[int, float]]:
        now = int(time.time() * 1000)
        out: dict[str, tuple[int, float]] = {}
        # Groups that popped before stay exported (0) when nothing is in flight.
        for group in self._groups_seen:
            out[group] = (0, 0.0)
        for group, (n, oldest) in self.inflight.by_group().items():
            out[group] = (n, max(0.0, (now - oldest) / 1000))
        return out

"""POP consumption on a master broker: pop, ack, change invisible time, revive, dead letters.

State lives in the commit log (CK/ACK records of the revive topic, see :mod:`.state`), so it is
replicated to slaves like any message and rebuilt after a crash by replaying the revive topic
from the last progress point. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import time
from collections.abc import Callable, Sequence

from services.broker import validation as v
from services.broker.longpoll import QueueNotifier
from services.broker.metadata import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.pop.handle import ReceiptHandle
from services.broker.pop.metrics import PopMetrics
from services.broker.pop.state import (
    OP_ACK,
    OP_CHECKPOINT,
    PROPERTY_POP_OP,
    Checkpoint,
    Entry,
    InFlight,
    Key,
    QueueKey,
    decode_acks,
    encode_acks,
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
GroupConfig = Callable[[str], SubscriptionGroupConfig]
Connected = Callable[[str], bool]


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


@dataclasses.dataclass(frozen=True)
class Popped:
    rec: record.MessageRecord
    entry: Entry
    handle: ReceiptHandle
    #: The topic the consumer subscribed to (a retry message's original topic).
    topic: str


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


class PopService:
    def __init__(self, *, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 notifier: QueueNotifier, append: Append, group_config: GroupConfig, cluster: str,
                 broker_name: str, metrics: PopMetrics, connected: Connected = lambda _c: False,
                 auto_renew_ms: int = AUTO_RENEW_MS, renew_ahead_ms: int = RENEW_AHEAD_MS,
                 renew_max_ms: int = RENEW_MAX_MS) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.notifier = notifier
        self.append = append
        self.group_config = group_config
        self.broker_name = broker_name
        self.revive_topic = revive_topic(cluster)
        self.metrics = metrics
        self.connected = connected
        self.auto_renew_ms = auto_renew_ms
        self.renew_ahead_ms = renew_ahead_ms
        self.renew_max_ms = renew_max_ms
        self.inflight = InFlight()
        self._heap: list[tuple[int, Key, int]] = []
        self._task: asyncio.Task[None] | None = None
        self._rounds = 0
        self._ensured: set[str] = set()
        self._groups_seen: set[str] = set()
        metrics.add_gauges(self._gauges)

    # -- lifecycle --------------------------------------------------------------------------

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
        for entry in self.inflight:
            heapq.heappush(self._heap, (entry.deadline_ms, entry.key, entry.ck_id))
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
                for topic, qid, offset, ck_id in acks:
                    self.inflight.remove((group, topic, qid, offset), ck_id)
                for topic, qid, offset, attempt in resets:
                    self.inflight.reset((group, topic, qid, offset), attempt)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("unreadable pop record skipped", extra={"offset": rec.queue_offset, "error": str(exc)})

    def start(self) -> None:
        self._task = asyncio.create_task(self._revive_loop(), name="pop-revive")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self._save_progress()

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
        deadline = time.monotonic() + req.poll_s
        fifo = self.group_config(req.group).consume_message_orderly
        while True:
            queues = self._queues(req)
            out: list[Popped] = []
            for topic, qid in queues:
                if len(out) >= req.batch:
                    break
                out.extend(self._pop_queue(req, topic, qid, req.batch - len(out), fifo))
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stopping() or self.notifier.closed:
                return out
            waits = [asyncio.ensure_future(self.notifier.wait(t, q, self.store.max_queue_offset(t, q) - 1,
                                                              remaining)) for t, q in queues]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _pop_queue(self, req: PopRequest, topic: str, qid: int, n: int, fifo: bool) -> list[Popped]:
        qk: QueueKey = (req.group, topic, qid)
        if fifo and self.inflight.busy(qk):
            return []
        cursor = self._cursor(qk)
        if cursor >= self.store.max_queue_offset(topic, qid):
            return []
        result = self.store.get_messages(topic, qid, cursor, n, tag_hashes=req.tag_filter.hash_codes)
        recs = [r for r in result.messages if req.tag_filter.matches(r.tags)]
        if result.next_begin_offset > cursor:
            self.inflight.cursors[qk] = result.next_begin_offset
        if not recs:
            self._commit(qk)
            return []
        now = int(time.time() * 1000)
        fifo_attempts = self.inflight.fifo_attempts
        attempts = tuple(fifo_attempts.pop((req.group, topic, qid, r.queue_offset), r.reconsume_times + 1)
                         for r in recs)
        ck = Checkpoint(req.group, topic, qid, tuple(r.queue_offset for r in recs),
                        attempts, now, now + req.invisible_ms,
                        req.client_id, req.auto_renew)
        ck_id = self._write(OP_CHECKPOINT, ck.encode())
        entries = self.inflight.checkpoint(ck, ck_id)
        if result.next_begin_offset > cursor:
            self.inflight.cursors[qk] = max(result.next_begin_offset, self.inflight.cursors[qk])
        for entry in entries:
            heapq.heappush(self._heap, (entry.deadline_ms, entry.key, ck_id))
        self._commit(qk)
        self.metrics.popped(req.group, len(recs))
        self._groups_seen.add(req.group)
        return [Popped(rec, entry, self._handle(entry),
                       rec.properties.get(record.PROPERTY_RETRY_TOPIC, topic))
                for rec, entry in zip(recs, entries, strict=True)]

    def _handle(self, entry: Entry) -> ReceiptHandle:
        _g, topic, qid, offset = entry.key
        return ReceiptHandle(topic, qid, offset, entry.ck_id, entry.deadline_ms, self.broker_name)

    def _write(self, op: str, body: bytes) -> int:
        result = self.append([record.Message(self.revive_topic, body, 0, 0, {PROPERTY_POP_OP: op})])
        if not result.stored:
            raise UnavailableError(f"cannot store pop state: {result.error or result.status.name}")
        return int(result.queue_offsets[0])

    def reset_queue(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's offset of the queue was reset: POP consumers read from ``offset`` next
        (messages popped and not acked are dropped; their receipts become invalid)."""
        qk: QueueKey = (group, topic, queue_id)
        if qk in self.inflight.cursors or self.inflight.busy(qk):
            self.inflight.drop_queue(qk, offset)

    def _commit(self, qk: QueueKey) -> None:
        offset = self.inflight.committable(qk)
        if offset is not None:
            self.offsets.commit(qk[0], qk[1], qk[2], offset)

    # -- ack / change / forward -------------------------------------------------------------

    def _entry(self, group: str, handle: ReceiptHandle) -> Entry:
        entry = self.inflight.get((group, handle.topic, handle.queue_id, handle.offset), handle.ck_id)
        if entry is None:
            raise FailedPreconditionError(
                "receipt handle is no longer valid (acked, expired and redelivered, or replaced by "
                "ChangeInvisibleDuration)")
        return entry

    def ack(self, group: str, handles: Sequence[ReceiptHandle]) -> list[str]:
        """Ack each handle; returns "" per handle acked, else why not."""
        results: list[str] = []
        done: list[Entry] = []
        for handle in handles:
            try:
                done.append(self._entry(group, handle))
                results.append("")
            except FailedPreconditionError as exc:
                results.append(str(exc))
        if done:
            self._resolve(group, done)
            self.metrics.acked(group, len(done))
        return results

    def _resolve(self, group: str, entries: Sequence[Entry], *, fifo_again: bool = False) -> None:
        """Ack ``entries`` durably; ``fifo_again``: hand them out again from their own queue (FIFO
        groups), at the next attempt."""
        items = [(e.key[1], e.key[2], e.key[3], e.ck_id) for e in entries]
        resets = [(e.key[1], e.key[2], e.key[3], e.attempt + 1) for e in entries] if fifo_again else None
        self._write(OP_ACK, encode_acks(group, items, resets))
        queues = set()
        for entry in entries:
            self.inflight.remove(entry.key, entry.ck_id)
            if fifo_again:
                self.inflight.reset(entry.key, entry.attempt + 1)
            queues.add(entry.key[:3])
        for qk in queues:
            self._commit(qk)  # type: ignore[arg-type]

    def change_invisible(self, group: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        entry = self._entry(group, handle)
        now = int(time.time() * 1000)
        g, topic, qid, offset = entry.key
        ck = Checkpoint(g, topic, qid, (offset,), (entry.attempt,), entry.pop_ms, now + invisible_ms,
                        entry.client_id, False)
        ck_id = self._write(OP_CHECKPOINT, ck.encode())
        (new,) = self.inflight.checkpoint(ck, ck_id)
        heapq.heappush(self._heap, (new.deadline_ms, new.key, ck_id))
        self.metrics.nacked(group)
        return self._handle(new)

    def forward_to_dlq(self, group: str, handle: ReceiptHandle) -> None:
        entry = self._entry(group, handle)
        rec = self._read(entry.key)
        if rec is not None:
            self._put_again(dlq_topic(group), rec, entry)
            self.metrics.dead_lettered(group)
        self._resolve(group, [entry])

    # -- revive -----------------------------------------------------------------------------

    def _read(self, key: Key) -> record.MessageRecord | None:
        _g, topic, qid, offset = key
        result = self.store.get_messages(topic, qid, offset, 1)
        return result.messages[0] if result.messages and result.messages[0].queue_offset == offset else None

    def _ensure(self, topic: str) -> None:
        if topic not in self._ensured:
            if self.topics.get(topic) is None:
                self.topics.ensure_system_topic(TopicConfig(topic, 1, 1))
            self._ensured.add(topic)

    def _put_again(self, topic: str, rec: record.MessageRecord, entry: Entry) -> None:
        props = {k: val for k, val in rec.properties.items() if k not in _DROP_PROPS}
        props.setdefault(record.PROPERTY_RETRY_TOPIC, rec.topic)
        props.setdefault(record.PROPERTY_ORIGIN_MESSAGE_ID, rec.msg_id)
        # The consumer sees the same message id on every attempt.
        props.setdefault(record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, rec.msg_id)
        self._ensure(topic)
        result = self.append([record.Message(topic, rec.body, 0, rec.flag, props, rec.born_timestamp,
                                             rec.born_host, rec.sys_flag & 0x3, entry.attempt)])
        if not result.stored:
            raise UnavailableError(f"cannot store to {topic}: {result.error or result.status.name}")

    def revive(self, entry: Entry) -> None:
        group = entry.key[0]
        config = self.group_config(group)
        rec = self._read(entry.key)
        last = entry.attempt >= config.retry_max_times + 1
        if rec is not None and config.consume_message_orderly and not last \
                and not entry.key[1].startswith(RETRY_PREFIX):
            # FIFO: the message stays in its queue, in order, and comes back from there.
            self.metrics.revived(group)
            self.metrics.retried(group)
            self._resolve(group, [entry], fifo_again=True)
            return
        if rec is not None:
            if last:
                self._put_again(dlq_topic(group), rec, entry)
                self.metrics.dead_lettered(group)
                log.info("message dead-lettered", extra={"group": group, "topic": rec.topic,
                                                         "attempts": entry.attempt})
            else:
                self._put_again(retry_topic(group), rec, entry)
                self.metrics.retried(group)
        self.metrics.revived(group)
        self._resolve(group, [entry])

    def _due(self, now_ms: int) -> list[Entry]:
        due: list[Entry] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, key, ck_id = heapq.heappop(heap)
            entry = self.inflight.get(key, ck_id)
            if entry is None:
                continue
            if entry.deadline_ms > deadline:  # renewed: wait for the new deadline
                heapq.heappush(heap, (entry.deadline_ms, key, ck_id))
                continue
            due.append(entry)
        return due

    def _renew(self, now_ms: int) -> None:
        for entry in self.inflight:
            if (entry.auto_renew and entry.deadline_ms - now_ms < self.renew_ahead_ms
                    and now_ms - entry.pop_ms < self.renew_max_ms and self.connected(entry.client_id)):
                entry.deadline_ms = now_ms + self.auto_renew_ms
                entry.renewed += 1

    def tick(self) -> int:
        now_ms = int(time.time() * 1000)
        self._renew(now_ms)
        due = self._due(now_ms)
        for entry in due:
            try:
                self.revive(entry)
            except UnavailableError as exc:
                log.warning("revive failed; retried", extra={"error": str(exc)})
                heapq.heappush(self._heap, (now_ms + 1000, entry.key, entry.ck_id))
        return len(due)

    def _save_progress(self) -> None:
        first = self.inflight.min_ck_id()
        progress = first if first is not None else self.store.max_queue_offset(self.revive_topic, 0)
        if progress != self.offsets.query(REVIVE_GROUP, self.revive_topic, 0):
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
        for group, entries in self.inflight.by_group().items():
            oldest = min(e.pop_ms for e in entries)
            out[group] = (len(entries), max(0.0, (now - oldest) / 1000))
        return out

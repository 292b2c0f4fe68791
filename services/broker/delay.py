"""Delayed delivery (RocketMQ's ScheduleMessageService).

A message sent with delay level ``L`` is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``L - 1`` with
its real topic and queue in the ``REAL_TOPIC`` / ``REAL_QID`` properties. One task per level
reads its queue in order; since every message of a level waits the same time, the queue is
ordered by due time and the task only ever looks at its head: it sleeps until the head is due
(store timestamp + the level's delay), re-stores the message in its real topic and queue, and
advances the level's delay offset. An empty queue is waited on through the append notifier, not
by polling. Delay offsets are persisted periodically and on shutdown (a crash can deliver a
message twice, never lose it), and slaves receive them through metadata sync.

Runs on masters only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Protocol

from services.broker.follower import BackgroundService
from services.broker.longpoll import QueueNotifier
from services.broker.metadata import DelayOffsetManager
from services.broker.metrics import BrokerMetrics
from services.broker.storage import record
from services.broker.storage.status import GetMessageStatus, GetResult, PutResult
from services.broker.validation import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

#: Messages read from a level's queue per store call.
BATCH = 32
#: How long a delivery that the store refused waits before it is retried.
RETRY_DELAY_S = 1.0
#: An idle level re-checks its queue at least this often (notifications do the real work).
IDLE_RECHECK_S = 5.0
_CAUGHT_UP = frozenset({GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE})
_DROPPED_PROPERTIES = (record.PROPERTY_REAL_TOPIC, record.PROPERTY_REAL_QUEUE_ID,
                       record.PROPERTY_DELAY_TIME_LEVEL)


class ScheduleStore(Protocol):
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetResult: ...


Deliver = Callable[[list[record.Message]], Awaitable[PutResult]]


def restore_message(rec: record.MessageRecord, dropped: Collection[str] = _DROPPED_PROPERTIES, *,
                    prepared_offset: int | None = None) -> record.Message | None:
    """The message to deliver for a record of a system topic that holds it for later (None if it
    lacks its real topic/queue: such a record cannot be delivered anywhere). ``dropped``: the
    properties the system topic added; ``prepared_offset``: the PREPARED_TRANSACTION_OFFSET to
    store (the record's own by default)."""
    props = rec.properties
    topic = props.get(record.PROPERTY_REAL_TOPIC)
    qid = props.get(record.PROPERTY_REAL_QUEUE_ID)
    if not topic or qid is None or not qid.isdigit():
        return None
    kept = {k: val for k, val in props.items() if k not in dropped}
    return record.Message(
        topic, rec.body, int(qid), rec.flag, kept, rec.born_timestamp, rec.born_host, rec.sys_flag,
        rec.reconsume_times, rec.prepared_transaction_offset if prepared_offset is None else prepared_offset,
    )


class DelayDeliveryService(BackgroundService):
    def __init__(
        self,
        store: ScheduleStore,
        offsets: DelayOffsetManager,
        levels_ms: Sequence[int],
        notifier: QueueNotifier,
        deliver: Deliver,
        metrics: BrokerMetrics | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        super().__init__()
        self.store = store
        self.offsets = offsets
        self.levels_ms = tuple(levels_ms)
        self.notifier = notifier
        self.deliver = deliver
        self.metrics = metrics
        self.clock_ms = clock_ms
        self.delivered = 0

    def start(self) -> None:
        for level in range(1, len(self.levels_ms) + 1):
            self.spawn(self._run_level(level), f"delay-level-{level}")
        log.info("delayed delivery started", extra={"levels": len(self.levels_ms)})

    async def _run_level(self, level: int) -> None:
        delay_ms = self.levels_ms[level - 1]
        queue_id = level - 1
        while not self._stop.is_set():
            try:
                await self._drain_level(level, queue_id, delay_ms)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delay level failed, retrying", extra={"level": level})
                if await self._sleep(RETRY_DELAY_S):
                    return

    async def _drain_level(self, level: int, queue_id: int, delay_ms: int) -> None:
        offset = self.offsets.get(level)
        result = self.store.get_messages(SCHEDULE_TOPIC, queue_id, offset, BATCH)
        if result.status is not GetMessageStatus.FOUND:
            if result.status in _CAUGHT_UP or result.next_begin_offset == offset:
                await self.notifier.wait(SCHEDULE_TOPIC, queue_id, offset, IDLE_RECHECK_S)
                return
            # Offset out of range (files deleted, or an old table restored): follow the store.
            log.warning("delay offset corrected", extra={
                "level": level, "from": offset, "to": result.next_begin_offset, "status": result.status.name})
            self.offsets.set(level, result.next_begin_offset)
            return
        for rec in result.messages:
            due = rec.store_timestamp + delay_ms
            wait_ms = due - self.clock_ms()
            if wait_ms > 0 and await self._sleep(wait_ms / 1000):
                return
            msg = restore_message(rec)
            if msg is None:
                log.error("delayed message without REAL_TOPIC/REAL_QID dropped",
                          extra={"level": level, "queue_offset": rec.queue_offset})
            else:
                put = await self.deliver([msg])
                if not put.stored:
                    log.warning("delayed delivery refused by the store, will retry", extra={
                        "level": level, "topic": msg.topic, "status": put.status.name, "error": put.error})
                    await self._sleep(RETRY_DELAY_S)
                    return
                self.delivered += 1
                if self.metrics is not None:
                    self.metrics.delay_delivered(level, 1)
            self.offsets.set(level, rec.queue_offset + 1)
        if result.next_begin_offset > self.offsets.get(level):
            self.offsets.set(level, result.next_begin_offset)

    def backlog(self, max_offset: Callable[[str, int], int]) -> int:
        """Messages waiting in all levels."""
        return sum(max(0, max_offset(SCHEDULE_TOPIC, level - 1) - self.offsets.get(level))
                   for level in range(1, len(self.levels_ms) + 1))

"""Handler calls of a consumer started with a handler, one message of a queue at a time, in
order, and what happens to a message the handler fails on.

By default the message is sent back (RocketMQ 4.9's ``sendMessageBack``): it goes to the group's
retry topic ``%RETRY%<group>`` with the delay level ``3 + reconsume times`` (10 s, 30 s, 1 min,
... with RocketMQ's default levels) and the queue moves on; the consumer subscribes to its retry
topic, so the message comes back there. After ``max_reconsume_times`` send-backs it goes to the
dead-letter topic ``%DLQ%<group>`` instead. With ``send_back=False``, or when a send-back fails,
the handler gets the message again in place (backing off up to 5 s) up to
``max_reconsume_times`` times before it is dead-lettered.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from pocketmq.client.message import Message, MessageQueue, ReceivedMessage
from pocketmq.client.producer import AsyncProducer
from pocketmq.client.subscription import ProcessQueue, built
from pocketmq.client.transport import RelayMode
from pocketmq.errors import PocketMQError
from pocketmq.wire.auth import Credentials
from pocketmq.wire.tls import ClientTls

log = logging.getLogger("pocketmq.client")

__all__ = ["DLQ_PREFIX", "RETRY_PREFIX", "MessageHandler", "Redelivery", "retry_topic",
           "send_back_message"]

MessageHandler = Callable[[ReceivedMessage], "Awaitable[object] | object"]
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: RocketMQ's first retry level: reconsume n is delivered after level 3 + n.
BASE_RETRY_LEVEL = 3
MAX_DELAY_LEVEL = 18
#: Properties of the original message that must not follow it to the retry or dead-letter topic
#: (the broker or the producer sets them).
_DROPPED = ("TAGS", "KEYS", "REAL_TOPIC", "REAL_QID", "DELAY", "PGROUP", "TIMER_DELIVER_MS")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def reconsume_times(msg: ReceivedMessage) -> int:
    """How often ``msg`` was sent back already (the RECONSUME_TIME property on retries)."""
    try:
        return max(msg.reconsume_times, int(msg.properties.get("RECONSUME_TIME", "0")))
    except ValueError:
        return msg.reconsume_times


def retry_level(reconsume: int, max_level: int = MAX_DELAY_LEVEL) -> int:
    return min(BASE_RETRY_LEVEL + reconsume, max_level)


def _carried(msg: ReceivedMessage, reconsume: int) -> dict[str, str]:
    props = dict(msg.properties)
    for key in _DROPPED:
        props.pop(key, None)
    props.setdefault("RETRY_TOPIC", msg.topic)
    props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
    props["RECONSUME_TIME"] = str(reconsume)
    return props


def send_back_message(msg: ReceivedMessage, group: str, max_reconsume_times: int) -> Message:
    """The message to send for a failed ``msg``: to the retry topic with its delay level, or to
    the dead-letter topic once ``max_reconsume_times`` retries were used."""
    reconsume = reconsume_times(msg)
    props = _carried(msg, reconsume + 1)
    if reconsume >= max_reconsume_times:
        return Message(DLQ_PREFIX + group, msg.body, tags=msg.tags, keys=msg.keys, properties=props)
    return Message(retry_topic(group), msg.body, tags=msg.tags, keys=msg.keys, properties=props,
                   delay_level=retry_level(reconsume))


def _first_queue(queues: Sequence[MessageQueue], message: Message, key: str | None) -> MessageQueue:
    """Retry and dead-letter topics have one queue per broker (retryQueueNums = 1), whatever
    queue count a route borrowed from the auto-create template says."""
    return min(queues, key=lambda q: q.queue_id)


class Redelivery:
    """Runs the handler over a queue's buffered batches; sends failed messages back (or retries
    them in place) and dead-letters them after the limit, with one producer of the group,
    started on first use."""

    def __init__(self, group: str, max_reconsume_times: int, namesrv_addrs: Sequence[str],
                 relay: RelayMode, *, send_back: bool = True, tls: ClientTls | None = None,
                 credentials: Credentials | None = None) -> None:
        self.tls = tls
        self.credentials = credentials
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.namesrv_addrs = list(namesrv_addrs)
        self.relay: RelayMode = relay
        self.send_back_enabled = send_back
        self._producer: AsyncProducer | None = None
        #: Messages the handler has processed (or that were sent back).
        self.consumed = 0
        self.sent_back = 0
        self.dead_lettered = 0

    async def consume_loop(self, pq: ProcessQueue, handler: MessageHandler) -> None:
        isawaitable = inspect.isawaitable
        while True:
            batch = await pq.buffer.get()
            if batch is None or pq.dropped:
                return
            for msg in built(batch):
                if pq.dropped:
                    return
                try:
                    result = handler(msg)
                    if result is not None and isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if self.send_back_enabled and await self.send_back(msg):
                        log.warning("handler failed; message sent back", extra={
                            "queue": str(pq.queue), "offset": msg.queue_offset, "error": repr(exc)})
                    elif not await self._retry(pq, handler, msg, exc):
                        return
                pq.ack(msg.queue_offset)
                self.consumed += 1

    async def _retry(self, pq: ProcessQueue, handler: MessageHandler, msg: ReceivedMessage,
                     exc: Exception) -> bool:
        """The handler raised ``exc`` for ``msg``: run it again (backing off) until it succeeds
        or the message is dead-lettered (True); False when the queue was dropped meanwhile."""
        attempt = 0
        while True:
            attempt += 1
            log.warning("handler failed", extra={"queue": str(pq.queue), "offset": msg.queue_offset,
                                                 "attempt": attempt, "error": repr(exc)})
            if attempt > self.max_reconsume_times and await self._dead_letter(msg):
                return True
            await asyncio.sleep(min(5.0, 0.1 * 2 ** min(attempt, 6)))
            if pq.dropped:
                return False
            try:
                result = handler(msg)
                if inspect.isawaitable(result):
                    await result
                return True
            except asyncio.CancelledError:
                raise
            except Exception as again:
                exc = again

    async def _dead_letter(self, msg: ReceivedMessage) -> bool:
        props = _carried(msg, self.max_reconsume_times)
        props["ORIGIN_TOPIC"] = msg.topic
        return await self._send(Message(DLQ_PREFIX + self.group, msg.body, tags=msg.tags, keys=msg.keys,
                                        properties=props), msg)

    async def send_back(self, msg: ReceivedMessage) -> bool:
        """True when the message is stored in the retry or dead-letter topic (the queue may move
        on); False when that failed (the caller retries in place)."""
        return await self._send(send_back_message(msg, self.group, self.max_reconsume_times), msg)

    async def _send(self, out: Message, msg: ReceivedMessage) -> bool:
        try:
            if self._producer is None:
                self._producer = AsyncProducer(self.namesrv_addrs, group=self.group, relay=self.relay,
                                               tls=self.tls or False, credentials=self.credentials)
                await self._producer.start()
            result = await self._producer.send(out, selector=_first_queue)
        except PocketMQError as exc:
            log.error("cannot send a failed message on", extra={
                "topic": out.topic, "msg_id": msg.msg_id, "error": str(exc)})
            return False
        if out.topic.startswith(DLQ_PREFIX):
            self.dead_lettered += 1
            log.warning("message sent to the dead-letter topic", extra={
                "topic": out.topic, "msg_id": msg.msg_id, "dlq_msg_id": result.msg_id})
        else:
            self.sent_back += 1
            log.info("failed message sent back for a later retry", extra={
                "topic": out.topic, "msg_id": msg.msg_id, "delay_level": out.delay_level})
        return True

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
            self._producer = None

"""Handler calls of a consumer started with a handler: one message of a queue at a time, in
order. A handler that raises gets the message again (backing off up to 5 s) up to
``max_reconsume_times`` times; then the message is sent to the group's dead-letter topic
``%DLQ%<group>`` and consumption moves on."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from pocketmq.client.message import Message, ReceivedMessage
from pocketmq.client.producer import AsyncProducer
from pocketmq.client.subscription import ProcessQueue
from pocketmq.client.transport import RelayMode
from pocketmq.errors import PocketMQError

log = logging.getLogger("pocketmq.client")

__all__ = ["DLQ_PREFIX", "MessageHandler", "Redelivery"]

MessageHandler = Callable[[ReceivedMessage], "Awaitable[object] | object"]
DLQ_PREFIX = "%DLQ%"
#: Properties a dead-lettered message does not carry over (the broker or producer sets them).
_NOT_CARRIED = ("TAGS", "KEYS", "REAL_TOPIC", "REAL_QID", "DELAY", "PGROUP")


class Redelivery:
    """Runs the handler over a queue's buffered batches, retrying and dead-lettering."""

    def __init__(self, group: str, max_reconsume_times: int, namesrv_addrs: Sequence[str],
                 relay: RelayMode) -> None:
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.namesrv_addrs = list(namesrv_addrs)
        self.relay: RelayMode = relay
        self.dlq: AsyncProducer | None = None
        #: Messages the handler has processed.
        self.consumed = 0

    async def consume_loop(self, pq: ProcessQueue, handler: MessageHandler) -> None:
        isawaitable = inspect.isawaitable
        while True:
            batch = await pq.buffer.get()
            if batch is None or pq.dropped:
                return
            for msg in batch:
                if pq.dropped:
                    return
                try:
                    result = handler(msg)
                    if result is not None and isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if not await self._retry(pq, handler, msg, exc):
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
        topic = DLQ_PREFIX + self.group
        try:
            if self.dlq is None:
                self.dlq = AsyncProducer(self.namesrv_addrs, group=self.group, relay=self.relay)
                await self.dlq.start()
            props = dict(msg.properties)
            props.update({"ORIGIN_TOPIC": msg.topic, "ORIGIN_MESSAGE_ID": msg.msg_id,
                          "RECONSUME_TIME": str(self.max_reconsume_times)})
            for key in _NOT_CARRIED:
                props.pop(key, None)
            result = await self.dlq.send(Message(topic, msg.body, tags=msg.tags, keys=msg.keys,
                                                 properties=props))
        except PocketMQError as exc:
            log.error("cannot send to the dead-letter topic; retrying the handler", extra={
                "topic": topic, "msg_id": msg.msg_id, "error": str(exc)})
            return False
        log.warning("message sent to the dead-letter topic", extra={
            "topic": topic, "msg_id": msg.msg_id, "dlq_msg_id": result.msg_id})
        return True

    async def close(self) -> None:
        if self.dlq is not None:
            await self.dlq.close()

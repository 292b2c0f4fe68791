"""Send-back of messages a consumer's handler failed on (RocketMQ 4.9's ``sendMessageBack``).

Instead of retrying in place (which blocks the queue), the message goes to the group's retry
topic ``%RETRY%<group>`` with the delay level ``3 + reconsume times`` (10 s, 30 s, 1 min, ... with
RocketMQ's default levels) and the queue moves on; the consumer subscribes to its retry topic,
so the message comes back there. After ``max_reconsume_times`` send-backs it goes to the
dead-letter topic ``%DLQ%<group>`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pocketmq.client.message import Message, MessageQueue, ReceivedMessage
from pocketmq.client.producer import AsyncProducer
from pocketmq.client.transport import RelayMode
from pocketmq.errors import PocketMQError

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: RocketMQ's first retry level: reconsume n is delivered after level 3 + n.
BASE_RETRY_LEVEL = 3
MAX_DELAY_LEVEL = 18
#: Properties of the original message that must not follow it to the retry or dead-letter topic.
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


def send_back_message(msg: ReceivedMessage, group: str, max_reconsume_times: int) -> Message:
    """The message to send for a failed ``msg``: to the retry topic with its delay level, or to
    the dead-letter topic once ``max_reconsume_times`` retries were used."""
    reconsume = reconsume_times(msg)
    props = dict(msg.properties)
    for key in _DROPPED:
        props.pop(key, None)
    props.setdefault("RETRY_TOPIC", msg.topic)
    props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
    props["RECONSUME_TIME"] = str(reconsume + 1)
    if reconsume >= max_reconsume_times:
        return Message(DLQ_PREFIX + group, msg.body, tags=msg.tags, keys=msg.keys, properties=props)
    return Message(retry_topic(group), msg.body, tags=msg.tags, keys=msg.keys, properties=props,
                   delay_level=retry_level(reconsume))


def _first_queue(queues: Sequence[MessageQueue], message: Message, key: str | None) -> MessageQueue:
    """Retry and dead-letter topics have one queue per broker (retryQueueNums = 1), whatever
    queue count a route borrowed from the auto-create template says."""
    return min(queues, key=lambda q: q.queue_id)


class Redelivery:
    """Sends failed messages back for one consumer group (its own producer, started lazily)."""

    def __init__(self, namesrv_addrs: list[str], group: str, max_reconsume_times: int, *,
                 relay: RelayMode = "direct") -> None:
        self.namesrv_addrs = namesrv_addrs
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.relay: RelayMode = relay
        self._producer: AsyncProducer | None = None
        self.sent_back = 0
        self.dead_lettered = 0

    async def send_back(self, msg: ReceivedMessage) -> bool:
        """True when the message is stored in the retry or dead-letter topic (the queue may move
        on); False when that failed (the caller retries in place)."""
        out = send_back_message(msg, self.group, self.max_reconsume_times)
        try:
            if self._producer is None:
                self._producer = AsyncProducer(self.namesrv_addrs, group=self.group, relay=self.relay)
                await self._producer.start()
            result = await self._producer.send(out, selector=_first_queue)
        except PocketMQError as exc:
            log.error("cannot send a failed message back: %s", exc, extra={
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

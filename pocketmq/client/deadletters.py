"""Dead letters: the ``%DLQ%<group>`` topics, what is in them, and sending them back to the topic
they came from. Every broker call goes through :class:`~pocketmq.client.admin.AsyncAdmin` (so
through the NameServer's relay when the admin uses it)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.admin import AsyncAdmin
from pocketmq.client.message import Message, ReceivedMessage, from_message_ext
from pocketmq.client.redelivery import DLQ_PREFIX, reconsume_times
from pocketmq.client.routes import MASTER_ID
from pocketmq.errors import NoRouteError, NotFoundError
from pocketmq.wire.record import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)

__all__ = ["DeadLetter", "DeadLetterQueue", "dead_letter_queues", "read_dead_letters", "resend_message"]

#: Per pull of a dead-letter queue.
PAGE = 256
#: Properties the broker or the retry path set: not carried over when a dead letter is re-sent.
_NOT_RESENT = frozenset({PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME,
                         PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_DELAY_TIME_LEVEL,
                         PROPERTY_TIMER_DELIVER_MS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_TAGS,
                         PROPERTY_KEYS, "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "PGROUP",
                         "POP_OP", "WAIT"})


@dataclasses.dataclass(frozen=True)
class DeadLetterQueue:
    group: str
    topic: str
    #: Messages stored (max - min offset) per broker name.
    counts: dict[str, int]

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "count": self.count, "brokers": self.counts}


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    message: ReceivedMessage

    @property
    def original_topic(self) -> str:
        return self.message.properties.get(PROPERTY_RETRY_TOPIC, "")

    @property
    def original_msg_id(self) -> str:
        props = self.message.properties
        return (props.get(PROPERTY_ORIGIN_MESSAGE_ID) or props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                or "")

    @property
    def reconsume_times(self) -> int:
        return reconsume_times(self.message)

    def to_dict(self, body: str = "text") -> dict[str, Any]:
        out = self.message.to_dict(body)
        out.update(original_topic=self.original_topic, original_msg_id=self.original_msg_id,
                   reconsume_times=self.reconsume_times)
        return out


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


async def _queue_counts(admin: AsyncAdmin, topic: str) -> dict[str, int]:
    route = await admin.route(topic)
    counts: dict[str, int] = {}

    async def one(broker: str, addr: str, qid: int) -> None:
        req = broker_pb2.QueueRequest(topic=topic, queue_id=qid)
        lo, hi = await asyncio.gather(admin.call(addr, "GetMinOffset", req),
                                      admin.call(addr, "GetMaxOffset", req))
        counts[broker] = counts.get(broker, 0) + max(0, int(hi.offset) - int(lo.offset))

    jobs = []
    for q in route.read_queues():
        addr = route.brokers[q.broker_name].addrs.get(MASTER_ID) or next(
            iter(route.brokers[q.broker_name].read_addrs()), None)
        if addr is not None:
            jobs.append(one(q.broker_name, addr, q.queue_id))
    await asyncio.gather(*jobs)
    return counts


async def dead_letter_queues(admin: AsyncAdmin, cluster: str | None = None) -> list[DeadLetterQueue]:
    """Every ``%DLQ%`` topic the NameServer knows, with its message count per broker group."""
    topics = [t for t in await admin.topics(cluster) if t.startswith(DLQ_PREFIX)]
    out = []
    for topic in topics:
        try:
            counts = await _queue_counts(admin, topic)
        except NoRouteError:
            counts = {}
        out.append(DeadLetterQueue(topic[len(DLQ_PREFIX):], topic, counts))
    return out


async def read_dead_letters(admin: AsyncAdmin, group: str, limit: int | None = None) -> list[DeadLetter]:
    """The dead letters of ``group``, oldest first per queue, up to ``limit``."""
    topic = dlq_topic(group)
    try:
        route = await admin.route(topic)
    except NoRouteError:
        raise NotFoundError(f"consumer group {group!r} has no dead-letter topic {topic!r}") from None
    out: list[DeadLetter] = []
    for q in route.read_queues():
        addrs = route.brokers[q.broker_name].read_addrs()
        if not addrs:
            continue
        addr = addrs[0]
        start = await admin.call(addr, "GetMinOffset",
                                 broker_pb2.QueueRequest(topic=topic, queue_id=q.queue_id))
        offset = int(start.offset)
        while limit is None or len(out) < limit:
            reply = await admin.call(addr, "PullMessage", broker_pb2.PullMessageRequest(
                topic=topic, queue_id=q.queue_id, queue_offset=offset, max_msg_nums=PAGE))
            if reply.status != broker_pb2.FOUND or not reply.messages:
                break
            out.extend(DeadLetter(from_message_ext(m, q.broker_name)) for m in reply.messages)
            if reply.next_begin_offset <= offset:
                break
            offset = reply.next_begin_offset
    return out[:limit] if limit is not None else out


def resend_message(letter: DeadLetter) -> Message:
    """The message that sends ``letter`` again to its original topic (its body, tags, keys and
    user properties; not the retry bookkeeping)."""
    m = letter.message
    if not letter.original_topic:
        raise NotFoundError(f"dead letter {m.msg_id} does not name its original topic (no RETRY_TOPIC)")
    props = {k: v for k, v in m.properties.items() if k not in _NOT_RESENT}
    return Message(letter.original_topic, m.body, tags=m.tags, keys=m.keys, properties=props)

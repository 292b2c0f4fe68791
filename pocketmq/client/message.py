"""The values users handle: :class:`Message` (to send), :class:`SendResult`,
:class:`ReceivedMessage` (consumed) and :class:`MessageQueue`. All immutable."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pocketmq.broker.v1 import broker_pb2
from pocketmq.errors import InternalError, InvalidArgumentError
from pocketmq.wire.errors import RecordError
from pocketmq.wire.fast import DecodeHint, Pending, decode_pending, decode_received
from pocketmq.wire.messages import MessageQueue, ReceivedMessage
from pocketmq.wire.protoscan import Span
from pocketmq.wire.record import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    split_keys,
)

__all__ = [
    "PROPERTY_DELAY", "PROPERTY_KEYS", "PROPERTY_REAL_QUEUE_ID", "PROPERTY_REAL_TOPIC", "PROPERTY_TAGS",
    "STORED_STATUSES", "Message", "MessageQueue", "Pending", "ReceivedMessage", "SendResult", "SendStatus",
    "decode_pending_records", "decode_records", "from_message_ext",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})

#: RocketMQ property names the client reads.
PROPERTY_DELAY = PROPERTY_DELAY_TIME_LEVEL


def _keys_text(keys: str | Iterable[str]) -> str:
    if isinstance(keys, str):
        return keys
    return " ".join(k for k in keys if k)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Message:
    """A message to send.

    ``body`` may be ``str`` (sent as UTF-8). ``keys`` are business keys (a space-separated string
    or a sequence). ``delay_level`` 1..18 delays delivery by RocketMQ's levels (1s 5s 10s 30s
    1m 2m ... 2h); 0 delivers at once.
    """

    topic: str
    body: bytes
    tags: str
    keys: str
    properties: Mapping[str, str]
    delay_level: int
    flag: int

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        *,
        tags: str = "",
        keys: str | Sequence[str] = "",
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        flag: int = 0,
    ) -> None:
        if not topic:
            raise InvalidArgumentError("message topic must not be empty")
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = bytes(body)
        if delay_level < 0:
            raise InvalidArgumentError(f"delay level must be >= 0, got {delay_level}")
        if tags and "||" in tags:
            raise InvalidArgumentError(f"a message has one tag; {tags!r} contains '||'")
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "keys", _keys_text(keys))
        object.__setattr__(self, "properties", MappingProxyType(dict(properties)) if properties else _EMPTY)
        object.__setattr__(self, "delay_level", delay_level)
        object.__setattr__(self, "flag", flag)

    def to_proto(self, topic: bool = True) -> broker_pb2.Message:
        msg = broker_pb2.Message(body=self.body)
        if topic:
            msg.topic = self.topic
        if self.tags:
            msg.tags = self.tags
        if self.keys:
            msg.keys = self.keys
        if self.properties:
            msg.properties.update(self.properties)
        if self.delay_level:
            msg.delay_level = self.delay_level
        if self.flag:
            msg.flag = self.flag
        return msg


class SendStatus(enum.Enum):
    """How durable a stored message is (RocketMQ's SendStatus). Anything but ``SEND_OK`` means
    the message IS stored on the master but not yet as durable as the broker is configured
    for: do not resend it blindly (that stores it twice)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


#: Put statuses that mean "stored" and the SendStatus reported for them.
STORED_STATUSES: Mapping[int, SendStatus] = {
    broker_pb2.PUT_OK: SendStatus.SEND_OK,
    broker_pb2.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    broker_pb2.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    broker_pb2.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    """What a send stored: one id per message (a batch occupies consecutive offsets from
    ``queue_offset``; a delayed message's offset is -1 until it is delivered)."""

    status: SendStatus
    msg_ids: tuple[str, ...]
    queue: MessageQueue
    queue_offset: int
    broker_addr: str = ""
    remark: str = ""

    @property
    def msg_id(self) -> str:
        return self.msg_ids[0] if self.msg_ids else ""

    @property
    def ok(self) -> bool:
        """Stored with the configured durability (``SEND_OK``)."""
        return self.status is SendStatus.SEND_OK

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "msg_id": self.msg_id, "msg_ids": list(self.msg_ids),
                "topic": self.queue.topic, "broker_name": self.queue.broker_name,
                "queue_id": self.queue.queue_id, "queue_offset": self.queue_offset,
                "broker_addr": self.broker_addr, "remark": self.remark}


def _split_keys(value: str) -> tuple[str, ...]:
    return tuple(split_keys(value))


def from_message_ext(ext: broker_pb2.MessageExt, broker_name: str) -> ReceivedMessage:
    """A message of a PullMessage reply without ``raw_records``."""
    props = dict(ext.properties)
    return ReceivedMessage(
        topic=ext.topic, body=ext.body, tags=ext.tags or props.get(PROPERTY_TAGS, ""),
        keys=_split_keys(ext.keys or props.get(PROPERTY_KEYS, "")), properties=props,
        queue=MessageQueue(ext.topic, broker_name, ext.queue_id), queue_offset=ext.queue_offset,
        commit_log_offset=ext.commit_log_offset, msg_id=ext.msg_id, born_timestamp=ext.born_timestamp,
        store_timestamp=ext.store_timestamp, born_host=ext.born_host, store_host=ext.store_host,
        reconsume_times=ext.reconsume_times,
    )


def decode_records(data: bytes | bytearray | memoryview, broker_name: str,
                   hint: DecodeHint | None = None) -> list[ReceivedMessage]:
    """Messages from a ``raw_records`` pull reply (see :func:`pocketmq.wire.fast.decode_received`).
    Raises :class:`~pocketmq.errors.InternalError` on bytes that are not valid records."""
    try:
        return decode_received(data, broker_name, hint)
    except RecordError as exc:
        raise InternalError(f"corrupt record in pull reply {exc}") from None


def decode_pending_records(data: bytes | bytearray | memoryview | Span, broker_name: str,
                           hint: DecodeHint | None = None) -> Pending:
    """:func:`decode_records`, checked now, the messages built when first asked for
    (:class:`~pocketmq.wire.fast.Pending`). Raises :class:`~pocketmq.errors.InternalError` as it
    does."""
    try:
        return decode_pending(data, broker_name, hint)
    except RecordError as exc:
        raise InternalError(f"corrupt record in pull reply {exc}") from None

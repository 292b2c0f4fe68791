"""The values users handle: :class:`Message` (to send), :class:`SendResult`,
:class:`ReceivedMessage` (consumed) and :class:`MessageQueue`. All immutable."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from pocketmq.broker.v1 import broker_pb2
from pocketmq.errors import InvalidArgumentError

_EMPTY: Mapping[str, str] = MappingProxyType({})

#: RocketMQ property names the client reads.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker group. Orders by (topic, broker name, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


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


@dataclasses.dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A consumed message. ``queue``/``queue_offset`` say where it is stored; ``msg_id`` is the
    broker's offset message id."""

    topic: str
    body: bytes
    tags: str
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int = 0

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    def to_dict(self, body: str = "text") -> dict[str, Any]:
        """JSON-friendly; ``body`` = "text" (UTF-8), "hex", "base64" or "none"."""
        if body == "hex":
            body_value: str | None = self.body.hex()
        elif body == "base64":
            import base64

            body_value = base64.b64encode(self.body).decode()
        elif body == "none":
            body_value = None
        else:
            body_value = self.text
        return {
            "topic": self.topic, "broker_name": self.queue.broker_name, "queue_id": self.queue.queue_id,
            "queue_offset": self.queue_offset, "msg_id": self.msg_id, "tags": self.tags,
            "keys": list(self.keys), "properties": dict(self.properties), "body": body_value,
            "body_size": len(self.body), "born_timestamp": self.born_timestamp,
            "store_timestamp": self.store_timestamp, "born_host": self.born_host,
            "store_host": self.store_host, "reconsume_times": self.reconsume_times,
        }


def _split_keys(value: str) -> tuple[str, ...]:
    return tuple(k for k in value.split(" ") if k) if value else ()


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


def decode_records(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """Messages from a ``raw_records`` pull reply: concatenated commit-log records (the broker's
    storage format, CRC-checked here). Raises :class:`~pocketmq.errors.InternalError` on bytes
    that are not valid records."""
    from pocketmq.errors import InternalError
    from services.broker.storage import record

    out: list[ReceivedMessage] = []
    append = out.append
    pos = 0
    end = len(data)
    view = memoryview(data)
    queues: dict[tuple[str, int], MessageQueue] = {}
    while pos < end:
        try:
            rec = record.decode_record(view, pos)
        except record.RecordError as exc:
            raise InternalError(f"corrupt record in pull reply at byte {pos}: {exc}") from None
        props = rec.properties
        key = (rec.topic, rec.queue_id)
        queue = queues.get(key)
        if queue is None:
            queue = queues[key] = MessageQueue(rec.topic, broker_name, rec.queue_id)
        store_host = rec.store_host
        append(ReceivedMessage(
            topic=rec.topic, body=rec.body, tags=props.get(PROPERTY_TAGS, ""),
            keys=_split_keys(props.get(PROPERTY_KEYS, "")), properties=props, queue=queue,
            queue_offset=rec.queue_offset, commit_log_offset=rec.physical_offset,
            msg_id=record.offset_msg_id(store_host, rec.physical_offset),
            born_timestamp=rec.born_timestamp, store_timestamp=rec.store_timestamp,
            born_host=f"{rec.born_host[0]}:{rec.born_host[1]}",
            store_host=f"{store_host[0]}:{store_host[1]}", reconsume_times=rec.reconsume_times,
        ))
        pos += rec.store_size
    return out

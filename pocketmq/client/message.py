"""The values users handle: :class:`Message` (to send), :class:`SendResult`,
:class:`ReceivedMessage` (consumed) and :class:`MessageQueue`. All immutable."""

from __future__ import annotations

import dataclasses
import enum
import socket
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from pocketmq.broker.v1 import broker_pb2
from pocketmq.errors import InternalError, InvalidArgumentError

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


# --------------------------------------------------------------------------------------------
# Raw records -> ReceivedMessage, fast
#
# A consumer decodes every message it receives, so this is the client's per-message hot path.
# The record format is the broker's (services/broker/storage/record.py: decode_record is the
# reference, and the unit tests check that both agree). Per record: one precompiled header
# unpack that skips the fields a ReceivedMessage has no room for, range checks, one body copy
# and its CRC; topics, queues, hosts and property sets repeat from record to record and are
# looked up in small caches instead of being decoded again.
# --------------------------------------------------------------------------------------------

#: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, (FLAG), QUEUEOFFSET, PHYSICALOFFSET, (SYSFLAG),
#: BORNTIMESTAMP, BORNHOST (ip 4 + port 4, raw), STORETIMESTAMP, STOREHOSTADDRESS (raw),
#: RECONSUMETIMES, (PREPAREDTRANSACTIONOFFSET), BODYLENGTH: the commit-log record header.
_HEADER = struct.Struct(">iIIi4xqq4xq8sq8si8xi")
_HEADER_SIZE = 88
assert _HEADER.size == _HEADER_SIZE
_MAGIC_CODE = 0xDAA320A7
_U64 = 0xFFFF_FFFF_FFFF_FFFF
_CACHE_MAX = 4096

#: raw host (IPv4 4 + port 4) -> ("ip:port", the upper-case hex of the raw bytes: the first half
#: of an offset message id).
_hosts: dict[bytes, tuple[str, str]] = {}
#: raw encoded properties -> (properties, tags, keys) as decode_properties + the KEYS split give.
_property_sets: dict[bytes, tuple[dict[str, str], str, tuple[str, ...]]] = {}


class _ReceivedMessageBuilder:
    """A mutable twin of :class:`ReceivedMessage` (the same slots in the same order): filled with
    plain attribute stores, then turned into a ReceivedMessage by assigning ``__class__``.
    ReceivedMessage is a frozen dataclass, and its generated ``__init__`` has to go through
    ``object.__setattr__`` once per field (about 1.5 us per message, more than the rest of the
    decoding); this costs about 0.2 us and gives an identical object."""

    __slots__ = ReceivedMessage.__slots__

    def __init__(self, topic: str, body: bytes, tags: str, keys: tuple[str, ...],
                 properties: Mapping[str, str], queue: MessageQueue, queue_offset: int,
                 commit_log_offset: int, msg_id: str, born_timestamp: int, store_timestamp: int,
                 born_host: str, store_host: str, reconsume_times: int) -> None:
        self.topic = topic
        self.body = body
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.queue = queue
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.msg_id = msg_id
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self.born_host = born_host
        self.store_host = store_host
        self.reconsume_times = reconsume_times


assert _ReceivedMessageBuilder.__slots__ == tuple(f.name for f in dataclasses.fields(ReceivedMessage))


def _host(raw: bytes) -> tuple[str, str]:
    """Cached: raw host -> ("ip:port", hex id prefix)."""
    hit = _hosts.get(raw)
    if hit is None:
        if len(_hosts) >= _CACHE_MAX:
            _hosts.clear()
        port = int.from_bytes(raw[4:], "big", signed=True)
        hit = _hosts[raw] = (f"{socket.inet_ntoa(raw[:4])}:{port}", raw.hex().upper())
    return hit


def _property_set(raw: bytes) -> tuple[dict[str, str], str, tuple[str, ...]]:
    """Cached: encoded properties -> (properties, tags, keys); callers copy the dict."""
    hit = _property_sets.get(raw)
    if hit is None:
        if len(_property_sets) >= _CACHE_MAX:
            _property_sets.clear()
        props: dict[str, str] = {}
        for item in raw.decode("utf-8", "replace").split("\x02"):
            if item:
                key, _, value = item.partition("\x01")
                props[key] = value
        hit = _property_sets[raw] = (props, props.get(PROPERTY_TAGS, ""),
                                     _split_keys(props.get(PROPERTY_KEYS, "")))
    return hit


def _corrupt(data: bytes, pos: int) -> InternalError:
    """The error for the record at ``pos``, worded by the reference decoder."""
    from services.broker.storage import record

    try:
        record.decode_record(data, pos)
    except record.RecordError as exc:
        return InternalError(f"corrupt record in pull reply at byte {pos}: {exc}")
    return InternalError(f"corrupt record in pull reply at byte {pos}")  # pragma: no cover


def decode_records(data: bytes | bytearray | memoryview, broker_name: str) -> list[ReceivedMessage]:
    """Messages from a ``raw_records`` pull reply: concatenated commit-log records (the broker's
    storage format, CRC-checked here). Raises :class:`~pocketmq.errors.InternalError` on bytes
    that are not valid records."""
    if type(data) is not bytes:
        data = bytes(data)
    out: list[_ReceivedMessageBuilder] = []
    append = out.append
    unpack = _HEADER.unpack_from
    crc32 = zlib.crc32
    hosts = _hosts
    host = _host
    property_sets = _property_sets
    property_set = _property_set
    new = _ReceivedMessageBuilder
    received = ReceivedMessage
    magic_code = _MAGIC_CODE
    u64 = _U64
    queues: dict[tuple[bytes, int], tuple[str, MessageQueue]] = {}
    last_topic = b""
    last_queue_id = -1
    topic = ""
    queue = MessageQueue("", broker_name, -1)
    no_properties: tuple[dict[str, str], str, tuple[str, ...]] = ({}, "", ())
    pos = 0
    end = len(data)
    while pos < end:
        try:
            (total, magic, crc, queue_id, queue_offset, physical_offset, born_ts, born_raw, store_ts,
             store_raw, reconsume, body_len) = unpack(data, pos)
        except struct.error:
            raise _corrupt(data, pos) from None
        record_end = pos + total
        body_end = pos + _HEADER_SIZE + body_len
        if magic != magic_code or body_len < 0 or body_end + 3 > record_end or record_end > end:
            raise _corrupt(data, pos)
        props_at = body_end + 1 + data[body_end]  # after TOPICLENGTH + TOPIC
        if props_at + 2 > record_end or (props_at + 2 + (data[props_at] << 8 | data[props_at + 1])
                                         != record_end):
            raise _corrupt(data, pos)
        body = data[pos + _HEADER_SIZE:body_end]
        if crc32(body) != crc:
            raise _corrupt(data, pos)
        topic_raw = data[body_end + 1:props_at]
        if queue_id != last_queue_id or topic_raw != last_topic:
            key = (topic_raw, queue_id)
            known = queues.get(key)
            if known is None:
                name = topic_raw.decode("utf-8", "replace")
                known = queues[key] = (name, MessageQueue(name, broker_name, queue_id))
            topic, queue = known
            last_topic, last_queue_id = topic_raw, queue_id
        if props_at + 2 == record_end:
            props, tags, keys = no_properties
        else:
            props_raw = data[props_at + 2:record_end]
            hit = property_sets.get(props_raw)
            props, tags, keys = hit if hit is not None else property_set(props_raw)
        born = hosts.get(born_raw) or host(born_raw)
        store = hosts.get(store_raw) or host(store_raw)
        msg = new(topic, body, tags, keys, props.copy(), queue, queue_offset, physical_offset,
                  f"{store[1]}{physical_offset & u64:016X}", born_ts, store_ts, born[0], store[0], reconsume)
        msg.__class__ = received  # type: ignore[assignment]
        append(msg)
        pos = record_end
    return out  # type: ignore[return-value]

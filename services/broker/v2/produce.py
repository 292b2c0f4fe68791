"""SendMessage: validate each v2 message, turn it into a PocketMQ message and send it through the
broker's normal produce path (:class:`services.broker.send.SendService`), then map the outcome.

The broker picks the queue: round-robin, or for FIFO messages a stable hash of the message group,
so one group always lands in one queue and stays in order. The client's message id (UNIQ_KEY),
tag, keys, user properties, born time and host are kept. DELAY messages carry their delivery
time in the timer property, transactional ones are half messages of the producer group (the
topic, as RocketMQ's proxy does for v2 producers); the produce path owns both rewrites.
"""

from __future__ import annotations

import functools
import gzip
import ipaddress
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from google.protobuf.timestamp_pb2 import Timestamp

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.broker.metadata import TopicConfig
from services.broker.storage import record
from services.broker.storage.status import STORED_STATUSES, PutMessageStatus
from services.broker.v2.resources import RequestMeta, topic_name
from services.broker.v2.status import PUT_STATUS_CODES, Code, V2Error, from_service_error
from services.common.errors import ServiceError

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

MessageType = definition_pb2.MessageType
#: The enum values as plain ints: ``MessageType.X`` is a slow attribute lookup on the hot path.
_UNSPECIFIED: int = definition_pb2.MESSAGE_TYPE_UNSPECIFIED
_NORMAL: int = definition_pb2.NORMAL
_FIFO: int = definition_pb2.FIFO
_DELAY: int = definition_pb2.DELAY
_TRANSACTION: int = definition_pb2.TRANSACTION
_GZIP: int = definition_pb2.GZIP
_OK: int = definition_pb2.OK
_INTERNAL_SERVER_ERROR: int = definition_pb2.INTERNAL_SERVER_ERROR
_MULTIPLE_RESULTS: int = definition_pb2.MULTIPLE_RESULTS
_PUT_OK = PutMessageStatus.PUT_OK
#: RocketMQ's limits on what a v2 message may carry.
MAX_MESSAGE_GROUP_LENGTH = 64
MAX_PROPERTIES_SIZE = 16 * 1024
MAX_MESSAGE_ID_LENGTH = 128
_HEX_DIGITS = "0123456789ABCDEFabcdef"
#: The property codec's separators: no key, value, tag or group may hold them.
_NAME_VALUE, _PROPERTY_END = record.NAME_VALUE_SEPARATOR, record.PROPERTY_SEPARATOR
#: Property keys the broker and the system properties own; users may not set them.
SYSTEM_PROPERTY_KEYS = frozenset(
    {str(getattr(record, name)) for name in dir(record) if name.startswith("PROPERTY_")
     and isinstance(getattr(record, name), str)} | {"TIMER_DELAY_SEC", "TIMER_DELAY_MS"})
_TYPE_NAMES: dict[int, str] = {_NORMAL: "NORMAL", _FIFO: "FIFO", _DELAY: "DELAY",
                               _TRANSACTION: "TRANSACTION"}


def fifo_queue(message_group: str, write_queue_nums: int) -> int:
    """The queue of a message group: stable across restarts and processes."""
    return zlib.crc32(message_group.encode("utf-8")) % write_queue_nums


def timestamp_ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def message_type_of(msg: definition_pb2.Message) -> int:
    """The declared type, checked against the fields that imply one."""
    return _message_type(msg.system_properties)


def _message_type(sp: definition_pb2.SystemProperties) -> int:
    has_group = sp.HasField("message_group")
    has_delivery = sp.HasField("delivery_timestamp")
    declared: int = sp.message_type
    if declared == _NORMAL and not has_group and not has_delivery:  # (the common case first)
        return declared
    if declared == _UNSPECIFIED:
        declared = _FIFO if has_group else _DELAY if has_delivery else _NORMAL
    if declared not in _TYPE_NAMES:
        raise V2Error(Code.UNSUPPORTED,
                      f"message type {MessageType.Name(declared)} is not supported by this broker")  # type: ignore[arg-type]
    wants_group = declared == _FIFO
    wants_delivery = declared == _DELAY
    if has_group != wants_group or has_delivery != wants_delivery:
        raise V2Error(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      f"a {_TYPE_NAMES[declared]} message "
                      f"{'needs' if wants_group else 'must not have'} a message_group and "
                      f"{'needs' if wants_delivery else 'must not have'} a delivery_timestamp")
    return declared


def _check_topic_type(tc: TopicConfig, msg_type: int) -> None:
    if tc.message_type and tc.message_type != _TYPE_NAMES[msg_type]:
        raise V2Error(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      f"topic {tc.topic_name!r} accepts {tc.message_type} messages (message.type "
                      f"attribute), not {_TYPE_NAMES[msg_type]}")


def _body(body: bytes, encoding: int, max_size: int) -> bytes:
    if encoding == _GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise V2Error(Code.MESSAGE_CORRUPTED, f"GZIP body cannot be decompressed: {exc}") from None
    if not body:
        raise V2Error(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_size:
        raise V2Error(Code.MESSAGE_BODY_TOO_LARGE,
                      f"message body is {len(body)} bytes, more than maxMessageSize ({max_size} bytes)")
    return body


def _properties(msg: definition_pb2.Message, sp: definition_pb2.SystemProperties) -> dict[str, str]:
    message_id = sp.message_id
    # (all hex digits: nothing is left once they are stripped; cheaper than a regex)
    if not message_id or len(message_id) > MAX_MESSAGE_ID_LENGTH or message_id.strip(_HEX_DIGITS):
        raise V2Error(Code.ILLEGAL_MESSAGE_ID,
                      f"message id {message_id[:80]!r} is not a hex string of 1..{MAX_MESSAGE_ID_LENGTH} "
                      "characters")
    props: dict[str, str] = {}
    size = 0
    user = msg.user_properties
    for key, value in user.items() if user else ():
        if (key in SYSTEM_PROPERTY_KEYS or _NAME_VALUE in key or _PROPERTY_END in key
                or _NAME_VALUE in value or _PROPERTY_END in value or not key.strip()):
            raise V2Error(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"user property {key[:80]!r} is empty, reserved for the system or holds a "
                          "control character")
        size += len(key) + len(value)
        props[key] = value
    if size > MAX_PROPERTIES_SIZE:
        raise V2Error(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                      f"user properties are {size} bytes, more than {MAX_PROPERTIES_SIZE}")
    props[record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = message_id
    if sp.HasField("tag"):
        tag = sp.tag
        if "|" in tag or _NAME_VALUE in tag or _PROPERTY_END in tag or not tag.strip():
            raise V2Error(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag[:80]!r} is blank or contains '|'")
        props[record.PROPERTY_TAGS] = tag
    keys = sp.keys
    if keys:
        for key in keys:
            if (record.KEY_SEPARATOR in key or _NAME_VALUE in key or _PROPERTY_END in key
                    or not key.strip()):
                raise V2Error(Code.ILLEGAL_MESSAGE_KEY,
                              f"message key {key[:80]!r} is blank or contains a space")
        props[record.PROPERTY_KEYS] = record.KEY_SEPARATOR.join(keys)
    if sp.HasField("message_group"):
        group = sp.message_group
        if (not group.strip() or len(group) > MAX_MESSAGE_GROUP_LENGTH
                or _NAME_VALUE in group or _PROPERTY_END in group):
            raise V2Error(Code.ILLEGAL_MESSAGE_GROUP,
                          f"message group {group[:80]!r} is blank or longer than {MAX_MESSAGE_GROUP_LENGTH}")
        props[record.PROPERTY_SHARDING_KEY] = group
    return props


@functools.lru_cache(maxsize=1024)
def _is_ipv4(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


def _born_host(text: str, peer: Callable[[], record.Host]) -> record.Host:
    """The client's own address (the SDK's ``born_host``) when it is IPv4, else the peer's
    (``peer()``: asked only then; the SDKs send their IPv4 address)."""
    return (text, 0) if _is_ipv4(text) else peer()


class Prepared(NamedTuple):
    """One validated v2 message, ready for :meth:`SendService.send_message`."""

    body: bytes
    props: dict[str, str]
    queue_id: int
    producer_group: str
    born_ms: int
    born_host: record.Host
    msg_type: int
    message_id: str


class Producer:
    """SendMessage for one broker app."""

    def __init__(self, app: BrokerApp, on_topic: Callable[[str, str], None]) -> None:
        self.app = app
        #: (client id, stored topic) of every accepted send: producers of a topic are found by it.
        self.on_topic = on_topic

    def _topic(self, name: str) -> TopicConfig:
        send = self.app.send
        try:
            send.check_writable_broker()
            return send.resolve_topic(name)
        except ServiceError as exc:
            raise from_service_error(exc, not_found=Code.TOPIC_NOT_FOUND,
                                     invalid=Code.ILLEGAL_TOPIC) from None

    def prepare(self, msg: definition_pb2.Message, topic: str, tc: TopicConfig,
                peer: Callable[[], record.Host]) -> Prepared:
        """Validate one message: what to send, its born host and its type."""
        sp = msg.system_properties
        msg_type = _message_type(sp)
        if tc.message_type:
            _check_topic_type(tc, msg_type)
        body = _body(msg.body, sp.body_encoding, self.app.store_config.max_message_size)
        props = _properties(msg, sp)
        queue_id = -1
        producer_group = ""
        if msg_type == _NORMAL:
            pass
        elif msg_type == _FIFO:
            queue_id = fifo_queue(sp.message_group, tc.write_queue_nums)
        elif msg_type == _DELAY:
            deliver_ms = timestamp_ms(sp.delivery_timestamp)
            if deliver_ms <= 0:
                raise V2Error(Code.ILLEGAL_DELIVERY_TIME, f"delivery_timestamp {deliver_ms} ms is not a time")
            props[record.PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
        elif msg_type == _TRANSACTION:
            props[record.PROPERTY_TRANSACTION_PREPARED] = "true"
            producer_group = topic
        born_ms = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
        return Prepared(body, props, queue_id, producer_group, born_ms, _born_host(sp.born_host, peer),
                        msg_type, props[record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])

    async def send(self, request: service_pb2.SendMessageRequest, meta: RequestMeta,
                   peer: Callable[[], record.Host]) -> service_pb2.SendMessageResponse:
        """``peer()``: the caller's address (the born host of messages without an IPv4 one)."""
        messages = request.messages
        count = len(messages)
        if not count:
            raise V2Error(Code.BAD_REQUEST, "SendMessage needs at least one message")
        first_msg = messages[0]
        first = first_msg.topic
        if count > 1:
            for msg in messages[1:]:
                if msg.topic.name != first.name or msg.topic.resource_namespace != first.resource_namespace:
                    raise V2Error(Code.BAD_REQUEST,
                                  "every message of one SendMessage must have the same topic")
        topic = topic_name(first, meta)
        tc = self._topic(topic)
        # The entries are filled in place in the response (no message built and copied in).
        response = service_pb2.SendMessageResponse()
        entries = response.entries
        if count == 1:  # what the SDKs send: one message per call
            top_code, top_message = await self._send_one(
                topic, tc, self.prepare(first_msg, topic, tc, peer), entries.add())
        else:
            # Validate everything before storing anything: a bad entry refuses the whole request.
            prepared = [self.prepare(msg, topic, tc, peer) for msg in messages]
            top_code = -1
            top_message = ""
            for p in prepared:
                code, message = await self._send_one(topic, tc, p, entries.add())
                if top_code == -1:
                    top_code, top_message = code, message
                elif code != top_code:
                    top_code, top_message = _MULTIPLE_RESULTS, "the entries have different statuses"
        if meta.client_id:
            self.on_topic(meta.client_id, topic)
        status = response.status
        status.code = top_code  # type: ignore[assignment]
        status.message = top_message
        return response

    async def _send_one(self, topic: str, tc: TopicConfig, p: Prepared,
                        entry: service_pb2.SendResultEntry) -> tuple[int, str]:
        """Send one message and fill its ``entry``; its (code, status message)."""
        try:
            outcome = await self.app.send.send_message(
                topic, p.body, p.props, p.born_host, queue_id=p.queue_id, born_timestamp=p.born_ms,
                producer_group=p.producer_group, topic_config=tc)
        except ServiceError as exc:
            err = from_service_error(exc, not_found=Code.TOPIC_NOT_FOUND,
                                     invalid=Code.ILLEGAL_DELIVERY_TIME if p.msg_type == _DELAY
                                     else Code.BAD_REQUEST)
            entry.status.code = err.code  # type: ignore[assignment]
            entry.status.message = err.message
            return err.code, err.message
        status = outcome.status
        if status is _PUT_OK and not outcome.remark:  # (identity first: an enum's hash is slow)
            code, message, stored = _OK, "OK", True
        else:
            code = PUT_STATUS_CODES.get(status, _INTERNAL_SERVER_ERROR)
            message = outcome.remark or ("OK" if code == _OK else status.name)
            stored = status in STORED_STATUSES
        entry_status = entry.status
        entry_status.code = code  # type: ignore[assignment]
        entry_status.message = message
        entry.message_id = p.message_id
        if stored:
            entry.offset = max(outcome.queue_offset, 0)
            if p.msg_type == _TRANSACTION and outcome.msg_ids:
                entry.transaction_id = outcome.msg_ids[0]
        return code, message

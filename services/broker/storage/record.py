"""The commit log record: encoding, decoding and validation (pure: no I/O, no clocks).

The layout, the property codec, tag hash codes and the reference decoder are the wire
package's (:mod:`pocketmq.wire.record`, shared with the client); this module adds what only the
store does: encoding (with the body CRC), the end-of-segment blank record and the validation of
records found in the log.

The tail of a segment that cannot hold the next record (plus the 8-byte minimum blank) is one
blank record: TOTALSIZE = bytes left in the segment, MAGICCODE = 0xcbd43194, zeros after. So no
record spans two segment files, and a scan that meets a blank continues at the next segment.

Encoding is split in two so the commit log does the minimum under its lock: :func:`prepare`
validates a :class:`Message` and computes everything that does not depend on where the record
lands (size, CRC, encoded topic and properties); :func:`encode_prepared` /
:func:`encode_batch` then add queue offset, physical offset and store timestamp with one
precompiled ``struct`` pack per record.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from isal.isal_zlib import crc32 as _isal_crc32

from pocketmq.wire.msgid import Host, host_bytes, offset_msg_id, parse_offset_msg_id
from pocketmq.wire.record import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER,
    HEADER_SIZE,
    HOST_V6_FLAGS,
    KEY_SEPARATOR,
    MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MIN_RECORD_SIZE,
    MULTI_TAGS_FLAG,
    NAME_VALUE_SEPARATOR,
    POS_BODY,
    POS_MAGIC,
    POS_PHYSICAL_OFFSET,
    POS_QUEUE_OFFSET,
    POS_STORE_TIMESTAMP,
    POS_TOTAL_SIZE,
    PREFIX,
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MIN_OFFSET,
    PROPERTY_MSG_REGION,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_SOURCE_OFFSET,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_OP,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    U16,
    MessageRecord,
    ReadableBuffer,
    RecordError,
    decode_properties,
    decode_record,
    encode_properties,
    property_value,
    read_store_timestamp,
    split_keys,
    tag_hash_code,
)

__all__ = [  # the wire package's names, re-exported for the store's modules
    "BLANK_MAGIC_CODE", "BORNHOST_V6_FLAG", "COMPRESSED_FLAG", "END_FILE_MIN_BLANK_LENGTH", "HEADER",
    "HEADER_SIZE", "HOST_V6_FLAGS", "KEY_SEPARATOR", "MAGIC_CODE", "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH", "MIN_RECORD_SIZE", "MULTI_TAGS_FLAG", "NAME_VALUE_SEPARATOR", "POS_BODY",
    "POS_MAGIC", "POS_PHYSICAL_OFFSET", "POS_QUEUE_OFFSET", "POS_STORE_TIMESTAMP", "POS_TOTAL_SIZE",
    "PREFIX", "PROPERTY_CONSUME_START_TIMESTAMP", "PROPERTY_DELAY_TIME_LEVEL", "PROPERTY_KEYS",
    "PROPERTY_MAX_OFFSET", "PROPERTY_MAX_RECONSUME_TIMES", "PROPERTY_MIN_OFFSET", "PROPERTY_MSG_REGION",
    "PROPERTY_ORIGIN_MESSAGE_ID", "PROPERTY_PRODUCER_GROUP", "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC", "PROPERTY_RECONSUME_TIME", "PROPERTY_RETRY_TOPIC", "PROPERTY_SEPARATOR",
    "PROPERTY_SHARDING_KEY", "PROPERTY_TAGS", "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_SOURCE_OFFSET", "PROPERTY_TRACE_SWITCH", "PROPERTY_TRANSACTION_CHECK_TIMES",
    "PROPERTY_TRANSACTION_OP", "PROPERTY_TRANSACTION_PREPARED",
    "PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX", "PROPERTY_WAIT_STORE_MSG_OK", "STOREHOSTADDRESS_V6_FLAG",
    "TRANSACTION_COMMIT_TYPE", "TRANSACTION_MASK", "TRANSACTION_NOT_TYPE", "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE", "U16", "Host", "MessageRecord", "ReadableBuffer", "RecordError",
    "decode_properties", "decode_record", "encode_properties", "host_bytes", "offset_msg_id",
    "parse_offset_msg_id", "property_value", "read_store_timestamp", "split_keys", "tag_hash_code",
]

_PREFIX = PREFIX
_U16 = U16

#: BODYCRC of a body: zlib's CRC-32 (the record format's checksum), computed with ISA-L, which
#: gives the same value an order of magnitude faster than zlib on message-sized bodies (it is
#: computed once per message written and once per record a slave or a recovery validates).
body_crc: Callable[[ReadableBuffer], int] = _isal_crc32

_EMPTY_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class PropertiesTooLargeError(RecordError):
    """The encoded properties exceed :data:`MAX_PROPERTIES_LENGTH`."""


class MessageTooLargeError(RecordError):
    """The encoded record exceeds the store's ``maxMessageSize``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message record is {size} bytes, more than maxMessageSize ({limit})")
        self.size = size
        self.limit = limit


# --------------------------------------------------------------------------------------------
# Messages in, records out
# --------------------------------------------------------------------------------------------


class Message(NamedTuple):
    """A message to store. Immutable; ``properties`` is treated as read-only.

    ``born_timestamp`` 0 means "use the store timestamp".
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: Mapping[str, str] = _EMPTY_PROPERTIES
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @classmethod
    def of(
        cls, topic: str, body: bytes, queue_id: int = 0, *, tags: str | None = None,
        keys: str | Sequence[str] | None = None, properties: Mapping[str, str] | None = None,
        flag: int = 0, born_timestamp: int = 0, born_host: Host = ("127.0.0.1", 0), sys_flag: int = 0,
        reconsume_times: int = 0,
    ) -> Message:
        """Convenience constructor: ``Message.of("t", b"x", 1, tags="a", keys=["k1", "k2"])``."""
        props = dict(properties or {})
        if tags:
            props[PROPERTY_TAGS] = tags
        if keys:
            props[PROPERTY_KEYS] = keys if isinstance(keys, str) else KEY_SEPARATOR.join(keys)
        return cls(topic, body, queue_id, flag, props, born_timestamp, born_host, sys_flag, reconsume_times)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))


class PreparedRecord(NamedTuple):
    """Everything about a record that does not depend on where it lands (see :func:`prepare`)."""

    size: int
    topic: str
    queue_id: int
    body: bytes
    #: TOPICLENGTH · TOPIC · PROPERTIESLENGTH · PROPERTIES, ready to append after the body.
    tail: bytes
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    tags_code: int


# topic -> TOPICLENGTH + TOPIC; bounded, cleared when full (topics are few in practice).
_topic_cache: dict[str, bytes] = {}
_TOPIC_CACHE_MAX = 8192


def _topic_prefix(topic: str) -> bytes:
    prefix = _topic_cache.get(topic)
    if prefix is None:
        if not isinstance(topic, str) or not topic:
            raise RecordError("topic must be a non-empty string")
        # Consume queues live in a directory named after the topic.
        if topic in (".", "..") or any(c in topic for c in "/\\\x00"):
            raise RecordError(f"topic {topic!r} contains characters not allowed in a topic name")
        raw = topic.encode()
        if len(raw) > MAX_TOPIC_LENGTH:
            raise RecordError(f"topic is {len(raw)} bytes, more than {MAX_TOPIC_LENGTH}")
        if len(_topic_cache) >= _TOPIC_CACHE_MAX:
            _topic_cache.clear()
        prefix = _topic_cache[topic] = bytes((len(raw),)) + raw
    return prefix


# (topic, *property items) -> encode_tail() result: producers send the same few property sets
# over and over (tags, keys of a batch job). Bounded, cleared when full. Properties carrying a
# UNIQ_KEY are unique per message by definition and never go in.
_tail_cache: dict[tuple[object, ...], tuple[bytes, int]] = {}
_TAIL_CACHE_MAX = 4096
#: The last cached set: (topic, a copy of the properties, their keys in order, the result). A
#: stream repeating one set compares two small dicts instead of building and hashing a key.
#: (One tuple, replaced whole: safe to read from any thread.)
_last_tail: tuple[str, dict[str, str], list[str], tuple[bytes, int]] = ("", {}, [], (b"", 0))


def encode_tail(topic: str, properties: Mapping[str, str]) -> tuple[bytes, int]:
    """What follows the body (TOPICLENGTH · TOPIC · PROPERTIESLENGTH · PROPERTIES) and the tag
    hash code. Raises :class:`RecordError` for a bad topic or properties.

    Results for property sets without a UNIQ_KEY are cached by content (topic and the
    ``(key, value)`` pairs in order), so a repeated set costs a tuple and a dict lookup."""
    if not properties or PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX in properties:
        return _encode_tail(topic, properties)
    last = _last_tail
    if properties == last[1] and topic == last[0] and (len(properties) == 1 or [*properties] == last[2]):
        return last[3]
    try:
        key = (topic, *properties.items())
        hit = _tail_cache.get(key)
    except TypeError:  # an unhashable key or value: not a valid property anyway
        return _encode_tail(topic, properties)
    if hit is None:
        hit = _encode_tail(topic, properties)
        if len(_tail_cache) >= _TAIL_CACHE_MAX:
            _tail_cache.clear()
        _tail_cache[key] = hit
    _remember_tail(topic, properties, hit)
    return hit


def _remember_tail(topic: str, properties: Mapping[str, str], tail: tuple[bytes, int]) -> None:
    global _last_tail
    _last_tail = (topic, dict(properties), [*properties], tail)


def _encode_tail(topic: str, properties: Mapping[str, str]) -> tuple[bytes, int]:
    prefix = _topic_cache.get(topic) or _topic_prefix(topic)
    if not properties:
        return prefix + b"\x00\x00", 0
    # encode_properties(), inlined
    try:
        text = "\x02".join(map("\x01".join, properties.items())) + "\x02"
    except TypeError:
        raise RecordError("property keys and values must be strings") from None
    n = len(properties)
    if text.count("\x01") != n or text.count("\x02") != n or "" in properties:
        encode_properties(properties)  # raises the detailed error
    encoded = text.encode()
    if len(encoded) > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError(
            f"properties are {len(encoded)} bytes, more than {MAX_PROPERTIES_LENGTH}")
    tags = properties.get(PROPERTY_TAGS)
    return b"".join((prefix, _U16.pack(len(encoded)), encoded)), tag_hash_code(tags) if tags else 0


def checked_body(body: object, queue_id: int, sys_flag: int) -> bytes:
    """The slow path of field validation (callers test ``type(body) is not bytes or queue_id < 0
    or sys_flag & HOST_V6_FLAGS`` first): the body as bytes, or RecordError."""
    if queue_id < 0:
        raise RecordError("queue_id must be >= 0")
    if sys_flag & HOST_V6_FLAGS:
        raise RecordError("IPv6 born/store hosts are not supported")
    if isinstance(body, bytes):
        return body
    if not isinstance(body, (bytearray, memoryview)):
        raise RecordError(f"body must be bytes, not {type(body).__name__}")
    return bytes(body)


def prepare(msg: Message) -> PreparedRecord:
    """Validate ``msg`` and compute its size, body CRC, tag code and encoded topic/properties.

    Raises :class:`RecordError` (:class:`PropertiesTooLargeError` for oversized properties).
    Integer fields are range-checked when the header is packed (:func:`encode_prepared` and the
    commit log raise RecordError then, before anything is written).
    """
    (topic, body, queue_id, flag, props, born_timestamp, born_host, sys_flag, reconsume_times,
     prepared_transaction_offset) = msg
    tail, tags_code = encode_tail(topic, props)
    if type(body) is not bytes or queue_id < 0 or sys_flag & HOST_V6_FLAGS:
        body = checked_body(body, queue_id, sys_flag)
    return _new_prepared(PreparedRecord, (
        HEADER_SIZE + len(body) + len(tail), topic, queue_id, body, tail, body_crc(body), flag,
        sys_flag, born_timestamp, host_bytes(born_host[0]), born_host[1], reconsume_times,
        prepared_transaction_offset, tags_code,
    ))


_new_prepared = tuple.__new__


def prepared_record(
    topic: str, queue_id: int, body: bytes, tail: bytes, tags_code: int, flag: int, born_timestamp: int,
    born_ip: bytes, born_port: int,
) -> PreparedRecord:
    """A plain record (no sys flag, not a retry, not a transaction) from parts checked already:
    ``tail, tags_code = encode_tail(topic, properties)`` and ``born_ip = host_bytes(host)``, shared
    by every message of a batch with one topic, queue and property set; ``body`` is bytes and
    ``queue_id`` >= 0. The bulk form of :func:`prepare` (no :class:`Message` per record)."""
    return _new_prepared(PreparedRecord, (
        HEADER_SIZE + len(body) + len(tail), topic, queue_id, body, tail, body_crc(body), flag, 0,
        born_timestamp, born_ip, born_port, 0, 0, tags_code,
    ))


def encode_prepared(
    p: PreparedRecord, queue_offset: int, physical_offset: int, store_timestamp: int,
    store_ip: bytes, store_port: int,
) -> bytes:
    """One record's bytes. ``store_ip`` is the 4-byte address (see :func:`host_bytes`)."""
    try:
        header = HEADER.pack(
            p.size, MAGIC_CODE, p.body_crc, p.queue_id, p.flag, queue_offset, physical_offset,
            p.sys_flag, p.born_timestamp or store_timestamp, p.born_ip, p.born_port, store_timestamp,
            store_ip, store_port, p.reconsume_times, p.prepared_transaction_offset, len(p.body),
        )
    except struct.error as exc:
        raise RecordError(f"a header field is out of range: {exc}") from None
    return b"".join((header, p.body, p.tail))


def encode_batch(
    prepared: Sequence[PreparedRecord], queue_offsets: Sequence[int], physical_offset: int,
    store_timestamp: int, store_ip: bytes, store_port: int,
) -> bytes:
    """Consecutive records as one ``bytes``; record ``i`` gets ``queue_offsets[i]`` and lands at
    ``physical_offset`` + the sizes of the records before it."""
    parts: list[bytes] = []
    append = parts.append
    pack = HEADER.pack
    offset = physical_offset
    try:
        for (size, _, queue_id, body, tail, crc, flag, sys_flag, born_ts, born_ip, born_port, reconsume,
             prepared_tx, _), queue_offset in zip(prepared, queue_offsets, strict=True):
            append(pack(
                size, MAGIC_CODE, crc, queue_id, flag, queue_offset, offset, sys_flag,
                born_ts or store_timestamp, born_ip, born_port, store_timestamp, store_ip,
                store_port, reconsume, prepared_tx, len(body),
            ))
            append(body)
            append(tail)
            offset += size
    except struct.error as exc:
        raise RecordError(f"a header field is out of range: {exc}") from None
    return b"".join(parts)


def encode_record(
    msg: Message, *, queue_offset: int, physical_offset: int, store_timestamp: int, store_host: Host,
) -> bytes:
    """Convenience: :func:`prepare` + :func:`encode_prepared` for one message."""
    return encode_prepared(prepare(msg), queue_offset, physical_offset, store_timestamp,
                           host_bytes(store_host[0]), store_host[1])


def encode_blank(length: int) -> bytes:
    """The end-of-segment filler: TOTALSIZE = ``length``, blank MAGICCODE, zeros."""
    if length < END_FILE_MIN_BLANK_LENGTH:
        raise RecordError(f"a blank record needs at least {END_FILE_MIN_BLANK_LENGTH} bytes, got {length}")
    return _PREFIX.pack(length, BLANK_MAGIC_CODE) + bytes(length - END_FILE_MIN_BLANK_LENGTH)


# --------------------------------------------------------------------------------------------
# Decoding and validation
# --------------------------------------------------------------------------------------------


class CheckKind(enum.IntEnum):
    RECORD = 0
    #: End-of-segment blank: continue at the next segment.
    BLANK = 1
    #: Plausible header but the record extends beyond the bytes available (wait for more).
    INCOMPLETE = 2
    #: Zeros, garbage, or a record that fails validation: the end of the valid log.
    CORRUPT = 3


class DispatchRequest(NamedTuple):
    """What the consume queue needs from one record."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    sys_flag: int


class RecordCheck(NamedTuple):
    kind: CheckKind
    #: Bytes to skip (record or blank size); 0 for INCOMPLETE/CORRUPT.
    size: int
    request: DispatchRequest | None = None
    reason: str = ""


def check_record(
    buf: ReadableBuffer, pos: int, available: int, *, expected_offset: int | None = None,
    segment_remaining: int | None = None, check_crc: bool = True,
) -> RecordCheck:
    """Validate the record at ``buf[pos:]`` without decoding its body.

    ``available`` bytes from ``pos`` may be read. ``expected_offset`` (the commit log offset of
    ``pos``) is compared with PHYSICALOFFSET; ``segment_remaining`` (bytes from ``pos`` to the end
    of the segment) must equal a blank record's size. Used by recovery and by the dispatcher.
    """
    if available < END_FILE_MIN_BLANK_LENGTH:
        return RecordCheck(CheckKind.INCOMPLETE, 0, None, "fewer than 8 bytes available")
    total, magic = _PREFIX.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < END_FILE_MIN_BLANK_LENGTH or (segment_remaining is not None
                                                 and total != segment_remaining):
            return RecordCheck(CheckKind.CORRUPT, 0, None, f"blank record of bad size {total}")
        if total > available:
            return RecordCheck(CheckKind.INCOMPLETE, 0, None, "partial blank record")
        return RecordCheck(CheckKind.BLANK, total)
    if magic != MAGIC_CODE:
        return RecordCheck(CheckKind.CORRUPT, 0, None,
                           "end of data" if total == 0 and magic == 0 else f"bad magic code 0x{magic:08x}")
    if total < MIN_RECORD_SIZE or (segment_remaining is not None
                                   and total + END_FILE_MIN_BLANK_LENGTH > segment_remaining):
        return RecordCheck(CheckKind.CORRUPT, 0, None, f"bad record size {total}")
    if total > available:
        return RecordCheck(CheckKind.INCOMPLETE, 0, None, "partial record")
    (_, _, crc, queue_id, _, queue_offset, physical_offset, sys_flag, _, _, _, store_ts, _, _, _, _,
     body_len) = HEADER.unpack_from(buf, pos)
    if expected_offset is not None and physical_offset != expected_offset:
        return RecordCheck(CheckKind.CORRUPT, 0, None,
                           f"PHYSICALOFFSET {physical_offset} != position {expected_offset}")
    body_end = pos + HEADER_SIZE + body_len
    end = pos + total
    if body_len < 0 or body_end + 3 > end:
        return RecordCheck(CheckKind.CORRUPT, 0, None, "body length overruns the record")
    topic_len = buf[body_end]
    props_at = body_end + 1 + topic_len
    if topic_len == 0 or props_at + 2 > end:
        return RecordCheck(CheckKind.CORRUPT, 0, None, "bad topic length")
    (props_len,) = _U16.unpack_from(buf, props_at)
    if props_at + 2 + props_len != end:
        return RecordCheck(CheckKind.CORRUPT, 0, None, "field sizes do not add up to TOTALSIZE")
    if check_crc and body_crc(buf[pos + HEADER_SIZE:body_end]) != crc:
        return RecordCheck(CheckKind.CORRUPT, 0, None, "body CRC mismatch")
    try:
        topic = bytes(buf[body_end + 1:props_at]).decode()
    except UnicodeDecodeError:
        return RecordCheck(CheckKind.CORRUPT, 0, None, "topic is not UTF-8")
    tags_code = 0
    if props_len:
        tags = property_value(bytes(buf[props_at + 2:end]), PROPERTY_TAGS)
        if tags:
            tags_code = tag_hash_code(tags)
    return RecordCheck(CheckKind.RECORD, total, DispatchRequest(
        topic, queue_id, queue_offset, physical_offset, total, tags_code, store_ts, sys_flag))

"""The commit log record: encoding, decoding and validation (pure: no I/O, no clocks).

Layout (big-endian, RocketMQ 4.x ``CommitLog`` with IPv4 hosts)::

    offset  size  field
         0     4  TOTALSIZE                   whole record, this field included
         4     4  MAGICCODE                   0xdaa320a7 (0xcbd43194 for the end-of-file blank)
         8     4  BODYCRC                     zlib.crc32(body)
        12     4  QUEUEID
        16     4  FLAG
        20     8  QUEUEOFFSET                 index in the (topic, queue id) consume queue
        28     8  PHYSICALOFFSET              offset of this record in the commit log
        36     4  SYSFLAG                     see the *_FLAG / TRANSACTION_* constants
        40     8  BORNTIMESTAMP               ms
        48     8  BORNHOST                    IPv4 4 + port 4
        56     8  STORETIMESTAMP              ms
        64     8  STOREHOSTADDRESS            IPv4 4 + port 4
        72     4  RECONSUMETIMES
        76     8  PREPAREDTRANSACTIONOFFSET
        84     4  BODYLENGTH                  then BODY
         .     1  TOPICLENGTH                 then TOPIC (UTF-8, at most 127 bytes)
         .     2  PROPERTIESLENGTH            then PROPERTIES (``k\\x01v\\x02`` pairs, UTF-8)

The tail of a segment that cannot hold the next record (plus the 8-byte minimum blank) is one
blank record: TOTALSIZE = bytes left in the segment, MAGICCODE = 0xcbd43194, zeros after. So no
record spans two segment files, and a scan that meets a blank continues at the next segment.

Differences from RocketMQ worth knowing: BODYCRC is the full ``zlib.crc32`` (RocketMQ masks it
with 0x7fffffff); IPv6 hosts (``BORNHOST_V6_FLAG``/``STOREHOSTADDRESS_V6_FLAG``) are rejected.

Encoding is split in two so the commit log does the minimum under its lock: :func:`prepare`
validates a :class:`Message` and computes everything that does not depend on where the record
lands (size, CRC, encoded topic and properties); :func:`encode_prepared` /
:func:`encode_batch` then add queue offset, physical offset and store timestamp with one
precompiled ``struct`` pack per record.
"""

from __future__ import annotations

import enum
import functools
import socket
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
#: A segment always keeps room for a blank record of at least this size (TOTALSIZE + MAGICCODE).
END_FILE_MIN_BLANK_LENGTH = 8
#: Largest topic, in UTF-8 bytes (TOPICLENGTH is a Java byte).
MAX_TOPIC_LENGTH = 127
#: Largest encoded properties (PROPERTIESLENGTH is a Java short).
MAX_PROPERTIES_LENGTH = 32767

# SYSFLAG bits (RocketMQ MessageSysFlag).
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
_TRANSACTION_MASK = 0xC
#: IPv6 hosts change the record layout; not supported.
HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG

# Well-known property keys (RocketMQ MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
#: Epoch milliseconds at which a timer message is delivered to its real topic (RocketMQ 5).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: On a delivered timer message: the commit log offset of its timer record (delivery check).
PROPERTY_TIMER_SOURCE_OFFSET = "TIMER_SOURCE_OFFSET"
#: How often an unresolved half (transaction) message was checked (RocketMQ's name).
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: What an op record of the transaction op topic did: commit, rollback or discard.
PROPERTY_TRANSACTION_OP = "TRAN_OP"
#: Separator of several keys in the KEYS property.
KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Field positions inside a record.
POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_STORE_TIMESTAMP = 56
POS_BODY = 88

#: Everything up to and including BODYLENGTH, in one precompiled struct.
HEADER = struct.Struct(">iIIiiqqiq4siq4siiqi")
HEADER_SIZE = HEADER.size  # 88
#: Record size with empty body, topic and properties (header + TOPICLENGTH + PROPERTIESLENGTH).
MIN_RECORD_SIZE = HEADER_SIZE + 1 + 2
_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
_U16 = struct.Struct(">H")
_I64 = struct.Struct(">q")
_MSG_ID = struct.Struct(">4siq")


ReadableBuffer = bytes | bytearray | memoryview
Host = tuple[str, int]

_EMPTY_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class RecordError(ValueError):
    """A message that cannot be encoded, or bytes that are not a valid record."""


class PropertiesTooLargeError(RecordError):
    """The encoded properties exceed :data:`MAX_PROPERTIES_LENGTH`."""


class MessageTooLargeError(RecordError):
    """The encoded record exceeds the store's ``maxMessageSize``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message record is {size} bytes, more than maxMessageSize ({limit})")
        self.size = size
        self.limit = limit


# --------------------------------------------------------------------------------------------
# Properties and tags
# --------------------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``{"TAGS": "a", "KEYS": "k"}`` -> ``b"TAGS\\x01a\\x02KEYS\\x01k\\x02"`` (RocketMQ's
    ``messageProperties2String``). Keys must be non-empty; neither keys nor values may contain
    the separators ``\\x01``/``\\x02``."""
    if not properties:
        return b""
    try:
        text = "\x02".join(map("\x01".join, properties.items())) + "\x02"
    except TypeError:
        raise RecordError("property keys and values must be strings") from None
    n = len(properties)
    if text.count("\x01") != n or text.count("\x02") != n or "" in properties:
        bad = next((k for k, v in properties.items() if not k or _has_separator(k) or _has_separator(v)), "")
        raise RecordError(f"property {bad!r}: keys must be non-empty and keys/values must not contain "
                          "\\x01 or \\x02")
    return text.encode()


def _has_separator(text: str) -> bool:
    return "\x01" in text or "\x02" in text


def decode_properties(data: ReadableBuffer) -> dict[str, str]:
    """Inverse of :func:`encode_properties`; tolerates a missing final separator."""
    if not data:
        return {}
    props: dict[str, str] = {}
    for item in bytes(data).decode("utf-8", "replace").split("\x02"):
        if item:
            key, _, value = item.partition("\x01")
            props[key] = value
    return props


def property_value(encoded: bytes, key: str) -> str | None:
    """One property straight from encoded properties, without decoding the others."""
    needle = key.encode() + b"\x01"
    i = encoded.find(needle)
    while i > 0 and encoded[i - 1] != 2:  # must start a pair, not end another key
        i = encoded.find(needle, i + 1)
    if i < 0:
        return None
    start = i + len(needle)
    end = encoded.find(b"\x02", start)
    return encoded[start: end if end >= 0 else len(encoded)].decode("utf-8", "replace")


@functools.lru_cache(maxsize=65536)
def tag_hash_code(tag: str) -> int:
    """The consume queue tag code: Java ``String.hashCode()`` of the tag (UTF-16 code units,
    32-bit wrap-around), sign-extended to int64 as RocketMQ stores it. Empty tag -> 0."""
    h = 0
    units: Iterable[int]
    if tag.isascii():
        units = tag.encode()
    else:
        raw = tag.encode("utf-16-be")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


# --------------------------------------------------------------------------------------------
# Hosts and message ids
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def host_bytes(ip: str) -> bytes:
    """Dotted IPv4 -> 4 bytes. Raises RecordError for anything else (IPv6 is not supported)."""
    try:
        return socket.inet_aton(ip) if ip.count(".") == 3 else _bad_host(ip)
    except OSError:
        return _bad_host(ip)


def _bad_host(ip: str) -> bytes:
    raise RecordError(f"host {ip!r} is not a dotted IPv4 address")


def offset_msg_id(store_host: Host, physical_offset: int) -> str:
    """RocketMQ's offset message id: hex of store IPv4 4 · port 4 · commit log offset 8."""
    return _MSG_ID.pack(host_bytes(store_host[0]), store_host[1], physical_offset).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """Inverse of :func:`offset_msg_id`: ``((ip, port), physical offset)``."""
    try:
        ip, port, offset = _MSG_ID.unpack(bytes.fromhex(msg_id))
    except (ValueError, struct.error):
        raise RecordError(f"not an offset message id: {msg_id!r}") from None
    return (socket.inet_ntoa(ip), port), offset


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
        return _split_keys(self.properties.get(PROPERTY_KEYS))


def _split_keys(value: str | None) -> list[str]:
    return [k for k in value.split(KEY_SEPARATOR) if k] if value else []


class MessageRecord(NamedTuple):
    """A record decoded from the commit log."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    store_size: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return _split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def tags_code(self) -> int:
        tags = self.tags
        return tag_hash_code(tags) if tags else 0

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + physical offset)."""
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def next_physical_offset(self) -> int:
        return self.physical_offset + self.store_size


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


def encode_tail(topic: str, properties: Mapping[str, str]) -> tuple[bytes, int]:
    """What follows the body (TOPICLENGTH · TOPIC · PROPERTIESLENGTH · PROPERTIES) and the tag
    hash code. Raises :class:`RecordError` for a bad topic or properties.

    Results for property sets without a UNIQ_KEY are cached by content (topic and the
    ``(key, value)`` pairs in order), so a repeated set costs a tuple and a dict lookup."""
    if not properties or PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX in properties:
        return _encode_tail(topic, properties)
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
    return hit


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
        HEADER_SIZE + len(body) + len(tail), topic, queue_id, body, tail, zlib.crc32(body), flag,
        sys_flag, born_timestamp, host_bytes(born_host[0]), born_host[1], reconsume_times,
        prepared_transaction_offset, tags_code,
    ))


_new_prepared = tuple.__new__


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


def decode_record(buf: ReadableBuffer, pos: int = 0, *, check_crc: bool = True) -> MessageRecord:
    """Decode the record at ``buf[pos:]``. Raises :class:`RecordError` if it is not a complete,
    consistent record (wrong magic, sizes that disagree, CRC mismatch with ``check_crc``)."""
    try:
        (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
         born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared_tx,
         body_len) = HEADER.unpack_from(buf, pos)
    except struct.error:
        raise RecordError(f"truncated record header at {pos}") from None
    if magic != MAGIC_CODE:
        raise RecordError(f"bad magic code 0x{magic:08x} at {pos}")
    body_start = pos + HEADER_SIZE
    body_end = body_start + body_len
    if body_len < 0 or body_end + 3 > pos + total or pos + total > len(buf):
        raise RecordError(f"inconsistent or truncated record at {pos} (size {total})")
    body = bytes(buf[body_start:body_end])
    topic_len = buf[body_end]
    props_at = body_end + 1 + topic_len
    if props_at + 2 > pos + total:
        raise RecordError(f"inconsistent record at {pos}: topic overruns the record")
    (props_len,) = _U16.unpack_from(buf, props_at)
    if props_at + 2 + props_len != pos + total:
        raise RecordError(f"inconsistent record at {pos}: sizes do not add up to {total}")
    if check_crc and zlib.crc32(body) != crc:
        raise RecordError(f"body CRC mismatch at {pos}")
    return MessageRecord(
        bytes(buf[body_end + 1:props_at]).decode("utf-8", "replace"), queue_id, queue_offset,
        physical_offset, body, decode_properties(buf[props_at + 2:props_at + 2 + props_len]),
        flag, sys_flag, born_ts, (socket.inet_ntoa(born_ip), born_port), store_ts,
        (socket.inet_ntoa(store_ip), store_port), reconsume, prepared_tx, crc, total,
    )


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
    if check_crc and zlib.crc32(buf[pos + HEADER_SIZE:body_end]) != crc:
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


def read_store_timestamp(buf: ReadableBuffer, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (no validation)."""
    value: int = _I64.unpack_from(buf, pos + POS_STORE_TIMESTAMP)[0]
    return value

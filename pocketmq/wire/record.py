"""The commit-log record (RocketMQ 4.x ``CommitLog`` layout, IPv4 hosts): layout, properties,
tag hash codes and the reference decoder. The broker stores these bytes and serves them
unchanged in ``raw_records`` pull replies; the client and the Spark reader decode them.

Layout (big-endian)::

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

Differences from RocketMQ worth knowing: BODYCRC is the full ``zlib.crc32`` (RocketMQ masks it
with 0x7fffffff); IPv6 hosts (``BORNHOST_V6_FLAG``/``STOREHOSTADDRESS_V6_FLAG``) are rejected.

Hot paths unpack only the fields they need: :func:`header_format` derives their ``struct``
formats from :data:`HEADER_FIELDS` once, at import time.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

from pocketmq.wire.errors import RecordError
from pocketmq.wire.msgid import Host, offset_msg_id

__all__ = [
    "BLANK_MAGIC_CODE", "HEADER", "HEADER_FIELDS", "HEADER_SIZE", "MAGIC_CODE", "MIN_RECORD_SIZE",
    "MessageRecord", "RecordError", "decode_properties", "decode_record", "encode_properties",
    "field_offset", "header_format", "property_value", "split_keys", "tag_hash_code",
]

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
TRANSACTION_MASK = 0xC
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

# --------------------------------------------------------------------------------------------
# The header, defined once
# --------------------------------------------------------------------------------------------

#: The fixed header, in order: (name, ``struct`` code). A host is IPv4 4 bytes + port.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_size", "i"),
    ("magic", "I"),
    ("body_crc", "I"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("physical_offset", "q"),
    ("sys_flag", "i"),
    ("born_timestamp", "q"),
    ("born_host", "4si"),
    ("store_timestamp", "q"),
    ("store_host", "4si"),
    ("reconsume_times", "i"),
    ("prepared_transaction_offset", "q"),
    ("body_length", "i"),
)
_FIELD_NAMES = frozenset(name for name, _ in HEADER_FIELDS)


def header_format(keep: Collection[str] | None = None, *, raw_hosts: bool = False) -> str:
    """The ``struct`` format of the header: every field, or only ``keep`` (the others become pad
    bytes, so one unpack skips them). ``raw_hosts`` packs each host as one 8-byte string (IPv4
    4 · port 4) instead of ``(ip bytes, port)``."""
    if keep is not None and not _FIELD_NAMES.issuperset(keep):
        raise ValueError(f"unknown header fields {sorted(set(keep) - _FIELD_NAMES)}")
    parts: list[str] = []
    pad = 0
    for name, code in HEADER_FIELDS:
        if code == "4si" and raw_hosts:
            code = "8s"
        if keep is not None and name not in keep:
            pad += struct.calcsize(">" + code)
            continue
        if pad:
            parts.append(f"{pad}x")
            pad = 0
        parts.append(code)
    if pad:
        parts.append(f"{pad}x")
    return ">" + "".join(parts)


def field_offset(name: str) -> int:
    """Byte offset of a header field in the record."""
    pos = 0
    for field, code in HEADER_FIELDS:
        if field == name:
            return pos
        pos += struct.calcsize(">" + code)
    raise ValueError(f"unknown header field {name!r}")


#: Everything up to and including BODYLENGTH, in one precompiled struct.
HEADER = struct.Struct(header_format())
HEADER_SIZE = HEADER.size  # 88
#: Record size with empty body, topic and properties (header + TOPICLENGTH + PROPERTIESLENGTH).
MIN_RECORD_SIZE = HEADER_SIZE + 1 + 2
#: TOTALSIZE and MAGICCODE: the first look at a record (and a whole blank record's header).
PREFIX = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS[:2]))
#: PROPERTIESLENGTH.
U16 = struct.Struct(">H")

# Field positions inside a record.
POS_TOTAL_SIZE = field_offset("total_size")
POS_MAGIC = field_offset("magic")
POS_QUEUE_OFFSET = field_offset("queue_offset")
POS_PHYSICAL_OFFSET = field_offset("physical_offset")
POS_STORE_TIMESTAMP = field_offset("store_timestamp")
POS_STORE_HOST = field_offset("store_host")
POS_BODY = HEADER_SIZE

_I64 = struct.Struct(">q")

ReadableBuffer = bytes | bytearray | memoryview

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


def split_keys(value: str | None) -> list[str]:
    """The KEYS property -> the keys (space-separated, blanks dropped)."""
    return [k for k in value.split(KEY_SEPARATOR) if k] if value else []


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
# The reference decoder
# --------------------------------------------------------------------------------------------


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
        return split_keys(self.properties.get(PROPERTY_KEYS))

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
    (props_len,) = U16.unpack_from(buf, props_at)
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


def decode_records(buf: ReadableBuffer) -> list[MessageRecord]:
    """Every record of concatenated records (a ``raw_records`` pull reply), CRC-checked."""
    out: list[MessageRecord] = []
    pos = 0
    while pos < len(buf):
        rec = decode_record(buf, pos)
        out.append(rec)
        pos += rec.store_size
    return out


def read_store_timestamp(buf: ReadableBuffer, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (no validation)."""
    value: int = _I64.unpack_from(buf, pos + POS_STORE_TIMESTAMP)[0]
    return value

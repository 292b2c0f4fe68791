"""The client's decoder: a ``raw_records`` pull reply -> :class:`ReceivedMessage` s.

A consumer decodes every message it receives, so this is the client's per-message hot path. Per
record it does at once only what cannot wait or costs little: one precompiled unpack of the
header integers, the range checks that make the whole reply trustworthy, the body copy with its
CRC check (ISA-L's CRC-32, the broker's; zlib's result) and the topic and queue (shared by the
messages of a queue). The fields that cost most to build or that many consumers never read
(commit-log offset, store timestamp, reconsume times, tags, keys, properties, message id,
hosts) are left unset: the first read of any of them
decodes them, once, from the reply (:class:`Reply`), for every message of the reply still in the
list the decoder returned (a consumer that reads one such field usually reads it of every
message), and tells the reader's :class:`DecodeHint`: its next replies are decoded whole at once.
A reply of like records (one body, topic and properties size: one producer's batch) is checked
on byte columns and read in one ``struct.iter_unpack`` pass of what its messages get
(:func:`_check_uniform`); others record by record. A message gives what the reference decoder
(:func:`pocketmq.wire.record.decode_record`) gives; a property test checks that they agree.
"""

from __future__ import annotations

import socket
import struct
import weakref
from collections.abc import Iterable
from itertools import repeat
from typing import Any

from isal.isal_zlib import crc32

from pocketmq.wire.errors import RecordError
from pocketmq.wire.messages import MessageQueue, MessageSlots, ReceivedMessage
from pocketmq.wire.protoscan import Span
from pocketmq.wire.record import (
    HEADER_SIZE,
    MAGIC_CODE,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    decode_record,
    field_offset,
    header_format,
    split_keys,
)

__all__ = ["DecodeHint", "Messages", "Pending", "Reply", "decode_pending", "decode_received"]

#: The header integers a message carries (read at once), and the checks' sizes.
_HEADER = struct.Struct(header_format(
    ("total_size", "magic", "body_crc", "queue_id", "queue_offset", "physical_offset", "born_timestamp",
     "store_timestamp", "reconsume_times", "body_length")))
#: What the deferred fields need; hosts as raw 8-byte strings (IPv4 4 + port 4; the store host's
#: bytes are the first half of the offset message id).
_REST = struct.Struct(header_format(("total_size", "physical_offset", "born_host", "store_timestamp",
                                     "store_host", "reconsume_times", "body_length"), raw_hosts=True))
assert _HEADER.size == _REST.size == HEADER_SIZE
#: BORNHOST and STOREHOSTADDRESS, from BORNHOST on (eager decoding).
_HOSTS = struct.Struct(">8s8x8s")
_POS_BORN_HOST = field_offset("born_host")
assert field_offset("store_host") == _POS_BORN_HOST + 16
_U64 = 0xFFFF_FFFF_FFFF_FFFF
_CACHE_MAX = 4096
#: What a uniform reply's record gives when read whole (see _Layout): BODYCRC, then the fields its
#: message gets when built, then BODY and the tail (TOPICLENGTH, TOPIC, PROPERTIESLENGTH).
_UNIFORM_HEADER = header_format(("body_crc", "queue_offset", "born_timestamp"))
#: What the deferred fields of a uniform reply's record need (see _Layout), hosts raw.
_UNIFORM_REST = header_format(("physical_offset", "born_host", "store_timestamp", "store_host",
                               "reconsume_times"), raw_hosts=True)
#: The header bytes every record of a uniform reply has alike: TOTALSIZE, MAGICCODE, QUEUEID,
#: BODYLENGTH (checked as columns of the reply's bytes).
_UNIFORM_ALIKE = tuple(
    pos for name, size in (("total_size", 4), ("magic", 4), ("queue_id", 4), ("body_length", 4))
    for pos in range(field_offset(name), field_offset(name) + size))
#: (body length, topic length, properties length) -> that layout.
_layouts: dict[tuple[int, int, int], _Layout] = {}

#: raw host -> ("ip:port", the upper-case hex of the raw bytes: the first half of an offset
#: message id).
_hosts: dict[bytes, tuple[str, str]] = {}
#: raw encoded properties -> (properties, tags, keys) as decode_properties + the KEYS split give.
_property_sets: dict[bytes, tuple[dict[str, str], str, tuple[str, ...]]] = {}
_NO_PROPERTIES: tuple[dict[str, str], str, tuple[str, ...]] = ({}, "", ())

#: Sets a slot of a (frozen) ReceivedMessage. Deferred fields are set this way, not by turning the
#: message back into a MessageSlots for a moment: another thread may be reading it.
_set = object.__setattr__


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
                                     tuple(split_keys(props.get(PROPERTY_KEYS))))
    return hit


class DecodeHint:
    """Whether a reader of decoded replies (a consumer's queue) reads the fields the decoder can
    defer: once it has read one, its next replies are decoded whole at once, which costs it less
    than deferring them and decoding them later."""

    __slots__ = ("eager",)

    def __init__(self) -> None:
        self.eager = False


class Messages(list[ReceivedMessage]):
    """The messages of one reply, as :func:`decode_received` returns them (a list its reply can
    reach weakly)."""

    __slots__ = ("__weakref__",)


class Reply:
    """One decoded reply: the records (checked when decoded) the deferred fields of its
    messages are read from. A message holds its reply until those fields are set; the reply
    reaches its messages only through a weak reference to their list, so nothing here is a
    reference cycle."""

    __slots__ = ("data", "hint", "messages")

    def __init__(self, data: bytes, messages: Messages, hint: DecodeHint | None) -> None:
        self.data = data
        self.messages: weakref.ReferenceType[Messages] | None = weakref.ref(messages)
        self.hint = hint

    def fill(self, message: ReceivedMessage) -> None:
        """Set the deferred fields of ``message``: of every message of the reply still in its
        list (a consumer that reads one such field of a message reads it of the others too),
        else of ``message`` alone. The messages filled let go of the reply."""
        ref = self.messages
        batch = ref() if ref is not None else None
        self.messages = None
        if self.hint is not None:
            self.hint.eager = True
        if batch is None:
            self._fill((message,))
        else:
            self._fill(batch)
            if message._source is self:  # no longer in the list
                self._fill((message,))

    def _fill(self, messages: Iterable[ReceivedMessage]) -> None:
        data = self.data
        unpack = _REST.unpack_from
        hosts = _hosts
        property_sets = _property_sets
        header_size = HEADER_SIZE
        for message in messages:
            if message._source is not self:
                continue
            pos = message._position
            total, physical_offset, born_raw, store_ts, store_raw, reconsume, body_len = unpack(data, pos)
            record_end = pos + total
            body_end = pos + header_size + body_len
            props_at = body_end + 3 + data[body_end]  # after TOPICLENGTH, TOPIC, PROPERTIESLENGTH
            if props_at == record_end:
                props, tags, keys = _NO_PROPERTIES
            else:
                props_raw = data[props_at:record_end]
                hit = property_sets.get(props_raw)
                props, tags, keys = hit if hit is not None else _property_set(props_raw)
            born = hosts.get(born_raw) or _host(born_raw)
            store = hosts.get(store_raw) or _host(store_raw)
            _set(message, "tags", tags)
            _set(message, "keys", keys)
            _set(message, "properties", props.copy())
            _set(message, "commit_log_offset", physical_offset)
            # The offset message id: store host and PHYSICALOFFSET, as upper-case hex.
            _set(message, "msg_id", f"{store[1]}{physical_offset & _U64:016X}")
            _set(message, "store_timestamp", store_ts)
            _set(message, "born_host", born[0])
            _set(message, "store_host", store[0])
            _set(message, "reconsume_times", reconsume)
            _set(message, "_source", None)


def _corrupt(data: bytes, pos: int) -> RecordError:
    """The error for the record at ``pos``, worded by the reference decoder."""
    try:
        decode_record(data, pos)
    except RecordError as exc:
        return RecordError(f"at byte {pos}: {exc}")
    return RecordError(f"at byte {pos}: not a valid record")  # pragma: no cover


class _Layout:
    """How the records of a uniform reply are read: ``size`` bytes each; ``fields`` unpacks one
    record's BODYCRC, QUEUEOFFSET, BORNTIMESTAMP, BODY and tail (TOPICLENGTH, TOPIC,
    PROPERTIESLENGTH), the other bytes skipped; ``rest`` what the deferred fields need, for a
    reader of them (PHYSICALOFFSET, the hosts, STORETIMESTAMP, RECONSUMETIMES, properties)."""

    __slots__ = ("fields", "rest", "size")

    def __init__(self, size: int, body_len: int, topic_len: int) -> None:
        tail = 3 + topic_len
        self.size = size
        props_len = size - HEADER_SIZE - body_len - tail
        self.fields = struct.Struct(f"{_UNIFORM_HEADER}{body_len}s{tail}s{props_len}x")
        self.rest = struct.Struct(f"{_UNIFORM_REST}{body_len + tail}x{props_len}s")


def _uniform_layout(data: bytes, start: int, end: int) -> _Layout | None:
    """The layout of the first record of ``data[start:end]``, if every record there may have it
    (the length is a multiple of its size). None if not, or if the first record is not sane."""
    try:
        total, magic, *_, body_len = _HEADER.unpack_from(data, start)
    except struct.error:
        return None
    body_end = HEADER_SIZE + body_len
    if (magic != MAGIC_CODE or body_len < 0 or total < body_end + 3 or (end - start) % total
            or end > len(data)):
        return None
    topic_len = data[start + body_end]
    props_len = total - body_end - 3 - topic_len
    props_at = start + body_end + 1 + topic_len
    if props_len < 0 or data[props_at] << 8 | data[props_at + 1] != props_len:
        return None
    key = (body_len, topic_len, props_len)
    layout = _layouts.get(key)
    if layout is None:
        if len(_layouts) >= _CACHE_MAX:
            _layouts.clear()
        layout = _layouts[key] = _Layout(total, body_len, topic_len)
    return layout


#: A uniform reply, checked (:func:`_check_uniform`): the bytes and where its records start in
#: them, the layout, the queue id, the records' tail (TOPICLENGTH, TOPIC, PROPERTIESLENGTH), then
#: the records' queue offsets, born timestamps and bodies.
Uniform = tuple[bytes, int, _Layout, int, bytes, tuple[int, ...], tuple[int, ...], tuple[bytes, ...]]


def _check_uniform(data: bytes, start: int = 0, end: int | None = None) -> Uniform | None:
    """``data[start:end]`` if its records all have one layout (one body, topic and properties
    size: a batch of like messages, the common case), checked whole: the header bytes every
    record has alike (sizes, magic, queue id) compared as columns of the bytes, the records read
    in one ``struct.iter_unpack`` pass (only what their messages get when built, the CRC and the
    tail), the tails compared and the CRCs computed with one ``map``. None when the records are
    not like that, or fail a check: the record-by-record decoder then decodes them or names the
    fault."""
    if end is None:
        end = len(data)
    layout = _uniform_layout(data, start, end)
    if layout is None:
        return None
    size = layout.size
    n = (end - start) // size
    for at in _UNIFORM_ALIKE:
        column = data[start + at:end:size]  # that byte of every record
        if column.count(column[:1]) != n:
            return None
    records = data if start == 0 and end == len(data) else memoryview(data)[start:end]
    crcs, queue_offsets, borns, bodies, tails = zip(*layout.fields.iter_unpack(records))  # noqa: B905
    tail = tails[0]
    if tails.count(tail) != n or tuple(map(crc32, bodies)) != crcs:
        return None
    queue_id = int.from_bytes(data[start + 12:start + 16], "big", signed=True)
    return data, start, layout, queue_id, tail, queue_offsets, borns, bodies


def _build_uniform(checked: Uniform, broker_name: str, reply: Reply | None, out: Messages) -> None:
    """The messages of a checked uniform reply (:func:`_check_uniform`), into ``out``: each gets
    its body, queue offset and born timestamp and the reply's topic and queue here; the other
    fields are deferred to ``reply``, or set here too when there is none (a reader of them:
    see :class:`DecodeHint`)."""
    _, pos, layout, queue_id, tail, queue_offsets, borns, bodies = checked
    size = layout.size
    topic = tail[1:-2].decode("utf-8", "replace")
    queue = MessageQueue(topic, broker_name, queue_id)
    received = ReceivedMessage
    allocate: Any = object.__new__
    out.extend(map(allocate, repeat(MessageSlots, len(bodies))))  # allocated in one C loop
    msg: Any
    if reply is None:
        _build_uniform_whole(checked, topic, queue, out)
        return
    for msg, queue_offset, born_ts, body in zip(out, queue_offsets, borns, bodies, strict=True):
        msg.topic = topic
        msg.queue = queue
        msg.body = body
        msg.queue_offset = queue_offset
        msg.born_timestamp = born_ts
        msg._source = reply
        msg._position = pos
        msg.__class__ = received
        pos += size


def _build_uniform_whole(checked: Uniform, topic: str, queue: MessageQueue, out: Messages) -> None:
    """:func:`_build_uniform` with every field set at once (``out`` holds the allocated
    messages): one more ``struct.iter_unpack`` pass reads what the deferred fields need."""
    data, start, layout, _, _, queue_offsets, borns, bodies = checked
    end = start + layout.size * len(bodies)
    records = data if start == 0 and end == len(data) else memoryview(data)[start:end]
    hosts = _hosts
    property_sets = _property_sets
    last_born = last_store = b""
    born_host = store_host = store_hex = ""
    received = ReceivedMessage
    msg: Any
    for msg, queue_offset, born_ts, body, (physical_offset, born_raw, store_ts, store_raw, reconsume,
                                           props_raw) in zip(out, queue_offsets, borns, bodies,
                                                             layout.rest.iter_unpack(records), strict=True):
        msg.topic = topic
        msg.queue = queue
        msg.body = body
        msg.queue_offset = queue_offset
        msg.born_timestamp = born_ts
        msg.commit_log_offset = physical_offset
        msg.store_timestamp = store_ts
        msg.reconsume_times = reconsume
        if born_raw != last_born:
            born_host = (hosts.get(born_raw) or _host(born_raw))[0]
            last_born = born_raw
        if store_raw != last_store:
            store_host, store_hex = hosts.get(store_raw) or _host(store_raw)
            last_store = store_raw
        if props_raw:
            hit = property_sets.get(props_raw)
            props, msg.tags, msg.keys = hit if hit is not None else _property_set(props_raw)
            msg.properties = props.copy()
        else:
            msg.properties = {}
            msg.tags = ""
            msg.keys = ()
        msg.msg_id = f"{store_hex}{physical_offset & _U64:016X}"
        msg.born_host = born_host
        msg.store_host = store_host
        msg.__class__ = received


class Pending:
    """A reply checked whole (it decodes, or :func:`decode_pending` raised) whose messages are
    built when first asked for (:meth:`messages`): a reader that holds replies until its
    application asks for them builds each just before it is read (in the CPU caches still, and
    gone again before the garbage collector's older generations see it). ``queue_offsets`` are
    the records' queue offsets (ascending as stored)."""

    __slots__ = ("_broker_name", "_built", "_checked", "_data", "_hint", "queue_offsets")

    def __init__(self, data: bytes, broker_name: str, hint: DecodeHint | None,
                 checked: Uniform | None, built: Messages | None,
                 queue_offsets: tuple[int, ...]) -> None:
        self._data = data
        self._broker_name = broker_name
        self._hint = hint
        self._checked = checked
        self._built = built
        self.queue_offsets = queue_offsets

    def __len__(self) -> int:
        return len(self.queue_offsets)

    def messages(self) -> Messages:
        """The messages (built once)."""
        built = self._built
        if built is None:
            checked = self._checked
            assert checked is not None
            built = self._built = Messages()
            hint = self._hint
            whole = hint is not None and hint.eager  # (as it is now: a read may have set it since)
            reply = None if whole else Reply(self._data, built, hint)
            _build_uniform(checked, self._broker_name, reply, built)
            self._checked = None
        return built


def decode_pending(data: bytes | bytearray | memoryview | Span, broker_name: str,
                   hint: DecodeHint | None = None) -> Pending:
    """:func:`decode_received`, the messages built when first asked for (see :class:`Pending`).
    Raises :class:`RecordError` on bytes that are not valid records, as it does. A
    :class:`~pocketmq.wire.protoscan.Span` (records inside a larger message) is read in place
    when its records are alike."""
    if isinstance(data, Span):
        whole, start, end = data
        checked = _check_uniform(whole, start, end)
        if checked is not None:
            return Pending(whole, broker_name, hint, checked, None, checked[5])
        data = whole[start:end]
    elif type(data) is not bytes:
        data = bytes(data)
    checked = _check_uniform(data)
    if checked is not None:
        return Pending(data, broker_name, hint, checked, None, checked[5])
    built = decode_received(data, broker_name, hint)
    return Pending(data, broker_name, hint, None, built, tuple(m.queue_offset for m in built))


def decode_received(data: bytes | bytearray | memoryview, broker_name: str,
                    hint: DecodeHint | None = None) -> Messages:
    """Messages from a ``raw_records`` pull reply: concatenated commit-log records (the broker's
    storage format, CRC-checked here), the same as :func:`~pocketmq.wire.record.decode_records`
    gives. Raises :class:`RecordError` on bytes that are not valid records. With a ``hint``
    that says so, nothing is deferred; reading a deferred field sets it."""
    if type(data) is not bytes:
        data = bytes(data)
    out = Messages()
    eager = hint is not None and hint.eager
    reply = Reply(data, out, hint)
    if (checked := _check_uniform(data)) is not None:
        _build_uniform(checked, broker_name, None if eager else reply, out)
        return out
    hosts_at = _HOSTS.unpack_from
    hosts = _hosts
    property_sets = _property_sets
    last_born = last_store = b""
    born_host = store_host = store_hex = ""
    append = out.append
    unpack = _HEADER.unpack_from
    check = crc32
    new = object.__new__
    builder = MessageSlots
    received = ReceivedMessage
    magic_code = MAGIC_CODE
    header_size = HEADER_SIZE
    queues: dict[tuple[bytes, int], tuple[str, MessageQueue]] = {}
    last_topic = b""
    last_queue_id = -1
    topic = ""
    queue = MessageQueue("", broker_name, -1)
    pos = 0
    end = len(data)
    while pos < end:
        try:
            (total, magic, crc, queue_id, queue_offset, physical_offset, born_ts, store_ts, reconsume,
             body_len) = unpack(data, pos)
        except struct.error:
            raise _corrupt(data, pos) from None
        record_end = pos + total
        body_at = pos + header_size
        body_end = body_at + body_len
        if magic != magic_code or body_len < 0 or body_end + 3 > record_end or record_end > end:
            raise _corrupt(data, pos)
        props_at = body_end + 1 + data[body_end]  # after TOPICLENGTH + TOPIC
        if props_at + 2 > record_end or (props_at + 2 + (data[props_at] << 8 | data[props_at + 1])
                                         != record_end):
            raise _corrupt(data, pos)
        body = data[body_at:body_end]
        if check(body) != crc:
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
        msg: Any = new(builder)
        msg.topic = topic
        msg.queue = queue
        msg.body = body
        msg.queue_offset = queue_offset
        msg.born_timestamp = born_ts
        if eager:
            msg.commit_log_offset = physical_offset
            msg.store_timestamp = store_ts
            msg.reconsume_times = reconsume
            born_raw, store_raw = hosts_at(data, pos + _POS_BORN_HOST)
            if born_raw != last_born:
                born_host = (hosts.get(born_raw) or _host(born_raw))[0]
                last_born = born_raw
            if store_raw != last_store:
                store_host, store_hex = hosts.get(store_raw) or _host(store_raw)
                last_store = store_raw
            if props_at + 2 == record_end:
                msg.properties = {}
                msg.tags = ""
                msg.keys = ()
            else:
                props_raw = data[props_at + 2:record_end]
                hit = property_sets.get(props_raw)
                props, msg.tags, msg.keys = hit if hit is not None else _property_set(props_raw)
                msg.properties = props.copy()
            msg.msg_id = f"{store_hex}{physical_offset & _U64:016X}"
            msg.born_host = born_host
            msg.store_host = store_host
        else:
            msg._source = reply
            msg._position = pos
        msg.__class__ = received
        append(msg)
        pos = record_end
    return out

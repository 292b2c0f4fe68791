"""The commit log record format: encode/decode round trips, validation, blank records."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.storage import record as rec
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    HEADER_SIZE,
    MAGIC_CODE,
    CheckKind,
    Message,
    PropertiesTooLargeError,
    RecordError,
    check_record,
    decode_properties,
    decode_record,
    encode_batch,
    encode_blank,
    encode_prepared,
    encode_properties,
    encode_record,
    offset_msg_id,
    parse_offset_msg_id,
    prepare,
    property_value,
    tag_hash_code,
)

HOST = ("10.1.2.3", 10911)

# Property keys/values: any text without the two separators (keys non-empty).
prop_text = st.text(alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
                    max_size=20)
properties = st.dictionaries(prop_text.filter(bool), prop_text, max_size=6)
topics = st.text(alphabet=st.characters(exclude_characters="/\\\x00", exclude_categories=["Cs"]),
                 min_size=1, max_size=40).filter(lambda t: t not in (".", "..") and len(t.encode()) <= 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))

messages = st.builds(
    Message,
    topic=topics,
    body=st.binary(max_size=600),
    queue_id=st.integers(0, 2**31 - 1),
    flag=int32,
    properties=properties,
    born_timestamp=st.integers(1, 2**63 - 1),
    born_host=st.tuples(ipv4, st.integers(0, 65535)),
    sys_flag=st.sampled_from([0, rec.COMPRESSED_FLAG, rec.MULTI_TAGS_FLAG, rec.TRANSACTION_COMMIT_TYPE]),
    reconsume_times=int32,
    prepared_transaction_offset=int64,
)


def java_hash(s: str) -> int:
    """Reference: Java String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


# -- properties ----------------------------------------------------------------------------------

@given(properties)
def test_properties_round_trip(props: dict[str, str]) -> None:
    encoded = encode_properties(props)
    assert decode_properties(encoded) == props
    for key, value in props.items():
        assert property_value(encoded, key) == value


def test_properties_wire_format_is_rocketmq_style() -> None:
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == b"TAGS\x01a\x02KEYS\x01k1 k2\x02"
    assert encode_properties({}) == b""
    # RocketMQ tolerates a missing final separator
    assert decode_properties(b"TAGS\x01a\x02KEYS\x01k") == {"TAGS": "a", "KEYS": "k"}


def test_property_value_matches_whole_keys_only() -> None:
    encoded = encode_properties({"XTAGS": "no", "TAGS": "yes"})
    assert property_value(encoded, "TAGS") == "yes"
    assert property_value(encode_properties({"XTAGS": "no"}), "TAGS") is None


@pytest.mark.parametrize("props", [{"a\x01": "v"}, {"k": "v\x02"}, {"": "v"}, {"k": 1}])
def test_properties_with_separators_or_bad_types_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(RecordError):
        encode_properties(props)


# -- records -------------------------------------------------------------------------------------

@settings(max_examples=200)
@given(messages, st.integers(0, 2**62), st.integers(0, 2**62), st.integers(1, 2**62))
def test_record_round_trip(message: Message, queue_offset: int, physical_offset: int, store_ts: int) -> None:
    data = encode_record(message, queue_offset=queue_offset, physical_offset=physical_offset,
                         store_timestamp=store_ts, store_host=HOST)
    r = decode_record(data)
    assert r.store_size == len(data) == prepare(message).size
    assert (r.topic, r.queue_id, r.body, r.properties, r.flag, r.sys_flag) == (
        message.topic, message.queue_id, message.body, dict(message.properties), message.flag,
        message.sys_flag)
    assert (r.queue_offset, r.physical_offset, r.store_timestamp, r.store_host) == (
        queue_offset, physical_offset, store_ts, HOST)
    assert (r.born_timestamp, r.born_host, r.reconsume_times, r.prepared_transaction_offset) == (
        message.born_timestamp, message.born_host, message.reconsume_times,
        message.prepared_transaction_offset)
    assert r.body_crc == zlib.crc32(message.body)
    tags = message.properties.get("TAGS")
    assert r.tags_code == (tag_hash_code(tags) if tags else 0)
    # the validator agrees and extracts what the consume queue needs
    check = check_record(data, 0, len(data), expected_offset=physical_offset)
    assert check.kind is CheckKind.RECORD and check.size == len(data)
    assert check.request is not None
    assert (check.request.topic, check.request.queue_offset, check.request.tags_code) == (
        message.topic, queue_offset, r.tags_code)


def test_record_layout_is_exactly_rocketmq_v1() -> None:
    m = Message("T", b"body", 3, flag=7, properties={"TAGS": "x"}, born_timestamp=11,
                born_host=("1.2.3.4", 5), reconsume_times=2)
    data = encode_record(m, queue_offset=9, physical_offset=1000, store_timestamp=12,
                         store_host=("5.6.7.8", 9))
    assert HEADER_SIZE == 88
    assert len(data) == 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 4 + 1 + 1 + 2 + 7
    fields = struct.unpack_from(">iIIiiqqiq4siq4siiqi", data)
    assert fields == (len(data), MAGIC_CODE, zlib.crc32(b"body"), 3, 7, 9, 1000, 0, 11, bytes([1, 2, 3, 4]),
                      5, 12, bytes([5, 6, 7, 8]), 9, 2, 0, 4)
    assert data[88:92] == b"body"
    assert data[92] == 1 and data[93:94] == b"T"
    assert struct.unpack_from(">H", data, 94)[0] == 7 and data[96:] == b"TAGS\x01x\x02"


def test_born_timestamp_zero_means_store_timestamp() -> None:
    data = encode_record(Message("T", b""), queue_offset=0, physical_offset=0, store_timestamp=42,
                         store_host=HOST)
    assert decode_record(data).born_timestamp == 42


@settings(max_examples=50)
@given(st.lists(messages, min_size=1, max_size=8), st.integers(0, 2**40))
def test_encode_batch_equals_consecutive_records(batch: list[Message], start: int) -> None:
    prepared = [prepare(m) for m in batch]
    queue_offsets = list(range(len(batch)))
    data = encode_batch(prepared, queue_offsets, start, 5, bytes(4), 1)
    expected = b""
    offset = start
    for p, q in zip(prepared, queue_offsets, strict=True):
        expected += encode_prepared(p, q, offset, 5, bytes(4), 1)
        offset += p.size
    assert data == expected
    pos = 0
    for q in queue_offsets:
        r = decode_record(data, pos)
        assert r.queue_offset == q and r.physical_offset == start + pos
        pos += r.store_size
    assert pos == len(data)


@pytest.mark.parametrize("message, error", [
    (Message("", b""), "non-empty"),
    (Message("t" * 128, b""), "more than 127"),
    (Message("a/b", b""), "not allowed"),
    (Message("..", b""), "not allowed"),
    (Message("t", b"", -1), "queue_id"),
    (Message("t", b"", sys_flag=rec.BORNHOST_V6_FLAG), "IPv6"),
    (Message("t", b"", born_host=("::1", 1)), "IPv4"),
    (Message("t", "text"), "bytes"),  # type: ignore[arg-type]
])
def test_invalid_messages_are_refused(message: Message, error: str) -> None:
    with pytest.raises(RecordError, match=error):
        prepare(message)


def test_out_of_range_fields_are_refused_at_encoding() -> None:
    p = prepare(Message("t", b"", flag=2**31))
    with pytest.raises(RecordError, match="out of range"):
        encode_prepared(p, 0, 0, 0, bytes(4), 0)


def test_oversized_properties_are_a_distinct_error() -> None:
    with pytest.raises(PropertiesTooLargeError):
        prepare(Message("t", b"", properties={"k": "v" * 40000}))


def test_body_may_be_any_bytes_like() -> None:
    assert prepare(Message("t", bytearray(b"ab"))).body == b"ab"  # type: ignore[arg-type]
    assert prepare(Message("t", memoryview(b"ab"))).body == b"ab"  # type: ignore[arg-type]


# -- blank records and validation ----------------------------------------------------------------

@given(st.integers(8, 5000))
def test_blank_record(length: int) -> None:
    blank = encode_blank(length)
    assert len(blank) == length
    assert struct.unpack_from(">iI", blank) == (length, BLANK_MAGIC_CODE)
    assert not any(blank[8:])
    check = check_record(blank, 0, length, segment_remaining=length)
    assert check.kind is CheckKind.BLANK and check.size == length
    # a blank that does not reach the end of its segment is corrupt
    assert check_record(blank, 0, length, segment_remaining=length + 1).kind is CheckKind.CORRUPT
    # part of a blank (replication chunk ending inside it) is incomplete, not corrupt
    if length > 8:
        assert check_record(blank, 0, length - 1).kind is CheckKind.INCOMPLETE


def test_blank_needs_eight_bytes() -> None:
    with pytest.raises(RecordError):
        encode_blank(7)


def test_check_record_classifies_damage() -> None:
    data = bytearray(encode_record(Message("T", b"0123456789", properties={"TAGS": "a"}), queue_offset=0,
                                   physical_offset=100, store_timestamp=1, store_host=HOST))
    n = len(data)
    assert check_record(bytes(data), 0, n, expected_offset=100).kind is CheckKind.RECORD
    assert check_record(bytes(data), 0, n, expected_offset=101).reason.startswith("PHYSICALOFFSET")
    # every proper prefix is incomplete (a torn tail or a replication chunk boundary)
    for cut in range(0, n):
        assert check_record(bytes(data[:cut]), 0, cut).kind is CheckKind.INCOMPLETE
    # zeros: the end of the data
    zeros = bytes(200)
    assert check_record(zeros, 0, 200).kind is CheckKind.CORRUPT
    # a flipped body byte fails the CRC; a flipped magic byte is garbage
    body_byte = bytearray(data)
    body_byte[HEADER_SIZE + 3] ^= 0xFF
    assert check_record(bytes(body_byte), 0, n).reason == "body CRC mismatch"
    assert check_record(bytes(body_byte), 0, n, check_crc=False).kind is CheckKind.RECORD
    magic = bytearray(data)
    magic[5] ^= 0x01
    assert check_record(bytes(magic), 0, n).kind is CheckKind.CORRUPT
    # a size field that disagrees with the lengths inside
    size = bytearray(data)
    struct.pack_into(">i", size, 0, n + 4)
    assert check_record(bytes(size) + bytes(4), 0, n + 4).kind is CheckKind.CORRUPT
    # a record that would leave no room for the end-of-segment blank
    assert check_record(bytes(data), 0, n, segment_remaining=n + 7).kind is CheckKind.CORRUPT
    with pytest.raises(RecordError):
        decode_record(bytes(body_byte))
    with pytest.raises(RecordError):
        decode_record(bytes(data[:-1]))


# -- tags and message ids ------------------------------------------------------------------------

@given(st.text(max_size=30))
def test_tag_hash_code_is_java_string_hash_code(tag: str) -> None:
    assert tag_hash_code(tag) == java_hash(tag)


def test_tag_hash_code_known_values() -> None:
    assert tag_hash_code("") == 0
    assert tag_hash_code("hello") == 99162322
    assert tag_hash_code("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert tag_hash_code("\U0001F600") == 1772899  # surrogate pair 0xD83D 0xDE00


@given(ipv4, st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(ip: str, port: int, offset: int) -> None:
    msg_id = offset_msg_id((ip, port), offset)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert parse_offset_msg_id(msg_id) == ((ip, port), offset)


def test_offset_msg_id_matches_rocketmq_layout() -> None:
    assert offset_msg_id(("127.0.0.1", 10911), 1) == "7F00000100002A9F0000000000000001"
    with pytest.raises(RecordError):
        parse_offset_msg_id("zz")


def test_message_helpers() -> None:
    m = Message.of("T", b"x", 2, tags="TagA", keys=["k1", "k2"], properties={"X": "y"})
    assert m.tags == "TagA" and m.keys == ["k1", "k2"] and m.properties["X"] == "y"
    r = decode_record(encode_record(m, queue_offset=0, physical_offset=5, store_timestamp=1, store_host=HOST))
    assert r.tags == "TagA" and r.keys == ["k1", "k2"] and r.tags_code == tag_hash_code("TagA")
    assert r.msg_id == offset_msg_id(HOST, 5) and r.next_physical_offset == 5 + r.store_size
    assert Message("T", b"").tags is None and Message("T", b"").keys == []


def test_encoded_tails_are_cached_by_content_not_identity() -> None:
    from services.broker.storage.record import _tail_cache, encode_tail
    props = {"TAGS": "x", "KEYS": "k"}
    first = encode_tail("CacheTopic", props)
    assert ("CacheTopic", ("TAGS", "x"), ("KEYS", "k")) in _tail_cache
    props["KEYS"] = "other"  # a mutated dict is a different key
    assert encode_tail("CacheTopic", props) != first
    assert encode_tail("CacheTopic", {"TAGS": "x", "KEYS": "k"}) == first
    assert encode_tail("CacheTopic", {"KEYS": "k", "TAGS": "x"}) != first  # order is kept
    unique = {"TAGS": "x", "UNIQ_KEY": "0A0B"}
    encode_tail("CacheTopic", unique)
    assert ("CacheTopic", ("TAGS", "x"), ("UNIQ_KEY", "0A0B")) not in _tail_cache
    with pytest.raises(RecordError):
        encode_tail("CacheTopic", {"TAGS": ["unhashable"]})  # type: ignore[dict-item]


def test_the_last_tail_is_reused_only_for_the_same_content_and_order() -> None:
    from services.broker.storage import record
    props = {"TAGS": "memo", "KEYS": "k"}
    first = record.encode_tail("MemoTopic", props)
    assert record._last_tail[3] == first and record._last_tail[1] is not props  # (a copy)
    props["KEYS"] = "changed"  # the caller's dict mutated after the call: not a hit
    assert record.encode_tail("MemoTopic", props) == record._encode_tail("MemoTopic", props) != first
    again = {"TAGS": "memo", "KEYS": "changed"}
    assert record.encode_tail("MemoTopic", again) is record._last_tail[3]
    assert record.encode_tail("OtherTopic", again) == record._encode_tail("OtherTopic", again)
    swapped = {"KEYS": "changed", "TAGS": "memo"}  # equal as dicts, encoded in another order
    assert record.encode_tail("OtherTopic", swapped) == record._encode_tail("OtherTopic", swapped)
    assert record.encode_tail("OtherTopic", swapped) != record._encode_tail("OtherTopic", again)


def test_body_crc_is_zlibs_crc32() -> None:
    rng = random.Random(9)
    for size in (0, 1, 7, 100, 1024, 4097, 70_000):
        data = rng.randbytes(size)
        assert rec.body_crc(data) == zlib.crc32(data)
        assert rec.body_crc(memoryview(bytearray(data))[1:]) == zlib.crc32(data[1:])

"""The fast raw-record decoders against the reference decoder (pocketmq.wire.record.decode_record):
the consumer's (pocketmq.wire.fast, through pocketmq.client.message.decode_records) turned into
ReceivedMessages field by field the straightforward way, and the Spark reader's columnar one.
Records are written by the broker's encoder (services.broker.storage.record)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.client.message import MessageQueue, ReceivedMessage, decode_pending_records, decode_records
from pocketmq.errors import InternalError
from pocketmq.spark import columnar
from pocketmq.wire import fast
from pocketmq.wire import record as wire_record
from pocketmq.wire.fast import DecodeHint
from pocketmq.wire.protoscan import Span
from services.broker.storage import record


def reference_decode(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """One record at a time with record.decode_record (the decoder the client used to have)."""
    out: list[ReceivedMessage] = []
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        try:
            rec = wire_record.decode_record(view, pos)
        except wire_record.RecordError as exc:
            raise InternalError(f"corrupt record in pull reply at byte {pos}: {exc}") from None
        props = rec.properties
        keys = props.get("KEYS", "")
        out.append(ReceivedMessage(
            topic=rec.topic, body=rec.body, tags=props.get("TAGS", ""),
            keys=tuple(k for k in keys.split(" ") if k) if keys else (), properties=props,
            queue=MessageQueue(rec.topic, broker_name, rec.queue_id), queue_offset=rec.queue_offset,
            commit_log_offset=rec.physical_offset,
            msg_id=record.offset_msg_id(rec.store_host, rec.physical_offset),
            born_timestamp=rec.born_timestamp, store_timestamp=rec.store_timestamp,
            born_host=f"{rec.born_host[0]}:{rec.born_host[1]}",
            store_host=f"{rec.store_host[0]}:{rec.store_host[1]}", reconsume_times=rec.reconsume_times,
        ))
        pos += rec.store_size
    return out


def outcome(decoder: object, data: bytes, broker_name: str = "broker-a") -> object:
    """The decoded messages, or the error message."""
    assert callable(decoder)
    try:
        result: object = decoder(data, broker_name)
    except InternalError as exc:
        return ("error", str(exc))
    return result


# -- strategies ------------------------------------------------------------------------------------

text = st.text(alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), max_size=12)
prop_keys = st.one_of(text.filter(bool),
                      st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "REAL_TOPIC", "é", "k"]))
prop_values = st.one_of(text, st.sampled_from(["", " ", "a  b ", "tag"]))
properties = st.dictionaries(prop_keys, prop_values, max_size=5)
topics = st.one_of(
    st.sampled_from(["t", "orders", "%DLQ%g", "topic-ü-東京"]),
    st.text(alphabet=st.characters(exclude_characters="/\\\x00", exclude_categories=["Cs"]), min_size=1,
            max_size=30).filter(lambda t: t not in (".", "..") and len(t.encode()) <= 127))
int32 = st.integers(-(2**31), 2**31 - 1)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
hosts = st.one_of(st.just(("127.0.0.1", 10911)), st.tuples(ipv4, int32))

messages = st.builds(
    record.Message,
    topic=topics,
    body=st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"x" * 1024])),
    queue_id=st.one_of(st.integers(0, 3), st.integers(0, 2**31 - 1)),
    flag=int32,
    properties=properties,
    born_timestamp=st.integers(0, 2**63 - 1),
    born_host=hosts,
    sys_flag=st.sampled_from([0, record.COMPRESSED_FLAG, record.MULTI_TAGS_FLAG,
                              record.TRANSACTION_COMMIT_TYPE]),
    reconsume_times=int32,
    prepared_transaction_offset=st.integers(-(2**63), 2**63 - 1),
)


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A pull reply (concatenated records) and its records one by one."""
    msgs = draw(st.lists(messages, min_size=1, max_size=12))
    first_queue_offset = draw(st.integers(0, 2**40))
    prepared = [record.prepare(m) for m in msgs]
    queue_offsets = [first_queue_offset + i for i in range(len(msgs))]
    if draw(st.booleans()):
        queue_offsets = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(msgs),
                                      max_size=len(msgs)))
    physical = draw(st.one_of(st.integers(0, 2**40), st.integers(-(2**62), 2**62)))
    store_ts = draw(st.integers(0, 2**63 - 1))
    store_ip, store_port = draw(hosts)
    data = record.encode_batch(prepared, queue_offsets, physical, store_ts, record.host_bytes(store_ip),
                               store_port)
    pieces, pos = [], 0
    for p in prepared:
        pieces.append(data[pos:pos + p.size])
        pos += p.size
    return data, pieces


@st.composite
def uniform_replies(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A reply of like records (one body, topic and properties size, as a producer's batch
    gives), which the decoder reads in one pass; now and then one record differs (its queue
    id, or its topic, tags or body size): the reply is then decoded record by record."""
    n = draw(st.integers(1, 12))
    topic = draw(topics)
    body_len = draw(st.sampled_from([0, 1, 7, 1024]))
    queue_id = draw(st.integers(0, 3))
    key_len = draw(st.integers(0, 6))
    tags = draw(st.sampled_from([None, "aa", "bb"]))
    msgs = [record.Message.of(
        topic, draw(st.binary(min_size=body_len, max_size=body_len)), queue_id, tags=tags,
        properties={"UNIQ_KEY": draw(st.text(alphabet="0123456789ABCDEF", min_size=key_len,
                                             max_size=key_len))},
        born_timestamp=draw(st.integers(0, 2**63 - 1)), born_host=draw(hosts),
        reconsume_times=draw(st.integers(0, 16))) for _ in range(n)]
    if n > 1 and draw(st.booleans()):
        i = draw(st.integers(0, n - 1))
        msgs[i] = msgs[i]._replace(**draw(st.sampled_from(
            [{"queue_id": queue_id + 1}, {"topic": topic + "x"}, {"body": msgs[i].body + b"y"}])))
    prepared = [record.prepare(m) for m in msgs]
    physical = draw(st.integers(0, 2**40))
    data = record.encode_batch(prepared, [draw(st.integers(0, 2**40)) + i for i in range(n)], physical,
                               draw(st.integers(0, 2**63 - 1)), record.host_bytes("10.1.2.3"), 10911)
    pieces, pos = [], 0
    for p in prepared:
        pieces.append(data[pos:pos + p.size])
        pos += p.size
    return data, pieces


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.one_of(replies(), uniform_replies()), st.sampled_from(["broker-a", "b-ü"]), st.booleans())
def test_fast_decoder_yields_exactly_the_reference_messages(
    reply: tuple[bytes, list[bytes]], broker: str, eager: bool
) -> None:
    data, _ = reply
    hint = DecodeHint()
    hint.eager = eager  # everything at once, or the deferred fields when first read
    fast = decode_records(data, broker, hint)
    assert fast == reference_decode(data, broker)
    for msg in fast:
        assert type(msg) is ReceivedMessage
        assert type(msg.body) is bytes and type(msg.keys) is tuple and type(msg.properties) is dict
        assert type(msg.queue) is MessageQueue and msg.queue.broker_name == broker
        assert repr(msg).startswith("ReceivedMessage(topic=")
        with pytest.raises(dataclasses.FrozenInstanceError):
            msg.topic = "x"  # type: ignore[misc]
    # Equal messages hash equal and compare with fresh constructions.
    for msg in fast:
        twin = dataclasses.replace(msg)
        assert twin == msg and dataclasses.astuple(twin) == dataclasses.astuple(msg)


@settings(max_examples=100)
@given(st.one_of(replies(), uniform_replies()))
def test_batch_boundaries_and_buffer_types(reply: tuple[bytes, list[bytes]]) -> None:
    data, pieces = reply
    whole = decode_records(data, "broker-a")
    assert [m for piece in pieces for m in decode_records(piece, "broker-a")] == whole
    assert decode_records(bytearray(data), "broker-a") == whole
    assert decode_records(memoryview(data), "broker-a") == whole
    if len(pieces) > 1:  # a reply that starts in the middle of the log
        rest = b"".join(pieces[1:])
        assert decode_records(rest, "broker-a") == whole[1:]


@settings(max_examples=400)
@given(st.one_of(replies(), uniform_replies()), st.data())
def test_damaged_replies_fail_or_agree_like_the_reference(
    reply: tuple[bytes, list[bytes]], data: st.DataObject
) -> None:
    raw, _ = reply
    kind = data.draw(st.sampled_from(["flip", "truncate", "append", "set"]))
    damaged = bytearray(raw)
    if kind == "flip":
        at = data.draw(st.integers(0, len(raw) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        del damaged[data.draw(st.integers(0, len(raw) - 1)):]
    elif kind == "append":
        damaged += data.draw(st.binary(min_size=1, max_size=120))
    else:  # overwrite a header field of some record: sizes, CRC, queue id, lengths, magic
        starts = [0]
        for piece in reply[1][:-1]:
            starts.append(starts[-1] + len(piece))
        at = data.draw(st.sampled_from(starts)) + data.draw(st.sampled_from([0, 4, 8, 12, 84]))
        damaged[at:at + 4] = data.draw(st.binary(min_size=4, max_size=4))
    assert outcome(decode_records, bytes(damaged)) == outcome(reference_decode, bytes(damaged))


@settings(max_examples=150, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8), st.integers(0, 2**40), st.data())
def test_columnar_decoder_yields_the_reference_rows(msgs: list[record.Message], physical: int,
                                                    data: st.DataObject) -> None:
    topic = msgs[0].topic
    msgs = [m._replace(topic=topic, born_timestamp=m.born_timestamp % 2**41) for m in msgs]
    raw = record.encode_batch([record.prepare(m) for m in msgs], list(range(len(msgs))), physical,
                              data.draw(st.integers(0, 2**41)), record.host_bytes("10.1.2.3"), 10911)
    decoded = columnar.decode(raw, topic, "broker-a")
    reference = wire_record.decode_records(raw)
    assert decoded.queue_offsets.tolist() == [r.queue_offset for r in reference]
    for row, rec in zip(decoded.batch.to_pylist(), reference, strict=True):
        assert (row["topic"], row["queue_id"], row["body"], row["msg_id"]) == \
            (rec.topic, rec.queue_id, rec.body, rec.msg_id)
        assert (row["tags"], row["keys"]) == (rec.properties.get("TAGS"), rec.properties.get("KEYS"))
        user = {k: v for k, v in rec.properties.items() if k not in ("TAGS", "KEYS")}
        assert dict(row["properties"]) == user
        assert row["born_timestamp"].timestamp() * 1000 == pytest.approx(rec.born_timestamp)
        assert row["store_timestamp"].timestamp() * 1000 == pytest.approx(rec.store_timestamp)


def test_header_views_are_cut_from_the_one_layout() -> None:
    assert wire_record.HEADER.format == ">iIIiiqqiq4siq4siiqi" and wire_record.HEADER_SIZE == 88
    assert wire_record.header_format(raw_hosts=True) == ">iIIiiqqiq8sq8siqi"
    assert wire_record.header_format(("total_size", "magic", "queue_offset", "body_length")) == ">iI12xq56xi"
    assert [wire_record.field_offset(f) for f in ("queue_offset", "physical_offset", "store_timestamp",
                                                  "store_host")] == [20, 28, 56, 64]
    with pytest.raises(ValueError, match="unknown header fields"):
        wire_record.header_format(("nope",))


# -- examples --------------------------------------------------------------------------------------


def _encode(*msgs: record.Message, physical: int = 0) -> bytes:
    prepared = [record.prepare(m) for m in msgs]
    return record.encode_batch(prepared, list(range(len(msgs))), physical, 1_700_000_000_000,
                               record.host_bytes("10.0.0.1"), 10911)


@settings(max_examples=100)
@given(uniform_replies(), st.data())
def test_a_uniform_reply_with_one_bad_record_names_that_record(reply: tuple[bytes, list[bytes]],
                                                               data: st.DataObject) -> None:
    raw, pieces = reply
    if len(set(map(len, pieces))) == 1:
        # the one-pass decoder reads (or declines) it
        assert fast._uniform_layout(raw, 0, len(raw)) is not None
    i = data.draw(st.integers(0, len(pieces) - 1))
    at = sum(map(len, pieces[:i]))
    field = data.draw(st.sampled_from([8, len(pieces[i]) - 1]))  # BODYCRC, or the last byte
    damaged = bytearray(raw)
    damaged[at + field] ^= 0x5A
    assert outcome(decode_records, bytes(damaged)) == outcome(reference_decode, bytes(damaged))


def test_properties_are_a_fresh_dict_per_message() -> None:
    m = record.Message.of("t", b"x", tags="a", keys="k1  k2", properties={"p": "ü"})
    data = _encode(m, m)
    first, second = decode_records(data, "b")
    assert first.properties == {"p": "ü", "TAGS": "a", "KEYS": "k1  k2"}
    assert (first.tags, first.keys) == ("a", ("k1", "k2"))
    assert first.properties is not second.properties
    first.properties["p"] = "changed"  # type: ignore[index]
    assert second.properties["p"] == "ü"
    assert decode_records(data, "b")[0].properties["p"] == "ü"  # the cache kept its own copy
    empty = decode_records(_encode(record.Message("t", b"")), "b")[0]
    assert empty.properties == {} and (empty.tags, empty.keys) == ("", ())


def test_messages_of_several_topics_and_queues_in_one_reply() -> None:
    data = _encode(record.Message("a", b"1", 0), record.Message("a", b"2", 1), record.Message("b", b"3", 1),
                   record.Message("a", b"4", 0))
    msgs = decode_records(data, "bk")
    assert [m.queue for m in msgs] == [MessageQueue("a", "bk", 0), MessageQueue("a", "bk", 1),
                                       MessageQueue("b", "bk", 1), MessageQueue("a", "bk", 0)]
    assert msgs == reference_decode(data, "bk")


def test_msg_id_and_hosts() -> None:
    m = record.Message("t", b"x", born_host=("192.168.7.9", 61000))
    msg = decode_records(_encode(m, physical=(1 << 40) + 5), "b")[0]
    assert msg.msg_id == record.offset_msg_id(("10.0.0.1", 10911), (1 << 40) + 5)
    assert msg.msg_id == "0A00000100002A9F0000010000000005"
    assert (msg.born_host, msg.store_host, msg.commit_log_offset) == ("192.168.7.9:61000", "10.0.0.1:10911",
                                                                       (1 << 40) + 5)


def test_corrupt_reply_errors_name_the_record() -> None:
    data = bytearray(_encode(record.Message("t", b"abc"), record.Message("t", b"def")))
    second = int.from_bytes(data[:4], "big")
    data[second + record.HEADER_SIZE] ^= 1  # the second body: CRC mismatch
    with pytest.raises(InternalError, match=f"in pull reply at byte {second}: body CRC mismatch"):
        decode_records(bytes(data), "b")
    with pytest.raises(InternalError, match="at byte 0: truncated record header"):
        decode_records(b"\x00" * 20, "b")
    # TOPICLENGTH of the last record pointing past the end of the reply.
    last = bytearray(_encode(record.Message("t", b"abc")))
    last[record.HEADER_SIZE + 3] = 255
    with pytest.raises(InternalError, match="at byte 0: inconsistent record at 0: topic overruns the record"):
        decode_records(bytes(last), "b")


def test_deferred_fields_are_decoded_on_first_read_and_the_reply_let_go() -> None:
    import copy
    import pickle

    m = record.Message.of("t", b"x", tags="a", keys="k1 k2", properties={"p": "1"})
    data = _encode(m, m, m)
    first, second, third = decode_records(data, "b")
    assert (first.body, first.queue_offset, first.topic) == (b"x", 0, "t")
    assert first.queue == MessageQueue("t", "b", 0)
    assert first._source is not None  # tags, keys, properties, ids and hosts not decoded yet
    assert first.msg_id == record.offset_msg_id(("10.0.0.1", 10911), 0)
    assert first._source is None and (first.tags, first.keys) == ("a", ("k1", "k2"))
    assert pickle.loads(pickle.dumps(second)) == second == reference_decode(data, "b")[1]
    assert copy.copy(third) == third
    assert third.to_dict()["properties"] == {"p": "1", "TAGS": "a", "KEYS": "k1 k2"}
    with pytest.raises(AttributeError, match="'ReceivedMessage' object has no attribute 'nope'"):
        first.nope  # type: ignore[attr-defined]  # noqa: B018
    fresh = decode_records(data, "b")[0]
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        fresh.nope  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(fresh, "nope") and fresh == first


def test_a_deferred_read_decodes_the_rest_of_the_reply_once() -> None:
    m = record.Message.of("t", b"x", tags="a")
    msgs = decode_records(_encode(m, m, m), "b")
    loose = msgs.pop()  # out of the list the decoder returned: decoded on its own
    assert msgs[0].tags == "a"
    assert [x._source for x in msgs] == [None, None] and loose._source is not None
    assert loose.tags == "a" and loose._source is None
    kept = decode_records(_encode(m, m), "b")[1]  # its list is gone
    assert kept.msg_id and kept._source is None


def test_a_reader_that_reads_deferred_fields_gets_its_next_replies_decoded_whole() -> None:
    m = record.Message.of("t", b"x", tags="a", keys="k", properties={"p": "1"})
    data = _encode(m, m)
    hint = DecodeHint()
    first = decode_records(data, "b", hint)
    assert not hint.eager and first[0]._source is not None
    assert first[0].keys == ("k",) and hint.eager  # read one: the next replies come whole
    second = decode_records(data, "b", hint)
    assert all(not hasattr(x, "_source") for x in second)  # nothing deferred, nothing to hold
    assert second == first == reference_decode(data, "b")
    assert second[0].properties is not second[1].properties
    # A reply checked before its reader turned to reading those fields is built whole when handed out.
    lazy = DecodeHint()
    pending = decode_pending_records(data, "b", lazy)
    lazy.eager = True
    third = pending.messages()
    assert all(not hasattr(x, "_source") for x in third) and third == first



def pending_decode(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """decode_pending_records, its messages built at once."""
    pending = decode_pending_records(data, broker_name)
    messages = pending.messages()
    assert pending.messages() is messages  # built once
    assert pending.queue_offsets == tuple(m.queue_offset for m in messages) and len(pending) == len(messages)
    return messages


def span_decode(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """decode_pending_records of the records inside a larger message, built at once."""
    records = Span(b"\x32\x00" + data + b"\x38\x01", 2, 2 + len(data))
    return decode_pending_records(records, broker_name).messages()


@settings(max_examples=200)
@given(st.one_of(replies(), uniform_replies()), st.sampled_from(["broker-a", "b-ü"]), st.booleans())
def test_a_pending_reply_builds_the_reference_messages(
    reply: tuple[bytes, list[bytes]], broker: str, eager: bool
) -> None:
    data, _ = reply
    hint = DecodeHint()
    hint.eager = eager
    pending = decode_pending_records(data, broker, hint)
    assert pending.messages() == reference_decode(data, broker)
    assert pending_decode(data, broker) == reference_decode(data, broker)
    # Read in place from a larger message (a stream's reply as gRPC delivered it), or a view.
    whole = b"\x0a\x05" + data + b"\x00\x01"
    for records in (Span(whole, 2, 2 + len(data)), memoryview(whole)[2:-2]):
        in_place = decode_pending_records(records, broker, hint)
        assert in_place.messages() == reference_decode(data, broker)
        assert all(type(m.body) is bytes and type(m.msg_id) is str and type(m.properties) is dict
                   for m in in_place.messages())


@settings(max_examples=200)
@given(st.one_of(replies(), uniform_replies()), st.data())
def test_a_damaged_pending_reply_fails_when_checked_not_when_built(
    reply: tuple[bytes, list[bytes]], data: st.DataObject
) -> None:
    raw, _ = reply
    damaged = bytearray(raw)
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged[at] ^= data.draw(st.integers(1, 255))
    assert outcome(pending_decode, bytes(damaged)) == outcome(reference_decode, bytes(damaged))
    assert outcome(span_decode, bytes(damaged)) == outcome(reference_decode, bytes(damaged))

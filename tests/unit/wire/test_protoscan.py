"""split_field: a length-delimited field read in place gives what the protobuf parser gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.v1 import broker_pb2
from pocketmq.wire.protoscan import split_field

RECORDS = broker_pb2.PullMessageResponse.DESCRIPTOR.fields_by_name["records"].number

int64 = st.integers(-(2**63), 2**63 - 1)
replies = st.builds(
    broker_pb2.PullMessageResponse,
    status=st.sampled_from(list(broker_pb2.PullStatus.values())), next_begin_offset=int64,
    min_offset=int64, max_offset=int64, records=st.binary(max_size=600),
    suggest_which_broker_id=int64, remark=st.text(max_size=20), reset_generation=int64,
    messages=st.lists(st.builds(broker_pb2.MessageExt, topic=st.text(max_size=8), body=st.binary(max_size=40),
                                queue_offset=int64), max_size=2),
)


def parse(raw: bytes) -> broker_pb2.PullMessageResponse | None:
    try:
        return broker_pb2.PullMessageResponse.FromString(raw)
    except Exception:  # the parser's DecodeError
        return None


@settings(max_examples=300)
@given(replies)
def test_the_records_read_in_place_and_the_rest_parse_to_the_reply(
    reply: broker_pb2.PullMessageResponse,
) -> None:
    raw = reply.SerializeToString()
    split = split_field(raw, RECORDS)
    if not reply.records:  # proto3 leaves an empty field out
        assert split is None
        return
    assert split is not None
    rest, view = split
    assert view.data is raw and view.tobytes() == reply.records  # where it is, not a copy
    again = broker_pb2.PullMessageResponse.FromString(rest)
    assert not again.records
    again.records = view.tobytes()
    assert again == reply


@settings(max_examples=300)
@given(replies, st.data())
def test_any_bytes_split_or_left_to_the_parser(
    reply: broker_pb2.PullMessageResponse, data: st.DataObject
) -> None:
    raw = bytearray(reply.SerializeToString())
    kind = data.draw(st.sampled_from(["random", "flip", "truncate", "twice"]))
    if kind == "random":
        raw = bytearray(data.draw(st.binary(max_size=80)))
    elif kind == "flip" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate" and raw:
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    elif kind == "twice":  # the field twice: the parser keeps the last one
        raw += bytes([RECORDS << 3 | 2, 3]) + b"abc"
    split = split_field(bytes(raw), RECORDS)
    if kind == "twice" and reply.records:
        assert split is None
    if split is None:
        return  # the caller parses the whole reply
    rest, view = split
    whole, again = parse(bytes(raw)), parse(rest)
    assert (whole is None) == (again is None)
    if whole is not None and again is not None:
        again.records = view.tobytes()
        assert again == whole


def test_examples() -> None:
    raw = broker_pb2.PullMessageResponse(status=broker_pb2.FOUND, next_begin_offset=300, records=b"x" * 200,
                                         reset_generation=2).SerializeToString()
    split = split_field(raw, RECORDS)
    assert split is not None and split[1].tobytes() == b"x" * 200
    assert split_field(raw, 8) is None  # absent
    assert split_field(b"\x08", RECORDS) is None  # a truncated varint
    assert split_field(b"\x0b\x00", RECORDS) is None  # a group
    assert split_field(bytes([RECORDS << 3 | 2, 5]) + b"ab", RECORDS) is None  # overruns the message

"""Which SendMessageBatch requests take the bulk path (every message a body and nothing else):
``bodies_only`` must say yes exactly for those, whatever the batch's own fields and the body
sizes (varint boundaries), and no as soon as one message carries anything else; and the ids a
batch's reply carries."""

from __future__ import annotations

import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.wire.msgid import offset_msg_id, parse_offset_msg_id
from services.broker.send import bodies_only, offset_msg_ids

SIZES = [1, 100, 125, 126, 127, 128, 16_370, 16_380, 16_400, 2_097_000, 2_097_200]


def lengths(request: pb.SendMessageBatchRequest) -> list[int]:
    return [len(m.body) for m in request.messages]


@pytest.mark.parametrize("own", [
    {},
    {"topic": "orders", "queue_id": 3, "producer_group": "pg", "born_timestamp": 1_700_000_000_000,
     "request_id": 2**40},
    {"topic": "t" * 127, "queue_id": -1, "request_id": 1},  # -1: a ten-byte varint
    {"topic": "übung", "producer_group": "gruppe-ä"},  # (UTF-8 lengths, not characters)
])
def test_body_only_batches_are_recognised(own: dict[str, object]) -> None:
    for sizes in ([1024] * 32, SIZES, [5]):
        request = pb.SendMessageBatchRequest(messages=[pb.Message(body=b"x" * n) for n in sizes], **own)
        parsed = pb.SendMessageBatchRequest.FromString(request.SerializeToString())
        assert bodies_only(parsed, lengths(parsed))


@pytest.mark.parametrize("extra", [
    {"topic": "orders"}, {"tags": "a"}, {"keys": "k1 k2"}, {"properties": {"a": "b"}}, {"delay_level": 3},
    {"flag": 1}, {"flag": -1},
])
def test_any_other_field_of_a_message_takes_the_general_path(extra: dict[str, object]) -> None:
    messages = [pb.Message(body=b"x" * 300) for _ in range(8)]
    messages[5] = pb.Message(body=b"y" * 300, **extra)
    request = pb.SendMessageBatchRequest(topic="orders", messages=messages)
    assert not bodies_only(request, lengths(request))


def test_a_field_this_broker_does_not_know_takes_the_general_path() -> None:
    message = pb.Message(body=b"x" * 10).SerializeToString() + b"\xf8\x01\x07"  # field 31 = 7
    raw = pb.SendMessageBatchRequest(topic="orders").SerializeToString()
    raw += b"\x1a" + bytes([len(message)]) + message
    request = pb.SendMessageBatchRequest.FromString(raw)
    assert len(request.messages) == 1 and request.messages[0].body == b"x" * 10
    assert not bodies_only(request, lengths(request))
    unknown_top = pb.SendMessageBatchRequest.FromString(
        pb.SendMessageBatchRequest(topic="o", messages=[pb.Message(body=b"z")]).SerializeToString()
        + b"\xf8\x01\x07")
    assert not bodies_only(unknown_top, lengths(unknown_top))


@pytest.mark.parametrize("host", [("127.0.0.1", 10911), ("10.200.3.4", 65535), ("0.0.0.0", 0)])
def test_the_ids_of_a_batch_are_the_offset_message_ids(host: tuple[str, int]) -> None:
    prefix = offset_msg_id(host, 0)[:16]
    for offsets in ([0], [7, 8, 9, 10], list(range(123, 123 + 32 * 1100, 1100)), [2**63 - 1, 2**40, 255]):
        ids = offset_msg_ids(prefix, offsets)
        assert ids == [offset_msg_id(host, o) for o in offsets]
        assert [parse_offset_msg_id(i) for i in ids] == [(host, o) for o in offsets]

"""Messages, results and raw-record decoding."""

from __future__ import annotations

import pytest

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.message import (
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    decode_records,
    from_message_ext,
)
from pocketmq.errors import InternalError, InvalidArgumentError
from services.broker.storage import record


def test_message_normalises_and_validates() -> None:
    m = Message("t", "héllo", tags="a", keys=["k1", "", "k2"], properties={"x": "1"}, delay_level=3)
    assert m.body == "héllo".encode() and m.keys == "k1 k2"
    proto = m.to_proto()
    assert (proto.topic, proto.tags, proto.keys, dict(proto.properties), proto.delay_level) == (
        "t", "a", "k1 k2", {"x": "1"}, 3)
    assert m.to_proto(topic=False).topic == ""
    with pytest.raises(TypeError):
        m.properties["y"] = "2"  # type: ignore[index]
    for bad in ({"topic": ""}, {"delay_level": -1}, {"tags": "a || b"}):
        kwargs = {"topic": "t", **bad}
        topic = str(kwargs.pop("topic"))
        with pytest.raises(InvalidArgumentError):
            Message(topic, b"x", **kwargs)  # type: ignore[arg-type]


def test_send_result() -> None:
    q = MessageQueue("t", "broker-a", 2)
    r = SendResult(SendStatus.FLUSH_SLAVE_TIMEOUT, ("A", "B"), q, 7, "h:1", "late")
    assert r.msg_id == "A" and not r.ok
    assert r.to_dict()["queue_id"] == 2 and r.to_dict()["status"] == "FLUSH_SLAVE_TIMEOUT"
    assert str(q) == "t@broker-a:2"


def _records(n: int, start_offset: int = 1000) -> bytes:
    out, pos = [], start_offset
    for i in range(n):
        msg = record.Message.of("topic-x", f"body-{i}".encode(), 3, tags="tag" if i % 2 else None,
                                keys=["k", str(i)], properties={"p": str(i)}, born_timestamp=111,
                                born_host=("10.0.0.9", 4000))
        data = record.encode_record(msg, queue_offset=50 + i, physical_offset=pos, store_timestamp=222,
                                    store_host=("10.0.0.1", 10911))
        out.append(data)
        pos += len(data)
    return b"".join(out)


def test_decode_raw_records() -> None:
    msgs = decode_records(_records(3), "broker-a")
    assert [m.text for m in msgs] == ["body-0", "body-1", "body-2"]
    assert [m.queue_offset for m in msgs] == [50, 51, 52]
    assert msgs[0].queue == MessageQueue("topic-x", "broker-a", 3)
    assert (msgs[1].tags, msgs[0].tags, msgs[1].keys, msgs[1].properties["p"]) == ("tag", "", ("k", "1"), "1")
    assert (msgs[0].born_host, msgs[0].store_host) == ("10.0.0.9:4000", "10.0.0.1:10911")
    assert msgs[0].commit_log_offset == 1000
    assert msgs[0].msg_id == record.offset_msg_id(("10.0.0.1", 10911), 1000)
    assert (msgs[0].born_timestamp, msgs[0].store_timestamp) == (111, 222)
    assert msgs[0].to_dict("hex")["body"] == b"body-0".hex()
    assert decode_records(b"", "broker-a") == []


def test_corrupt_records_are_reported() -> None:
    data = bytearray(_records(2))
    data[record.HEADER_SIZE + 2] ^= 0xFF  # inside the first body: CRC mismatch
    with pytest.raises(InternalError, match="corrupt record"):
        decode_records(bytes(data), "broker-a")
    with pytest.raises(InternalError):
        decode_records(_records(1)[:-3], "broker-a")  # truncated


def test_from_message_ext() -> None:
    ext = broker_pb2.MessageExt(topic="t", queue_id=1, queue_offset=9, msg_id="M", body=b"b", tags="x",
                                keys="a b", properties={"TAGS": "x"}, born_host="1.2.3.4:5")
    m = from_message_ext(ext, "broker-z")
    assert (m.queue, m.queue_offset, m.tags, m.keys, m.msg_id) == (
        MessageQueue("t", "broker-z", 1), 9, "x", ("a", "b"), "M")

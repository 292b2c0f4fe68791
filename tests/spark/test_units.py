"""Pure parts of the data source, without Spark or brokers: options, offsets and read limits,
columnar decoding of raw records, set-up checks, partition pickling."""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any

import numpy as np
import pytest

from pocketmq.client.message import decode_records
from pocketmq.errors import InvalidArgumentError
from pocketmq.spark._broker import read_order
from pocketmq.spark.columnar import RecordFormatError, decode, tag_mask
from pocketmq.spark.offsets import QueueKey, from_json, limit_end, parse_json, to_json
from pocketmq.spark.options import ReadOptions, WriteOptions
from pocketmq.spark.reader import QueueRange
from pocketmq.spark.setup import SparkSetupError, check_local_workers
from services.broker.storage import record

A0, A1, B0 = QueueKey("t", "broker-a", 0), QueueKey("t", "broker-a", 1), QueueKey("t", "broker-b", 0)


# -- offsets -----------------------------------------------------------------------------------------


def test_offsets_round_trip_through_json() -> None:
    offsets = {A0: 5, A1: 0, B0: 1 << 40, QueueKey("u", "broker-a", 3): 7}
    data = to_json(offsets)
    assert data == {"t": {"broker-a": {"0": 5, "1": 0}, "broker-b": {"0": 1 << 40}},
                    "u": {"broker-a": {"3": 7}}}
    assert from_json(json.loads(json.dumps(data))) == offsets


@pytest.mark.parametrize("text, message", [
    ("[1]", "expected a JSON object"),
    ('{"t": {"b": {"x": 1}}}', "queue id 'x'"),
    ('{"t": {"b": {"0": -3}}}', "must be an integer >= 0"),
    ('{"t": {"b": {"0": "1"}}}', "must be an integer >= 0"),
    ("{nope", "not 'earliest', 'latest' or valid JSON"),
])
def test_offset_json_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_json(text, "option startingOffsets")


def test_limit_end_without_limit_takes_everything_and_keeps_silent_queues() -> None:
    start = {A0: 10, A1: 4}
    assert limit_end(start, {A0: 20, B0: 3}, None) == {A0: 20, A1: 4, B0: 3}
    assert limit_end(start, {A0: 8, A1: 4}, None) == {A0: 10, A1: 4}  # never backwards


def test_limit_end_shares_the_limit_in_proportion_and_exactly() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    end = limit_end(start, {A0: 300, A1: 100, B0: 0}, 40)
    assert end == {A0: 30, A1: 10, B0: 0}
    # Remainders go to the largest fractions; the total is exactly the limit.
    end = limit_end(start, {A0: 7, A1: 7, B0: 7}, 10)
    assert sum(end.values()) == 10 and max(end.values()) - min(end.values()) <= 1
    # A limit smaller than the number of queues still makes progress.
    assert sum(limit_end(start, {A0: 5, A1: 5, B0: 5}, 1).values()) == 1


def test_limit_end_reaches_the_end_in_limit_sized_steps() -> None:
    latest = {A0: 1000, A1: 3, B0: 250}
    offsets = {A0: 0, A1: 0, B0: 0}
    steps = 0
    while offsets != latest:
        nxt = limit_end(offsets, latest, 97)
        left = sum(latest.values()) - sum(offsets.values())
        assert sum(nxt.values()) - sum(offsets.values()) == min(97, left)
        assert all(nxt[k] >= offsets[k] for k in offsets)
        offsets = nxt
        steps += 1
    assert steps == -(-1253 // 97)


# -- options -----------------------------------------------------------------------------------------


def test_read_options_defaults() -> None:
    batch = ReadOptions.parse({"topic": "a, b", "namesrv": "h1:1;h2:2"}, streaming=False)
    assert batch.topics == ("a", "b") and batch.namesrv == ("h1:1", "h2:2")
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert batch.read_from_slave == "fallback" and batch.fail_on_data_loss and not batch.commit_offsets
    stream = ReadOptions.parse({"TOPIC": "a", "Group": "g", "maxMessagesPerTrigger": "10"}, streaming=True)
    assert stream.starting.kind == "latest" and stream.commit_offsets
    assert stream.max_messages_per_trigger == 10


@pytest.mark.parametrize("options, streaming, message", [
    ({}, False, "option topic is required"),
    ({"topic": "t", "startingoffset": "x"}, False, "unknown pocketmq read option.*startingoffset"),
    ({"topic": "t", "startingOffsets": "latest"}, False, "reads nothing in a batch query"),
    ({"topic": "t", "startingOffsets": "group"}, True, "needs the group option"),
    ({"topic": "t", "endingOffsets": "latest"}, True, "batch queries only"),
    ({"topic": "t", "maxMessagesPerTrigger": "0"}, True, "must be >= 1"),
    ({"topic": "t", "maxMessagesPerTrigger": "5"}, False, "streaming queries only"),
    ({"topic": "t", "readFromSlave": "always"}, False, "never | preferred | fallback"),
    ({"topic": "t", "failOnDataLoss": "maybe"}, False, "failOnDataLoss: expected true or false"),
    ({"topic": "t", "tags": "a b"}, False, "contains whitespace"),
    ({"topic": "t", "commitOffsets": "true"}, True, "needs the group option"),
    ({"topic": "t", "pullBatchSize": "5000"}, False, "between 1 and 4096"),
    ({"topic": "t", "namesrv": "nohost"}, False, "invalid namesrv address"),
])
def test_read_option_errors(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        ReadOptions.parse(options, streaming=streaming)


def test_tls_options() -> None:
    from pocketmq.wire.tls import ClientTls

    assert ReadOptions.parse({"topic": "t"}, streaming=False).tls is None
    opts = ReadOptions.parse({"topic": "t", "tlsCaFile": "/ca.crt"}, streaming=False)
    assert opts.tls == ClientTls(ca_file="/ca.crt")
    assert WriteOptions.parse({"topic": "t", "tls": "true"}).tls == ClientTls()
    with pytest.raises(InvalidArgumentError, match="tlsCertFile/tlsKeyFile"):
        WriteOptions.parse({"topic": "t", "tlsCertFile": "/c.crt"})


def test_write_options() -> None:
    opts = WriteOptions.parse({"topic": "t", "sendBatchSize": "16", "checkpointLocation": "/x"})
    assert opts.topic == "t" and opts.batch_size == 16 and opts.max_inflight == 4
    with pytest.raises(InvalidArgumentError, match="one default topic"):
        WriteOptions.parse({"topic": "a,b"})
    with pytest.raises(InvalidArgumentError, match=r"unknown pocketmq write option.*tags"):
        WriteOptions.parse({"topic": "a", "tags": "x"})


def test_read_order_follows_read_from_slave() -> None:
    addrs = {0: "m:1", 2: "s2:1", 1: "s1:1"}
    assert read_order(addrs, "never") == ["m:1"]
    assert read_order(addrs, "fallback") == ["m:1", "s1:1", "s2:1"]
    assert read_order(addrs, "preferred") == ["s1:1", "s2:1", "m:1"]
    assert read_order({1: "s1:1"}, "fallback") == ["s1:1"]  # the master left the route
    assert read_order({1: "s1:1"}, "never") == []


def test_partitions_pickle() -> None:
    part = QueueRange("t", "broker-a", 3, 10, 20, ("127.0.0.1:1", "127.0.0.1:2"))
    assert pickle.loads(pickle.dumps(part)) == part


# -- columnar decoding --------------------------------------------------------------------------------


def _records(n: int, topic: str = "t", first_offset: int = 0) -> bytes:
    msgs = [record.Message.of(topic, bytes([65 + i % 26]) * (i * 37 % 3000), i % 3,
                              tags=f"tag{i % 4}" if i % 2 else None, keys=[f"k{i}"] if i % 3 == 0 else None,
                              properties={"p": "é" * (i % 3)} if i % 5 == 0 else None,
                              born_timestamp=1_700_000_000_000 + i) for i in range(n)]
    prepared = [record.prepare(m) for m in msgs]
    return record.encode_batch(prepared, list(range(first_offset, first_offset + n)), 4096,
                               1_700_000_009_999, record.host_bytes("10.0.0.7"), 10911)


def test_decode_agrees_with_the_client_decoder() -> None:
    data = _records(300, first_offset=42)
    decoded = decode(data, "t", "broker-x")
    reference = decode_records(data, "broker-x")
    assert decoded.num_rows == len(reference)
    assert decoded.queue_offsets.tolist() == list(range(42, 342))
    for row, msg in zip(decoded.batch.to_pylist(), reference, strict=True):
        assert (row["topic"], row["broker_name"], row["queue_id"], row["queue_offset"]) == \
            (msg.topic, "broker-x", msg.queue.queue_id, msg.queue_offset)
        assert row["body"] == msg.body and row["msg_id"] == msg.msg_id
        assert (row["tags"] or "") == msg.tags and (row["keys"] or "") == " ".join(msg.keys)
        user = {k: v for k, v in msg.properties.items() if k not in ("TAGS", "KEYS")}
        assert dict(row["properties"]) == user
        assert row["born_timestamp"].timestamp() * 1000 == pytest.approx(msg.born_timestamp)
        assert row["store_timestamp"].timestamp() * 1000 == pytest.approx(msg.store_timestamp)


def test_decode_empty_and_tag_mask() -> None:
    assert decode(b"", "t", "b").num_rows == 0
    batch = decode(_records(8), "t", "b").batch
    assert tag_mask(batch, "tag1 || tag3").to_pylist() == [False, True, False, True, False, True, False, True]


def _flip_second_body(data: bytes) -> bytes:
    at = int.from_bytes(data[:4], "big") + record.HEADER_SIZE + 1  # inside record 1's 37-byte body
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-1], "runs past the reply|truncated"),
    (lambda b: b[:4] + b"\x00\x00\x00\x00" + b[8:], "bad magic code"),
    (_flip_second_body, "CRC mismatch"),
])
def test_decode_refuses_damaged_records(damage: Any, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        decode(damage(_records(5)), "t", "b")


def test_decode_refuses_another_topic_and_crc_can_be_skipped() -> None:
    with pytest.raises(RecordFormatError, match="another topic"):
        decode(_records(3, topic="u"), "t", "b")
    assert decode(_flip_second_body(_records(2)), "t", "b", check_crc=False).num_rows == 2


def test_decode_handles_inline_and_long_bodies() -> None:
    sizes = [0, 1, 11, 12, 13, 64, 5000]
    msgs = [record.Message.of("t", bytes(range(s % 256)) * (s // 256 + 1) if s else b"", 0) for s in sizes]
    msgs = [m._replace(body=m.body[:s]) for m, s in zip(msgs, sizes, strict=True)]
    prepared = [record.prepare(m) for m in msgs]
    data = record.encode_batch(prepared, list(range(len(msgs))), 0, 1, b"\x7f\0\0\1", 1)
    bodies = decode(data, "t", "b").batch.column("body").to_pylist()
    assert bodies == [m.body for m in msgs]
    assert np.array_equal(decode(data, "t", "b").queue_offsets, np.arange(len(msgs)))


# -- set-up checks -------------------------------------------------------------------------------------


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: object = None) -> object:
        return self.values.get(key, default)


class _FakeSpark:
    def __init__(self, python: str) -> None:
        self.conf = _Conf({"spark.pyspark.python": python})


def test_local_worker_check_passes_for_this_interpreter() -> None:
    check_local_workers(_FakeSpark(sys.executable))


def test_local_worker_check_explains_a_wrong_interpreter(tmp_path: Any) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'pyarrow'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SparkSetupError, match=r"No module named 'pyarrow'.*Set PYSPARK_PYTHON="):
        check_local_workers(_FakeSpark(str(fake)))

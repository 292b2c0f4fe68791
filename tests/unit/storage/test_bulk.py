"""Batches whose messages differ only in their bodies, encoded and indexed in bulk
(``storage/bulk.py``, ``MessageStore.append_uniform``): the same records, consume queue entries
and recovery as the per-record batch path, across segment and consume queue file boundaries,
through the write buffer or the mapping, all or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.broker.storage import bulk, record
from services.broker.storage.record import Message, decode_record, encode_batch, encode_tail
from services.broker.storage.status import PutMessageStatus, PutResult
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import CQ_FILE, SEGMENT, StoreFactory
from tests.unit.storage.test_write_buffer import crash_copy

BORN = ("10.1.2.3", 40123)


def bodies(n: int, size: int | None = None, tag: str = "") -> list[bytes]:
    """``n`` distinct bodies: all ``size`` bytes, or of varying lengths when ``size`` is None."""
    return [(f"{tag}body-{i}:".encode() * 200)[:size if size is not None else 20 + (i * 37) % 300]
            for i in range(n)]


def uniform(topic: str, queue_id: int, payloads: list[bytes], props: dict[str, str] | None = None,
            flag: int = 0, born_timestamp: int = 1_700_000_000_000) -> bulk.UniformBatch:
    tail, code = encode_tail(topic, props or {})
    return bulk.uniform_batch(topic, queue_id, payloads, tail, code, flag, born_timestamp, BORN)


def indexed(batch: bulk.UniformBatch) -> list[Message]:
    return [Message(batch.topic, b"", batch.queue_id)] * len(batch)


@pytest.mark.parametrize("size", [700, None], ids=["same-length", "mixed-lengths"])
def test_encode_uniform_makes_the_bytes_of_the_per_record_encoder(size: int | None) -> None:
    batch = uniform("Orders", 3, bodies(17, size), {"PGROUP": "producers", "TAGS": "paid"}, flag=5)
    store_ip = record.host_bytes("127.0.0.9")
    data, offsets = bulk.encode_uniform(batch, 40, 123_456, 1_700_000_000_999, store_ip, 10911)
    reference = encode_batch(bulk.prepared_records(batch), list(range(40, 57)), 123_456, 1_700_000_000_999,
                             store_ip, 10911)
    assert data == reference
    pos = 0
    for i, body in enumerate(batch.bodies):
        rec = decode_record(data, pos)  # (checks BODYCRC)
        assert (rec.body, rec.queue_offset, rec.physical_offset) == (body, 40 + i, 123_456 + pos)
        assert int(offsets[i]) == rec.physical_offset and rec.tags == "paid"
        pos += rec.store_size
    assert pos == batch.total == len(data)


def test_uniform_batch_refuses_fields_that_do_not_fit() -> None:
    tail, code = encode_tail("T", {})
    for queue_id, flag, born in ((-1, 0, 0), (2**31, 0, 0), (0, 2**31, 0), (0, 0, -5)):
        with pytest.raises(record.RecordError):
            bulk.uniform_batch("T", queue_id, [b"x"], tail, code, flag, born, BORN)
    with pytest.raises(record.RecordError):
        bulk.uniform_batch("T", 0, [], tail, code, 0, 0, BORN)
    with pytest.raises(record.RecordError):
        bulk.uniform_batch("T", 0, [b"x"], tail, code, 0, 0, ("not-an-ip", 1))


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_queue_offset(topic, queue_id)
    while True:
        got = store.get_messages(topic, queue_id, offset, 32, max_bytes=10**9)
        if not got.found:
            return out
        out += [m.body for m in got.messages]
        offset = got.next_begin_offset


def check_result(store: MessageStore, result: PutResult, batch: bulk.UniformBatch, first: int) -> None:
    """``result`` is the append of ``batch`` at queue offsets from ``first``; its records read back."""
    assert result.status is PutMessageStatus.PUT_OK
    assert list(result.queue_offsets) == list(range(first, first + len(batch)))
    assert result.wrote_bytes == batch.total
    for body, queue_offset, physical_offset in zip(batch.bodies, result.queue_offsets,
                                                   result.physical_offsets, strict=True):
        rec = store.read_message(physical_offset)
        assert rec is not None
        assert (rec.body, rec.queue_offset, rec.topic, rec.queue_id) == (body, queue_offset, batch.topic,
                                                                          batch.queue_id)
        assert rec.born_host == BORN and rec.store_timestamp == result.store_timestamp
    assert result.end_offset == result.physical_offsets[-1] + batch.sizes()[-1]


@pytest.mark.parametrize("write_buffer", [False, True], ids=["mapping", "write-buffer"])
def test_batches_roll_segments_and_consume_queue_files_and_survive_a_crash(
        open_store: StoreFactory, tmp_path: Path, write_buffer: bool) -> None:
    store = open_store(transient_store_pool_enable=write_buffer)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    # A new queue (its first file only in memory), then past the first consume queue file
    # (CQ_FILE: 50 entries) and over several commit log segments; single appends in between.
    for i in range(14):
        queue_id = i % 2
        size = 400 if i % 3 else None
        batch = uniform("TopicA", queue_id, bodies(9, size, tag=f"{i}-"))
        result = store.append_uniform(batch, indexed(batch))
        check_result(store, result, batch, len(sent[queue_id]))
        sent[queue_id] += batch.bodies
        if i % 4 == 3:
            single = store.put_message(Message("TopicA", f"single-{i}".encode(), queue_id))
            assert single.ok and single.queue_offsets == (len(sent[queue_id]),)
            sent[queue_id].append(f"single-{i}".encode())
        if i == 5:
            store.flush()  # (the queues' first files written: later batches go to the files)
    assert store.max_offset > 3 * SEGMENT and len(sent[0]) * 20 > CQ_FILE
    for queue_id in (0, 1):
        assert read_queue(store, "TopicA", queue_id) == sent[queue_id]
    copy = crash_copy(store, tmp_path / "crashed")
    again = open_store(root=copy, transient_store_pool_enable=write_buffer)
    assert again.recovery is not None and again.recovery.abnormal
    assert again.max_offset == store.max_offset
    for queue_id in (0, 1):
        assert read_queue(again, "TopicA", queue_id) == sent[queue_id]
        assert again.max_queue_offset("TopicA", queue_id) == len(sent[queue_id])


def test_a_batch_larger_than_a_segment_is_split_over_segments(open_store: StoreFactory) -> None:
    store = open_store()
    batch = uniform("TopicA", 0, bodies(40, 1000))
    assert batch.total > SEGMENT
    result = store.append_uniform(batch, indexed(batch))
    check_result(store, result, batch, 0)
    assert read_queue(store, "TopicA", 0) == list(batch.bodies)


def test_too_large_a_message_refuses_the_whole_batch(open_store: StoreFactory) -> None:
    store = open_store()
    before = store.max_offset
    batch = uniform("TopicA", 0, [b"small", b"x" * 5000])
    result = store.append_uniform(batch, indexed(batch))
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and not result.stored
    assert store.max_offset == before and store.max_queue_offset("TopicA", 0) == 0


def test_an_offset_out_of_range_writes_nothing(open_store: StoreFactory,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    store.put_message(Message("TopicA", b"first", 0))
    before = store.max_offset

    def broken(*args: object) -> tuple[bytes, object]:
        raise record.RecordError("a queue or commit log offset is out of range")

    monkeypatch.setattr(bulk, "encode_uniform", broken)
    batch = uniform("TopicA", 0, bodies(3, 100))
    result = store.append_uniform(batch, indexed(batch))
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_offset == before and store.max_queue_offset("TopicA", 0) == 1
    monkeypatch.undo()
    assert store.append_uniform(batch, indexed(batch)).queue_offsets == range(1, 4)


def test_a_new_queue_whose_first_file_fills_in_memory(open_store: StoreFactory) -> None:
    store = open_store(flush_interval_consume_queue=3_600_000)  # (no flush makes the file meanwhile)
    sent: list[bytes] = []
    for i in range(7):  # 63 entries: past the first file (50) while it is only in memory
        batch = uniform("TopicB", 2, bodies(9, 64, tag=f"{i}-"))
        check_result(store, store.append_uniform(batch, indexed(batch)), batch, len(sent))
        sent += batch.bodies
    assert read_queue(store, "TopicB", 2) == sent
    entries = store.queue_entries("TopicB", 2, 0, 100)
    entries += store.queue_entries("TopicB", 2, len(entries), 100)
    assert [size for _offset, size, _tags in entries] == [record.HEADER_SIZE + 64 + 1 + 6 + 2] * 63

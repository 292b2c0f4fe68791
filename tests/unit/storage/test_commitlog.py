"""Commit log through the store: segment roll-over, batches, replication (get_data/append_data)."""

from __future__ import annotations

import errno
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from services.broker.storage.commitlog import CommitLog
from services.broker.storage.consumequeue import ConsumeQueueStore
from services.broker.storage.logerrors import CorruptDataError, OffsetMismatchError
from services.broker.storage.record import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    Message,
    MessageRecord,
    MessageTooLargeError,
    RecordError,
    decode_record,
    prepare,
)
from services.broker.storage.segment import Segment, parse_segment_name, segment_name
from services.broker.storage.status import PutMessageStatus
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import SEGMENT, StoreFactory, msg


def walk_commit_log(directory: Path) -> tuple[list[MessageRecord], list[tuple[int, int]]]:
    """Parse the segment files independently of the store: (records, blanks as (offset, size)).
    Asserts the on-disk invariants: names, sizes, no record spanning two files, blank padding."""
    records: list[MessageRecord] = []
    blanks: list[tuple[int, int]] = []
    names = sorted(os.listdir(directory))
    for index, name in enumerate(names):
        start = parse_segment_name(name)
        assert start == index * SEGMENT, name
        data = (directory / name).read_bytes()
        assert len(data) == SEGMENT
        pos = 0
        while pos < SEGMENT:
            total, magic = struct.unpack_from(">iI", data, pos)
            if magic == BLANK_MAGIC_CODE:
                assert total == SEGMENT - pos and total >= 8
                assert not any(data[pos + 8:])
                blanks.append((start + pos, total))
                break
            if magic != MAGIC_CODE:
                assert index == len(names) - 1, "only the last segment may end without a blank"
                assert not any(data[pos:]), "bytes after the end of the log must be zero"
                break
            assert pos + total + 8 <= SEGMENT, "a record must leave room for the blank"
            record = decode_record(data, pos)
            assert record.physical_offset == start + pos
            records.append(record)
            pos += total
    return records, blanks


def put_mixed(store: MessageStore, n: int, seed: int = 1) -> list[tuple[Message, int, int]]:
    """Put n messages of random sizes over two topics/three queues, singly and in batches.
    Returns (message, queue offset, physical offset) in put order."""
    rng = random.Random(seed)
    sent: list[tuple[Message, int, int]] = []
    i = 0
    while i < n:
        k = min(rng.choice([1, 1, 1, 5, 20]), n - i)
        batch = [msg(i + j, rng.choice(["TopicA", "TopicB"]), rng.randrange(3), rng.randrange(0, 1500),
                     tags=rng.choice(["a", "b", None])) for j in range(k)]
        result = store.put_message(batch[0]) if k == 1 else store.put_messages(batch)
        assert result.status is PutMessageStatus.PUT_OK, result
        sent.extend(zip(batch, result.queue_offsets, result.physical_offsets, strict=True))
        i += k
    return sent


def test_roll_over_keeps_records_whole_and_readable(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store(transient_store_pool_enable=False)  # (through the mapping: test_write_buffer)
    sent = put_mixed(store, 400)
    records, blanks = walk_commit_log(tmp_path / "store" / "commitlog")
    assert len(os.listdir(tmp_path / "store" / "commitlog")) >= 10
    assert len(blanks) == len(os.listdir(tmp_path / "store" / "commitlog")) - 1
    assert [(r.body, r.queue_offset, r.physical_offset) for r in records] == \
        [(m.body, q, p) for m, q, p in sent]
    # physical offsets are dense except for the blank padding
    expected = 0
    blank_at = dict(blanks)
    for r in records:
        if expected in blank_at:
            expected += blank_at[expected]
        assert r.physical_offset == expected
        expected += r.store_size
    assert store.max_offset == expected
    # read back: by physical offset and through the consume queues, across segments
    for m, _q, p in sent:
        assert store.read_message(p).body == m.body  # type: ignore[union-attr]
    for topic in ("TopicA", "TopicB"):
        for queue_id in range(3):
            mine = [(q, m.body) for m, q, _ in sent if m.topic == topic and m.queue_id == queue_id]
            assert [q for q, _ in mine] == list(range(len(mine)))  # queue offsets are dense per queue
            got: list[tuple[int, bytes]] = []
            offset = 0
            while True:
                result = store.get_messages(topic, queue_id, offset, 7)
                if not result.found:
                    break
                got += [(r.queue_offset, r.body) for r in result.messages]
                offset = result.next_begin_offset
            assert got == mine


def test_batch_spanning_segments_is_one_call(open_store: StoreFactory) -> None:
    store = open_store()
    batch = [msg(i, size=1000) for i in range(60)]  # ~66 KB: 5 segments
    result = store.put_messages(batch)
    assert result.ok and list(result.queue_offsets) == list(range(60))
    records = [store.read_message(p) for p in result.physical_offsets]
    assert result.wrote_bytes == sum(r.store_size for r in records if r is not None)
    assert result.end_offset == store.max_offset
    assert {p // SEGMENT for p in result.physical_offsets} == set(range(5))
    assert len(result.msg_ids) == 60 and len(set(result.msg_ids)) == 60
    got = store.get_messages("TopicA", 0, 0, 32, max_bytes=10**9)
    assert [r.body for r in got.messages] == [m.body for m in batch[:32]]


def test_commit_log_refuses_records_larger_than_a_segment(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(str(tmp_path / "cq"), 1000)
    log = CommitLog(str(tmp_path / "log"), 4096, store_host=("127.0.0.1", 1), dispatcher=cq)
    big = Message("T", bytes(4096))
    refused = log.put(big)
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and "4088" in refused.error
    with pytest.raises(MessageTooLargeError):
        log.append_batch([prepare(Message("T", b"ok")), prepare(big)])
    log.max_message_size = 50
    refused = log.put(Message("T", bytes(100)))
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and "(50)" in refused.error
    log.max_message_size = 4096
    assert log.max_offset == 0
    fits = log.put(Message("T", bytes(4096 - 8 - 91 - 1)))  # exactly fills the segment but the blank
    assert fits.wrote_bytes == 4096 - 8 and log.max_offset == 4096 - 8
    # a batch whose record overflows a field is rolled back entirely
    with pytest.raises(RecordError):
        log.append_batch([prepare(Message("T", b"a")), prepare(Message("T", b"b", flag=2**40))])
    assert log.max_offset == 4096 - 8 and cq.find(("T", 0)) is not None
    assert cq.find(("T", 0)).max_offset == 1  # type: ignore[union-attr]
    log.close()
    cq.close()


def test_message_larger_than_the_limit_is_refused(open_store: StoreFactory) -> None:
    store = open_store()
    result = store.put_message(Message("T", bytes(5000)))
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in result.error
    assert store.put_messages([Message("T", b"ok"), Message("T", bytes(5000))]).status is \
        PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_offset == 0  # nothing of the batch was written


# -- replication ---------------------------------------------------------------------------------

def replicate(master: MessageStore, slave: MessageStore, rng: random.Random,
              start: int | None = None) -> None:
    """Copy master -> slave the way the HA service does, in random chunk sizes."""
    offset = slave.max_offset if start is None else start
    while offset < master.max_offset:
        piece = master.get_data(offset, rng.randrange(1, 3000))
        assert piece is not None
        with piece:
            data = bytes(piece.data)
            assert piece.start_offset == offset
        # the slave may receive it in even smaller pieces
        while data:
            cut = rng.randrange(1, len(data) + 1)
            offset = slave.append_data(offset, data[:cut])
            data = data[cut:]
            # only whole records are ever indexed
            assert slave.dispatched_offset <= slave.max_offset
    # the reput thread dispatches the records after the copy
    assert slave.wait_dispatched(master.max_offset, 10)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replicated_log_is_byte_identical(open_store: StoreFactory, tmp_path: Path, seed: int) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    put_mixed(master, 300, seed)
    replicate(master, slave, random.Random(seed))
    assert slave.max_offset == master.max_offset == slave.dispatched_offset
    master.flush()
    slave.flush()
    for name in sorted(os.listdir(tmp_path / "master" / "commitlog")):
        assert (tmp_path / "master" / "commitlog" / name).read_bytes() == \
            (tmp_path / "slave" / "commitlog" / name).read_bytes()
    assert master.topics() == slave.topics()
    for topic, queue_ids in master.topics().items():
        for queue_id in queue_ids:
            directory = Path("consumequeue") / topic / str(queue_id)
            names = sorted(os.listdir(tmp_path / "master" / directory))
            assert names == sorted(os.listdir(tmp_path / "slave" / directory))
            for name in names:
                assert (tmp_path / "master" / directory / name).read_bytes() == \
                    (tmp_path / "slave" / directory / name).read_bytes()
            assert slave.max_queue_offset(topic, queue_id) == master.max_queue_offset(topic, queue_id)


def test_record_cut_by_a_chunk_is_dispatched_when_complete(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    first = master.put_message(msg(0)).end_offset
    master.put_message(msg(1))
    with master.get_data(0, first + 50) as piece:  # type: ignore[union-attr]
        slave.append_data(0, piece.data)
    assert slave.max_offset == first + 50
    assert slave.wait_dispatched(first, 5)
    assert not slave.wait_dispatched(first + 1, 0.2)  # the cut record waits for its end
    assert slave.dispatched_offset == first
    assert slave.max_queue_offset("TopicA", 0) == 1
    with master.get_data(first + 50, 10**6) as piece:  # type: ignore[union-attr]
        slave.append_data(first + 50, piece.data)
    assert slave.wait_dispatched(master.max_offset, 5)
    assert slave.max_queue_offset("TopicA", 0) == 2
    assert [r.body for r in slave.get_messages("TopicA", 0, 0, 10).messages] == [msg(0).body, msg(1).body]


def test_append_data_refuses_discontinuous_data(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    put_mixed(master, 30)
    with pytest.raises(OffsetMismatchError, match="segment boundary"):
        slave.append_data(100, b"x")  # an empty log starts at a segment boundary
    with master.get_data(0, 500) as piece:  # type: ignore[union-attr]
        slave.append_data(0, piece.data)
    with pytest.raises(OffsetMismatchError) as info:
        slave.append_data(501, b"x")
    assert info.value.max_offset == 500 and info.value.start_offset == 501
    with pytest.raises(OffsetMismatchError, match="cross the end"):
        slave.append_data(500, bytes(SEGMENT))
    assert slave.max_offset == 500


def test_slave_may_start_from_the_masters_last_segment(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    sent = put_mixed(master, 200)
    start = (master.max_offset // SEGMENT) * SEGMENT
    replicate(master, slave, random.Random(5), start=start)
    assert slave.min_offset == start and slave.max_offset == master.max_offset
    assert sorted(os.listdir(tmp_path / "slave" / "commitlog"))[0] == segment_name(start)
    for topic, queue_ids in master.topics().items():
        for queue_id in queue_ids:
            tail = [(q, m.body) for m, q, p in sent
                    if m.topic == topic and m.queue_id == queue_id and p >= start]
            if not tail:
                continue
            assert slave.min_queue_offset(topic, queue_id) == tail[0][0]
            assert slave.max_queue_offset(topic, queue_id) == master.max_queue_offset(topic, queue_id)
            got = slave.get_messages(topic, queue_id, tail[0][0], 32, max_bytes=10**9)
            assert [(r.queue_offset, r.body) for r in got.messages] == tail[:32]
            assert slave.get_messages(topic, queue_id, 0, 1).status.name == "OFFSET_TOO_SMALL"


def test_corrupt_replicated_data_is_cut_back(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    end0 = master.put_message(msg(0)).end_offset
    end1 = master.put_message(msg(1)).end_offset
    with master.get_data(0, end1) as piece:  # type: ignore[union-attr]
        data = bytearray(piece.data)
    data[end0 + 100] ^= 0xFF  # a body byte of the second record
    # The copy only checks the framing; the reput dispatcher finds the bad CRC and stops there.
    assert slave.append_data(0, data) == end1
    assert not slave.wait_dispatched(end1, 5)
    assert slave.dispatch_error == (end0, "body CRC mismatch")
    assert slave.dispatched_offset == end0 and slave.max_queue_offset("TopicA", 0) == 1
    got = slave.get_messages("TopicA", 0, 0, 10)
    assert [r.body for r in got.messages] == [msg(0).body]  # the corrupt record is never served
    # The next append cuts the log back to the bad record and says why.
    with pytest.raises(CorruptDataError) as info:
        slave.append_data(end1, b"x")
    assert info.value.offset == end0 and "CRC" in info.value.reason
    assert slave.max_offset == end0 and slave.dispatch_error is None
    assert slave.max_queue_offset("TopicA", 0) == 1
    with master.get_data(end0, end1) as piece:  # type: ignore[union-attr]
        slave.append_data(end0, piece.data)  # the good bytes are accepted afterwards
    assert slave.wait_dispatched(end1, 5)
    assert slave.max_queue_offset("TopicA", 0) == 2


@pytest.mark.parametrize(("where", "reason"), [(4, "bad magic code"), (0, "bad record size"),
                                                 (28, "PHYSICALOFFSET")])
def test_bad_framing_is_found_by_the_dispatcher(open_store: StoreFactory, tmp_path: Path, where: int,
                                                reason: str) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    end0 = master.put_message(msg(0)).end_offset
    end1 = master.put_message(msg(1)).end_offset
    with master.get_data(0, end1) as piece:  # type: ignore[union-attr]
        data = bytearray(piece.data)
    data[end0 + where] ^= 0x7F  # a header field of the second record
    assert slave.append_data(0, data) == end1  # the copy does not parse
    assert not slave.wait_dispatched(end1, 5)
    assert slave.dispatch_error is not None and slave.dispatch_error[0] == end0
    assert reason in slave.dispatch_error[1]
    assert slave.max_queue_offset("TopicA", 0) == 1
    with pytest.raises(CorruptDataError) as info:
        slave.append_data(end1, b"x")
    assert info.value.offset == end0 and reason in info.value.reason
    assert slave.max_offset == end0
    with master.get_data(end0, end1) as piece:  # type: ignore[union-attr]
        slave.append_data(end0, piece.data)
    assert slave.wait_dispatched(end1, 5) and slave.max_queue_offset("TopicA", 0) == 2


def test_append_data_takes_pieces_across_segments(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    put_mixed(master, 200)  # several segments
    pieces: list[bytes] = []
    offset = 0
    while offset < master.max_offset:
        with master.get_data(offset, 1000) as piece:  # type: ignore[union-attr]
            pieces.append(bytes(piece.data))
            offset = piece.end_offset
    assert master.max_offset > 2 * SEGMENT
    # One call may fill a segment and go on in the next; empty pieces are ignored.
    assert slave.append_data(0, [pieces[0], b"", *pieces[1:len(pieces) // 2]]) == sum(
        map(len, pieces[:len(pieces) // 2]))
    assert slave.append_data(slave.max_offset, pieces[len(pieces) // 2:]) == master.max_offset
    assert slave.wait_dispatched(master.max_offset, 10)
    for start in range(0, master.max_offset, SEGMENT):
        with master.get_data(start, SEGMENT) as a, slave.get_data(start, SEGMENT) as b:  # type: ignore[union-attr]
            assert bytes(a.data) == bytes(b.data)


def test_append_data_refuses_a_piece_crossing_a_segment(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    put_mixed(master, 200)
    with master.get_data(0, SEGMENT) as first, master.get_data(SEGMENT, 100) as second:  # type: ignore[union-attr]
        joined = bytes(first.data[-50:]) + bytes(second.data)
        slave.append_data(0, first.data[:-50])
    with pytest.raises(OffsetMismatchError, match="cross the end of the segment"):
        slave.append_data(SEGMENT - 50, [b"", joined])
    assert slave.max_offset == SEGMENT - 50  # nothing of the refused call was written


def test_get_data_never_crosses_a_segment(open_store: StoreFactory) -> None:
    store = open_store()
    put_mixed(store, 100)
    offset = 0
    while offset < store.max_offset:
        with store.get_data(offset, 10**9) as piece:  # type: ignore[union-attr]
            assert piece.start_offset == offset
            assert offset // SEGMENT == (piece.end_offset - 1) // SEGMENT
            offset = piece.end_offset
    assert store.get_data(store.max_offset, 100) is None


@pytest.mark.parametrize("direct", [True, False])
def test_bulk_append_data_replicates_exactly(open_store: StoreFactory, tmp_path: Path, direct: bool) -> None:
    """A slave's appends as a catch-up makes them (up to 1 MiB; the whole blocks of large ones
    go direct with replicaDirectWrite) and as the steady state does (small): the slave's log is
    the master's byte for byte, and every record is dispatched and readable."""
    segment = 1024 * 1024
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=segment)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=segment, replica_direct_write=direct)
    sent = put_mixed(master, 4000)
    total = master.max_offset
    assert total > 2 * segment
    rng = random.Random(7)
    offset = 0
    piece_before = b""
    while offset < total:
        size = rng.choice([1000, 30_000, 70_000, 300_000, 1024 * 1024])
        with master.get_data(offset, size) as piece:  # type: ignore[union-attr]
            if offset:  # a reader of the newest bytes caches the pages around them meanwhile
                with slave.get_data(offset - 1, 1) as newest:  # type: ignore[union-attr]
                    assert newest.data == piece_before
            piece_before = bytes(piece.data[-1:])
            offset = slave.append_data(offset, piece.data)
    assert offset == total and slave.wait_dispatched(total, 20)
    for start in range(0, total, segment):
        with master.get_data(start, segment) as a, slave.get_data(start, segment) as b:  # type: ignore[union-attr]
            assert a.data == b.data
    last = {}
    for message, queue_offset, _ in sent:
        last[(message.topic, message.queue_id)] = queue_offset
    for (topic, queue_id), queue_offset in last.items():
        assert slave.max_queue_offset(topic, queue_id) == queue_offset + 1
    got = slave.get_messages(sent[-1][0].topic, sent[-1][0].queue_id, last[(sent[-1][0].topic,
                                                                          sent[-1][0].queue_id)])
    assert [m.body for m in got.messages] == [sent[-1][0].body]


def _gate_write_thread(monkeypatch: pytest.MonkeyPatch, gate: threading.Event,
                       on_write: Callable[[Sequence[bytes]], None]) -> None:
    """The commit log's write thread waits for ``gate`` before each write, then calls
    ``on_write`` with what it is about to write (which may raise, failing the write)."""
    real_write_at = Segment.write_at

    def gated_write_at(seg: Segment, pos: int, views: Sequence[bytes], stage: memoryview | None = None, *,
                       aligned: bool = False) -> int:
        if threading.current_thread().name.startswith("CommitLogWriter"):
            assert gate.wait(10)
            on_write(views)
        return real_write_at(seg, pos, views, stage, aligned=aligned)

    monkeypatch.setattr(Segment, "write_at", gated_write_at)


def test_queued_appends_are_done_once_in_the_file_and_a_failed_write_fails_those_behind_it(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk append's bytes go to the write thread while the next append is taken: its future
    (the slave's ack) is done only once they are in the file, the max offset moves only then,
    a truncation waits for them, and a failed write fails the appends queued behind it
    without writing any of them (no hole): the next append starts again from the file's end."""
    segment = 1024 * 1024
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=segment)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=segment)
    put_mixed(master, 1200)
    piece = 128 * 1024
    assert master.max_offset > 4 * piece
    pieces = []
    for offset in range(0, 4 * piece, piece):
        with master.get_data(offset, piece) as data:  # type: ignore[union-attr]
            pieces.append((offset, bytes(data.data)))
    gate = threading.Event()
    gate.set()
    failures: list[OSError] = []

    def fail_if_told(_: Sequence[bytes]) -> None:
        if failures:
            raise failures.pop()

    _gate_write_thread(monkeypatch, gate, fail_if_told)
    assert slave.append_data(*pieces[0]) == piece  # (a new segment: written at once)
    gate.clear()
    first, second = (slave.queue_data(*pieces[i]) for i in (1, 2))
    time.sleep(0.05)
    assert not first.done() and not second.done() and slave.max_offset == piece
    cut = threading.Thread(target=slave.truncate_dirty, args=(2 * piece,))
    cut.start()
    cut.join(0.1)
    assert cut.is_alive()  # (waits for the queued writes)
    gate.set()
    assert (first.result(5), second.result(5)) == (2 * piece, 3 * piece)
    cut.join(5)
    assert slave.max_offset == 2 * piece
    gate.clear()
    failures.append(OSError(errno.EIO, "Input/output error"))
    third, fourth = (slave.queue_data(*pieces[i]) for i in (2, 3))
    gate.set()
    for future in (third, fourth):
        with pytest.raises(OSError, match="Input/output error"):
            future.result(5)
    assert slave.max_offset == 2 * piece
    with pytest.raises(OffsetMismatchError):
        slave.append_data(*pieces[3])
    for offset, data in pieces[2:]:
        assert slave.append_data(offset, data) == offset + len(data)
    assert slave.wait_dispatched(3 * piece, 10), slave.dispatch_error  # (up to the last whole record)
    with slave.get_data(0, 4 * piece) as got:  # type: ignore[union-attr]
        assert bytes(got.data) == b"".join(data for _, data in pieces)


def test_appends_queued_while_the_write_thread_writes_go_out_in_its_next_write(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write thread drains the queue: appends queued while it writes are written together
    by its next call (contiguous, one segment), each acked once that call returned, in order;
    none is left behind when the queue empties just as another append comes."""
    segment = 4 * 1024 * 1024
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=segment)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=segment)
    put_mixed(master, 3000)
    piece = 64 * 1024
    count = master.max_offset // piece
    assert count >= 24
    pieces = []
    for offset in range(0, count * piece, piece):
        with master.get_data(offset, piece) as data:  # type: ignore[union-attr]
            pieces.append((offset, bytes(data.data)))
    gate = threading.Event()
    writes: list[int] = []
    _gate_write_thread(monkeypatch, gate, lambda views: writes.append(sum(len(v) for v in views)))
    assert slave.append_data(*pieces[0]) == piece  # (a new segment: written at once)
    first = slave.queue_data(*pieces[1])
    held = [slave.queue_data(*pieces[i]) for i in range(2, 8)]  # (while the first one is held)
    gate.set()
    assert [f.result(5) for f in (first, *held)] == [(i + 1) * piece for i in range(1, 8)]
    assert writes == [piece, 6 * piece]
    # One append at a time from here, each racing the write thread's end of its queue.
    for offset, data in pieces[8:]:
        assert slave.queue_data(offset, data).result(5) == offset + len(data)
    assert slave.max_offset == len(pieces) * piece
    with slave.get_data(0, len(pieces) * piece) as got:  # type: ignore[union-attr]
        assert bytes(got.data) == b"".join(data for _, data in pieces)

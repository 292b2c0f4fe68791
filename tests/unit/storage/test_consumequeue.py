"""Consume queues: entries, pulls (statuses, limits, tag filter), lookup by time, rebuilds."""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

from services.broker.storage import record as rec
from services.broker.storage.consumequeue import ENTRY
from services.broker.storage.record import Message, tag_hash_code
from services.broker.storage.status import GetMessageStatus
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import CQ_FILE, StoreFactory, msg, small_config


def cq_entries(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """All entries of a queue, straight from its files (stops at the first unwritten one)."""
    entries: list[tuple[int, int, int]] = []
    directory = root / "consumequeue" / topic / str(queue_id)
    for name in sorted(os.listdir(directory)):
        for entry in ENTRY.iter_unpack((directory / name).read_bytes()):
            if entry[1] == 0:
                return entries
            entries.append(entry)
    return entries


def test_entries_point_at_their_records(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    puts = [store.put_message(msg(i, queue_id=i % 2, tags=f"tag{i % 3}")) for i in range(130)]
    store.flush()
    for queue_id in (0, 1):
        entries = cq_entries(tmp_path / "store", "TopicA", queue_id)
        mine = [(i, r) for i, r in enumerate(puts) if i % 2 == queue_id]
        assert len(entries) == len(mine) == 65
        for (i, result), (offset, size, tags_code) in zip(mine, entries, strict=True):
            assert offset == result.physical_offsets[0]
            assert size == result.wrote_bytes
            assert tags_code == tag_hash_code(f"tag{i % 3}")
    # 65 entries with 50 per file: two files named by byte position
    names = sorted(os.listdir(tmp_path / "store" / "consumequeue" / "TopicA" / "0"))
    assert names == ["00000000000000000000", f"{CQ_FILE:020d}"]


def test_read_your_writes(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(60):
        result = store.put_message(msg(i))
        got = store.get_messages("TopicA", 0, result.queue_offsets[0], 1)
        assert got.found and got.messages[0].body == msg(i).body


def test_get_statuses(open_store: StoreFactory) -> None:
    store = open_store()
    assert store.get_messages("Nope", 0, 0, 1).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    for i in range(10):
        store.put_message(msg(i))
    ok = store.get_messages("TopicA", 0, 3, 4)
    assert ok.status is GetMessageStatus.FOUND and [m.queue_offset for m in ok.messages] == [3, 4, 5, 6]
    assert (ok.next_begin_offset, ok.min_offset, ok.max_offset) == (7, 0, 10)
    one = store.get_messages("TopicA", 0, 10, 4)
    assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 10
    badly = store.get_messages("TopicA", 0, 15, 4)
    assert badly.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and badly.next_begin_offset == 10
    assert store.get_messages("TopicA", 0, -1, 4).status is GetMessageStatus.OFFSET_TOO_SMALL


def test_pull_limits(open_store: StoreFactory) -> None:
    store = open_store(max_transfer_count_on_message_in_memory=5)
    for i in range(20):
        store.put_message(msg(i, size=1000))
    assert len(store.get_messages("TopicA", 0, 0, 100).messages) == 5  # capped by config
    by_bytes = store.get_messages("TopicA", 0, 0, 5, max_bytes=2500)
    assert len(by_bytes.messages) == 2 and by_bytes.next_begin_offset == 2
    assert len(store.get_messages("TopicA", 0, 0, 5, max_bytes=1).messages) == 1  # always at least one


def test_tag_filter(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(30):
        store.put_message(msg(i, tags="a" if i % 3 == 0 else "b"))
    store.put_message(msg(30))  # no tags: matches no tag filter
    got = store.get_messages("TopicA", 0, 0, 32, max_bytes=10**9, tag_hashes={tag_hash_code("a")})
    assert [m.queue_offset for m in got.messages] == list(range(0, 30, 3))
    assert got.next_begin_offset == 31
    none = store.get_messages("TopicA", 0, 1, 32, tag_hashes={tag_hash_code("a")} and {tag_hash_code("zzz")})
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 31


def test_offset_by_time(open_store: StoreFactory) -> None:
    store = open_store()
    stamps = []
    for i in range(40):
        stamps.append(store.put_message(msg(i)).store_timestamp)
        if i % 10 == 9:
            time.sleep(0.005)
    assert store.queue_offset_by_time("TopicA", 0, 0) == 0
    assert store.queue_offset_by_time("TopicA", 0, stamps[-1] + 10_000) == 40
    for i in (5, 10, 25, 39):
        first = stamps.index(stamps[i])  # first message stored at that millisecond
        assert store.queue_offset_by_time("TopicA", 0, stamps[i]) == first
    assert store.queue_offset_by_time("Nope", 0, 0) == 0


def test_rebuild_after_deleting_consume_queues(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s")
    with MessageStore(config) as store:
        for i in range(120):
            store.put_message(msg(i, queue_id=i % 3, tags=str(i)))
        store.flush()  # (a new queue's first file is written by the consume queue flush)
        before = {q: cq_entries(tmp_path / "s", "TopicA", q) for q in range(3)}
    shutil.rmtree(tmp_path / "s" / "consumequeue")
    with MessageStore(config) as store:
        assert store.recovery is not None and store.recovery.redispatched == 120
        assert store.max_queue_offset("TopicA", 1) == 40
        store.put_message(msg(120, queue_id=0))  # queue offsets continue where they were
        assert store.max_queue_offset("TopicA", 0) == 41
        store.flush()
        after = {q: cq_entries(tmp_path / "s", "TopicA", q) for q in range(3)}
    assert after[1] == before[1] and after[2] == before[2] and after[0][:40] == before[0]


def test_filler_entries_when_a_queue_starts_late(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "m")
    for i in range(200):
        master.put_message(msg(i))
    last_start = (master.max_offset // (16 * 1024)) * 16 * 1024
    slave = open_store(tmp_path / "s")
    offset = last_start
    while offset < master.max_offset:
        with master.get_data(offset, 10**6) as piece:  # type: ignore[union-attr]
            offset = slave.append_data(offset, piece.data)
    assert slave.wait_dispatched(offset, 5)
    low = slave.min_queue_offset("TopicA", 0)
    assert 100 < low < 200 and slave.max_queue_offset("TopicA", 0) == 200
    # the queue file starts with RocketMQ-style filler entries before the first real one
    first_file = sorted(os.listdir(tmp_path / "s" / "consumequeue" / "TopicA" / "0"))[0]
    data = (tmp_path / "s" / "consumequeue" / "TopicA" / "0" / first_file).read_bytes()
    file_start = int(first_file) // 20
    assert file_start < low  # (with this data the first real entry is mid-file)
    for k in range(file_start, low):
        assert ENTRY.unpack_from(data, (k - file_start) * 20) == (0, 0x7FFFFFFF, 0)
    got = slave.get_messages("TopicA", 0, low, 100, max_bytes=10**9)
    assert [m.queue_offset for m in got.messages] == list(range(low, min(low + 32, 200)))
    slave.shutdown()
    again = open_store(tmp_path / "s")
    assert again.min_queue_offset("TopicA", 0) == low and again.max_queue_offset("TopicA", 0) == 200


def test_prepared_transaction_messages_are_not_indexed(open_store: StoreFactory) -> None:
    store = open_store()
    prepared = store.put_message(Message("T", b"half", sys_flag=rec.TRANSACTION_PREPARED_TYPE))
    assert prepared.ok and list(prepared.queue_offsets) == [0]
    assert store.max_queue_offset("T", 0) == 0
    store.put_message(Message("T", b"normal"))
    committed = store.put_message(Message("T", b"commit", sys_flag=rec.TRANSACTION_COMMIT_TYPE))
    assert list(committed.queue_offsets) == [1]
    assert [m.body for m in store.get_messages("T", 0, 0, 10).messages] == [b"normal", b"commit"]
    assert store.read_message(prepared.physical_offsets[0]).body == b"half"  # type: ignore[union-attr]


def test_delete_topic(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    for i in range(10):
        store.put_message(msg(i, "Gone", i % 2))
        store.put_message(msg(i, "Kept"))
    assert store.topics() == {"Gone": [0, 1], "Kept": [0]}
    assert store.delete_topic("Gone") == 2
    assert store.topics() == {"Kept": [0]} and store.queue_ids("Gone") == []
    assert not (tmp_path / "store" / "consumequeue" / "Gone").exists()
    assert store.get_messages("Gone", 0, 0, 1).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert store.put_message(msg(0, "Gone")).queue_offsets == (0,)
    assert store.max_queue_offset("Kept", 0) == 10


def test_cq_entry_layout() -> None:
    assert ENTRY.size == 20
    assert ENTRY.pack(1, 2, -3) == struct.pack(">q", 1) + struct.pack(">i", 2) + struct.pack(">q", -3)


def test_a_new_queue_is_readable_before_its_file_is_written(tmp_path: Path) -> None:
    """A new queue's first file is created by the consume queue flush, off the send path: its
    entries are served from memory until then, and the file holds them after."""
    root = tmp_path / "s"
    config = small_config(root, flush_interval_consume_queue=3_600_000)  # flushes only when asked
    with MessageStore(config) as store:
        puts = [store.put_message(msg(i, topic="Fresh")) for i in range(5)]
        assert not (root / "consumequeue" / "Fresh").exists()
        got = store.get_messages("Fresh", 0, 0, 32)
        assert [m.body for m in got.messages] == [msg(i, topic="Fresh").body for i in range(5)]
        store.flush()
        assert cq_entries(root, "Fresh", 0) == [
            (r.physical_offsets[0], r.wrote_bytes, 0) for r in puts]
        puts += [store.put_message(msg(i, topic="Fresh")) for i in range(5, 8)]  # into the file now
        store.flush()
        assert [e[0] for e in cq_entries(root, "Fresh", 0)] == [r.physical_offsets[0] for r in puts]
        # More entries than one file holds before any flush: the file is written when it fills.
        many = [store.put_message(msg(i, topic="Big", queue_id=1)) for i in range(120)]
        assert store.max_queue_offset("Big", 1) == 120
        offset, seen = 0, []
        while offset < 120:
            got = store.get_messages("Big", 1, offset, 32)
            seen += [m.physical_offset for m in got.messages]
            offset = got.next_begin_offset
        assert seen == [r.physical_offsets[0] for r in many]
        # A topic deleted before its queue file was written leaves nothing behind.
        store.put_message(msg(0, topic="Doomed"))
        assert store.delete_topic("Doomed") == 1
        store.flush()
        assert not (root / "consumequeue" / "Doomed").exists()
    with MessageStore(config) as store:  # written at shutdown: all there after a restart
        assert store.max_queue_offset("Big", 1) == 120 and store.max_queue_offset("Fresh", 0) == 8
        assert [e[0] for e in cq_entries(root, "Big", 1)] == [r.physical_offsets[0] for r in many]


def test_a_new_queue_takes_the_short_path_in_memory(tmp_path: Path) -> None:
    """Until its file is written, a new queue's entries go straight into its in-memory first
    file (ConsumeQueue.fast_seg), which grows as it fills: readable at every step, and the file
    written later holds exactly those entries, also with a truncation in between."""
    root = tmp_path / "s"
    config = small_config(root, flush_interval_consume_queue=3_600_000,  # flushes only when asked
                          mapped_file_size_consume_queue=20 * 1000)
    with MessageStore(config) as store:
        results = []
        for i in range(300):  # past MEMORY_FILE_MIN (64 entries) twice
            results.append(store.put_message(msg(i, topic="Mem", size=20, properties={"TAGS": f"t{i % 3}"})))
            if i % 50 == 49:
                got = store.get_messages("Mem", 0, i - 40, 32)
                assert [m.physical_offset for m in got.messages] == [
                    r.physical_offsets[0] for r in results[i - 40:i - 8]]
        queue = store._cq.find(("Mem", 0))
        assert queue is not None and queue.pending and queue.fast_end > queue.max_offset * 20
        assert not (root / "consumequeue" / "Mem").exists()
        store.truncate_dirty(results[250].physical_offsets[0])  # cut back in memory
        assert store.max_queue_offset("Mem", 0) == 250
        results = results[:250] + [store.put_message(msg(i, topic="Mem", size=20)) for i in range(250, 260)]
        store.flush()
        assert cq_entries(root, "Mem", 0) == [
            (r.physical_offsets[0], r.wrote_bytes, tag_hash_code(f"t{i % 3}") if i < 250 else 0)
            for i, r in enumerate(results)]


def test_entries_written_straight_into_the_mapping(tmp_path: Path) -> None:
    """The single append writes a queue's next entry straight into its file's mapping while it
    is inside the active file and its touched pages (ConsumeQueue.fast_end); across new files,
    the touched-page boundary and a restart the entries are exactly those of put()."""
    root = tmp_path / "s"
    config = small_config(root, mapped_file_size_consume_queue=20 * 4000)  # 80 kB: past TOUCH_AHEAD
    with MessageStore(config) as store:
        first = [store.put_message(msg(i, size=20)) for i in range(10)]
        store.flush()  # the first file written: the next entries take the fast path
        results = first + [store.put_message(msg(i, size=20)) for i in range(10, 4200)]
        queue = store._cq.find(("TopicA", 0))
        assert queue is not None and queue.fast_end > queue.max_offset * 20
        store.flush()
        assert cq_entries(root, "TopicA", 0) == [(r.physical_offsets[0], r.wrote_bytes, 0) for r in results]
        assert len(os.listdir(root / "consumequeue" / "TopicA" / "0")) == 2
    with MessageStore(config) as store:  # reloaded: the fast path starts again from put()
        results += [store.put_message(msg(i, size=20)) for i in range(4200, 4300)]
        assert [r.queue_offsets[0] for r in results] == list(range(4300))
        got = store.get_messages("TopicA", 0, 4190, 32)
        expected = [r.physical_offsets[0] for r in results[4190:4222]]
        assert [m.physical_offset for m in got.messages] == expected
    assert cq_entries(root, "TopicA", 0) == [(r.physical_offsets[0], r.wrote_bytes, 0) for r in results]

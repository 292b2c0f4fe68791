"""MessageStore API: statuses, lifecycle, listeners, flushing (group commit, timeouts), expiry."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from services.broker.storage import replica
from services.broker.storage import segment as segment_module
from services.broker.storage.config import FlushDiskType, StoreConfig
from services.broker.storage.flush import GroupCommitService
from services.broker.storage.record import Message, tag_hash_code
from services.broker.storage.segment import default_sync
from services.broker.storage.status import GetMessageStatus, PutMessageStatus
from services.broker.storage.store import MessageStore, StoreError
from services.common.config import ConfigError, build_sections
from tests.unit.storage.conftest import SEGMENT, StoreFactory, msg, small_config

# -- config --------------------------------------------------------------------------------------


def test_config_defaults_are_rocketmqs() -> None:
    c = StoreConfig()
    assert c.store_path_root_dir == "./data/store"
    assert c.mapped_file_size_commit_log == 1024**3
    assert c.mapped_file_size_consume_queue == 300_000 * 20
    assert c.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert (c.flush_interval_commit_log, c.sync_flush_timeout, c.file_reserved_time) == (500, 5000, 72)
    assert c.max_message_size == 4 * 1024 * 1024
    assert c.commit_log_dir.endswith("commitlog") and c.consume_queue_dir.endswith("consumequeue")


def test_config_loads_from_broker_conf_keys() -> None:
    (config,) = build_sections([StoreConfig], {
        "storePathRootDir": "/x", "flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": "8388608",
        "syncFlushTimeout": "100", "fileReservedTime": "1"})
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.mapped_file_size_commit_log == 8 << 20
    from_text = StoreConfig(flush_disk_type="sync_flush")  # type: ignore[arg-type]
    assert from_text.flush_disk_type is FlushDiskType.SYNC_FLUSH


@pytest.mark.parametrize("overrides, key", [
    ({"mapped_file_size_consume_queue": 1001}, "mappedFileSizeConsumeQueue"),
    ({"sync_flush_timeout": 0}, "syncFlushTimeout"),
    ({"flush_interval_commit_log": -1}, "flushIntervalCommitLog"),
    ({"max_message_size": 2**30}, "maxMessageSize"),
    ({"file_reserved_time": True}, "fileReservedTime"),
    ({"flush_disk_type": "SOMETIMES"}, "flushDiskType"),
    ({"store_path_root_dir": " "}, "storePathRootDir"),
    ({"populate_ahead_size": -1}, "populateAheadSize"),
    ({"replica_direct_write": "yes"}, "replicaDirectWrite"),
])
def test_config_validation_names_the_key(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig(**overrides)  # type: ignore[arg-type]
    assert info.value.key == key and isinstance(info.value, ValueError)


# -- lifecycle and statuses ----------------------------------------------------------------------

def test_not_running_means_service_not_available(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    assert store.put_message(msg(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    with store:
        assert store.running and store.put_message(msg(0)).ok
        assert (tmp_path / "s" / "abort").exists()
    assert not (tmp_path / "s" / "abort").exists()
    assert store.put_message(msg(1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.put_messages([msg(1)]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreError):
        store.start()
    store.shutdown()  # idempotent


def test_one_process_per_store_directory(open_store: StoreFactory, tmp_path: Path) -> None:
    open_store()
    with pytest.raises(StoreError, match="in use"):
        MessageStore(small_config(tmp_path / "store")).start()


def test_refused_messages(open_store: StoreFactory) -> None:
    store = open_store()
    bad = store.put_message(Message("a/b", b"x"))
    assert bad.status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in bad.error and not bad.stored
    big = store.put_message(Message("T", b"", properties={"k": "v" * 33000}))
    assert big.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    out_of_range = store.put_message(Message("T", b"", flag=2**40))
    assert out_of_range.status is PutMessageStatus.MESSAGE_ILLEGAL
    mixed = store.put_messages([msg(0), Message("T", b"", flag=2**40)])
    assert mixed.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_offset == 0 and store.topics() == {}
    assert store.put_messages([]).ok


def test_put_result(open_store: StoreFactory) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    a = store.put_message(msg(0, tags="x"))
    b = store.put_messages([msg(1), msg(2, queue_id=5)])
    assert a.ok and a.stored and list(a.queue_offsets) == [0] and list(a.physical_offsets) == [0]
    assert a.end_offset == a.wrote_bytes == b.physical_offsets[0]
    assert list(b.queue_offsets) == [1, 0] and b.end_offset == store.max_offset
    assert b.wrote_bytes == store.max_offset - a.end_offset
    assert store.flushed_offset >= b.end_offset  # SYNC_FLUSH: on disk when put returns
    record = store.read_message(b.physical_offsets[1])
    assert record is not None and record.msg_id == b.msg_ids[1] and record.queue_id == 5


def test_append_listeners(open_store: StoreFactory) -> None:
    store = open_store()
    seen: list[int] = []

    def broken(offset: int) -> None:
        raise RuntimeError("listener bug")

    store.add_append_listener(seen.append)
    store.add_append_listener(broken)  # a failing listener does not fail the put
    first = store.put_message(msg(0))
    assert first.ok and seen == [first.end_offset]
    assert store.put_messages([msg(1), msg(2)]).ok
    assert seen == [first.end_offset, store.max_offset]
    store.remove_append_listener(seen.append)
    store.put_message(msg(4))
    assert len(seen) == 2


# -- flushing ------------------------------------------------------------------------------------

def test_group_commit_shares_syncs(tmp_path: Path) -> None:
    calls = []

    def counting_sync(fd: int) -> None:
        calls.append(fd)
        default_sync(fd)

    store = MessageStore(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH),
                         sync=counting_sync)
    with store:
        results: list[PutMessageStatus] = []

        def writer(k: int) -> None:
            for i in range(40):
                results.append(store.put_message(msg(i, queue_id=k)).status)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == [PutMessageStatus.PUT_OK] * 320
        assert store.flushed_offset == store.max_offset
        commit_log_syncs = len(calls)
    assert commit_log_syncs < 320  # many writers per sync (each sync also covers CQ files)


def test_one_flush_wakes_every_writer_it_covers_one_after_the_other() -> None:
    """A flush wakes the first writer it covers and each woken writer the next (the relay):
    all of them return, also when one of them gave up waiting meanwhile."""
    gate = threading.Event()
    flushed = [0]

    def flush() -> int:
        gate.wait(10)
        return flushed[0]

    service = GroupCommitService(flush, 0)
    service.start()
    try:
        got: dict[int, bool] = {}

        def writer(k: int) -> None:
            got[k] = service.wait(k + 1, 0.2 if k == 7 else 10)

        writers = [threading.Thread(target=writer, args=(k,)) for k in range(32)]
        for w in writers:
            w.start()
        deadline = time.monotonic() + 5
        while len(service._waiters) < 31 and time.monotonic() < deadline:  # (all but 7 parked)
            time.sleep(0.005)
        time.sleep(0.3)  # writer 7 times out before the flush
        flushed[0] = 32
        gate.set()
        for w in writers:
            w.join(5)
        assert got == {k: k != 7 for k in range(32)}
        assert service.wait(20, 1)
    finally:
        gate.set()
        service.stop()


def test_flush_disk_timeout(tmp_path: Path) -> None:
    gate = threading.Event()

    def stuck_sync(fd: int) -> None:
        gate.wait(10)

    store = MessageStore(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                      sync_flush_timeout=200), sync=stuck_sync)
    store.start()
    try:
        started = time.monotonic()
        result = store.put_message(msg(0))
        waited = time.monotonic() - started
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and result.stored
        assert "syncFlushTimeout" in result.error
        assert 0.15 <= waited < 3
        assert store.get_messages("TopicA", 0, 0, 1).found  # stored anyway
        future = store.flush_future(result.end_offset)
        assert not future.done()
        gate.set()
        assert future.result(timeout=5) is PutMessageStatus.PUT_OK
        assert store.put_message(msg(1)).ok
    finally:
        gate.set()
        store.shutdown()


def test_flush_future_with_asyncio(tmp_path: Path) -> None:
    gate = threading.Event()
    store = MessageStore(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH),
                         sync=lambda fd: (gate.wait(10), None)[1])

    async def scenario() -> None:
        appended = store.append_messages([msg(0), msg(1)])
        assert appended.ok and store.get_messages("TopicA", 0, 0, 2).found  # visible before the flush
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(store.flush_future(appended.end_offset)), 0.1)
        gate.set()
        status = await asyncio.wait_for(asyncio.wrap_future(store.flush_future(appended.end_offset)), 5)
        assert status is PutMessageStatus.PUT_OK

    store.start()
    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        store.shutdown()


def test_async_flush_runs_in_the_background(open_store: StoreFactory) -> None:
    store = open_store(flush_commit_log_least_pages=0)
    end = store.put_message(msg(0)).end_offset
    assert store.flush_future(end).result(0) is PutMessageStatus.PUT_OK  # nothing to wait for
    deadline = time.monotonic() + 5
    while store.flushed_offset < end and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.flushed_offset >= end


def test_pages_are_mapped_ahead_of_the_writer(open_store: StoreFactory,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    prefaulted_by: list[str] = []
    prefault = segment_module.Segment.prefault

    def recording(self: segment_module.Segment, end: int, *, write: bool = False) -> bool:
        prefaulted_by.append(threading.current_thread().name)
        return prefault(self, end, write=write)

    monkeypatch.setattr(segment_module.Segment, "prefault", recording)
    store = open_store(populate_ahead_size=8192, transient_store_pool_enable=False)  # (the mapping path)
    store.put_message(msg(0))
    segment = store._log.segments[-1]
    # The first write maps the first chunk itself (the warmer thread may have mapped more).
    assert segment.write_pos < segment.populated_pos <= segment.write_pos + 8192
    for i in range(1, 60):
        store.put_message(msg(i))
        assert segment.write_pos <= segment.populated_pos < segment.write_pos + 8192 + 4096
    # The warmer thread maps pages ahead of the writer (no GIL held), woken whenever the writer
    # gets within half of populate_ahead_size of the end of the mapped pages (the writer maps
    # the next chunk itself only when the warmer has not kept up, e.g. on a busy machine).
    deadline = time.monotonic() + 10
    while (not prefaulted_by or segment.populated_pos < segment.write_pos + 4096) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert segment.write_pos + 4096 <= segment.populated_pos <= segment.write_pos + 8192
    assert set(prefaulted_by) == {"CommitLogWarmer"}
    assert [m.body for m in store.get_messages("TopicA", 0, 0, 60, max_bytes=10**9).messages[:3]] == \
        [msg(i).body for i in range(3)]


def test_without_madvise_support_pages_just_fault_in(open_store: StoreFactory,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_module, "MADV_POPULATE_READ", 12345)  # EINVAL, like a pre-5.14 kernel
    monkeypatch.setattr(segment_module, "MADV_POPULATE_WRITE", 12346)
    store = open_store(populate_ahead_size=8192, transient_store_pool_enable=False)  # (the mapping path)
    assert store.put_message(msg(0)).ok and store.put_messages([msg(1), msg(2)]).ok
    assert store._log.segments[-1].populated_pos == 0
    assert len(store.get_messages("TopicA", 0, 0, 10).messages) == 3


# -- expiry --------------------------------------------------------------------------------------

def test_delete_expired_spares_active_and_held_segments(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    for i in range(300):
        store.put_message(msg(i, queue_id=i % 2))
    store.flush()
    directory = tmp_path / "store" / "commitlog"
    names = sorted(os.listdir(directory))
    assert len(names) >= 4
    now = int(time.time() * 1000)
    assert store.delete_expired(now) == 0  # nothing is 72 h old
    held = store.get_data(2 * SEGMENT + 10, 100)  # a reader (e.g. replication) holds segment 2
    assert held is not None
    later = now + 73 * 3_600_000
    deleted = store.delete_expired(later)
    assert sorted(os.listdir(directory)) == names[2:]  # 0 and 1 went, then the held one stopped it
    assert deleted >= 2 and store.min_offset == 2 * SEGMENT
    held.release()
    store.delete_expired(later)
    assert sorted(os.listdir(directory)) == names[-1:]  # never the segment being written
    # consume queues: files wholly below the new min offset are gone, min offsets moved up
    low = store.min_queue_offset("TopicA", 0)
    assert low > 0
    assert store.get_messages("TopicA", 0, 0, 1).status is GetMessageStatus.OFFSET_TOO_SMALL
    got = store.get_messages("TopicA", 0, low, 1)
    assert got.found and got.messages[0].physical_offset >= store.min_offset
    cq_files = os.listdir(tmp_path / "store" / "consumequeue" / "TopicA" / "0")
    assert len(cq_files) == 1
    # and the log goes on
    assert store.put_message(msg(300)).ok


def test_delete_expired_uses_file_age(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store(file_reserved_time=1)
    for i in range(200):
        store.put_message(msg(i))
    store.flush()
    directory = tmp_path / "store" / "commitlog"
    names = sorted(os.listdir(directory))
    old = time.time() - 2 * 3600
    os.utime(directory / names[0], (old, old))
    assert store.delete_expired() >= 1  # the segment (and consume queue files below it)
    assert sorted(os.listdir(directory)) == names[1:]


def test_queue_entries_are_the_raw_consume_queue(open_store: StoreFactory) -> None:
    store = open_store()
    results = [store.put_message(msg(i, tags="a" if i % 2 else "b")) for i in range(5)]
    entries = store.queue_entries("TopicA", 0, 1, 3)
    assert entries == [(r.physical_offsets[0], r.wrote_bytes, tag_hash_code("a" if i % 2 else "b"))
                       for i, r in list(enumerate(results))[1:4]]
    assert store.queue_entries("TopicA", 0, 5, 3) == []  # at the end
    assert store.queue_entries("TopicA", 7, 0, 3) == []  # no such queue
    assert store.queue_entries("Nope", 0, 0, 3) == []


def test_select_entries_is_what_both_pull_forms_return(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(40):  # two queues interleaved, so a queue's records are not all contiguous
        tags = "a" if i % 3 else "b"
        assert store.put_message(msg(i, queue_id=0 if i % 5 else 1, tags=tags)).ok
    a = {tag_hash_code("a")}
    for start, count, max_bytes, hashes in [(0, 32, None, None), (2, 5, None, a), (0, 32, 700, a),
                                            (10, 1, 1, None)]:
        sel = store.select_entries("TopicA", 0, start, count, max_bytes, hashes)
        got = store.get_messages("TopicA", 0, start, count, max_bytes, hashes)
        assert sel.status is got.status is GetMessageStatus.FOUND
        assert sel.offsets == [m.physical_offset for m in got.messages]
        assert sel.next_begin_offset == got.next_begin_offset
        assert sel.total == sum(m.store_size for m in got.messages)
        # The runs cover exactly the picked records, contiguous ones merged.
        assert sum(end - begin for begin, end in sel.runs) == sel.total
        ends = [m.physical_offset + m.store_size for m in got.messages]
        assert [begin for begin, _ in sel.runs] == [
            m.physical_offset for k, m in enumerate(got.messages)
            if k == 0 or ends[k - 1] != m.physical_offset]
        assert len(sel.runs) < len(sel.offsets) or len(sel.offsets) == 1
        if hashes is not None:
            assert all(m.tags == "a" for m in got.messages)
        if max_bytes is not None:
            assert len(got.messages) == 1 or sel.total <= max_bytes
    only_b = store.select_entries("TopicA", 0, 0, 32, None, {tag_hash_code("b")} | {12345})
    assert only_b.status is GetMessageStatus.FOUND
    nothing = store.select_entries("TopicA", 0, 0, 32, None, {12345})
    assert (nothing.status, nothing.offsets, nothing.runs) == (GetMessageStatus.NO_MATCHED_MESSAGE, [], [])
    assert nothing.next_begin_offset == store.max_queue_offset("TopicA", 0)
    end = store.max_queue_offset("TopicA", 0)
    assert store.select_entries("TopicA", 0, end, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.select_entries("TopicA", 0, end + 1, 32).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert store.select_entries("TopicA", 7, 0, 32).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE


def test_warmer_keeps_pages_cached_ahead_of_the_writer(open_store: StoreFactory) -> None:
    store = open_store(warm_ahead_size=8192, transient_store_pool_enable=False)
    store.put_message(msg(0))
    segment = store._log.segments[-1]
    deadline = time.monotonic() + 5
    while segment.warmed_pos < segment.write_pos + 8192 - 4096 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert segment.warmed_pos >= segment.write_pos + 8192 - 4096
    assert not any(segment.view[segment.write_pos:])  # warming writes nothing


@pytest.mark.parametrize("direct", [True, False])
def test_warmer_rests_while_bulk_appends_go_direct(open_store: StoreFactory, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, direct: bool) -> None:
    """Pages warmed ahead of a slave whose appends go direct would only be dropped again by the
    next direct write: the warmer waits until the bulk stream stops (or warms as usual when
    the appends go through the page cache)."""
    size = 1024 * 1024
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=size)
    for i in range(300):
        master.put_message(msg(i, size=900))
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=size, warm_ahead_size=256 * 1024,
                       replica_direct_write=direct)
    with master.get_data(0, master.max_offset) as data:  # type: ignore[union-attr]
        assert data.size >= 256 * 1024
        slave.append_data(0, data.data)
    log = slave._log
    assert (log._last_direct_append > 0) == direct  # (a file system without O_DIRECT fails here)
    segment = log.segments[-1]
    before = segment.warmed_pos
    monkeypatch.setattr(replica, "BULK_WINDOW_S", 60.0)  # still streaming
    log.warm_ahead()
    assert (segment.warmed_pos == before) == direct
    monkeypatch.setattr(replica, "BULK_WINDOW_S", 0.0)  # the stream stopped
    log.warm_ahead()
    assert segment.warmed_pos >= segment.write_pos + 128 * 1024

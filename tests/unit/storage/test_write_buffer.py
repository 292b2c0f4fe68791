"""The commit log's write buffer (``transientStorePoolEnable``; always under SYNC_FLUSH): appends
go into memory and reach the file in chunks, yet every reader sees them at once, a flush writes
them first, and nothing is lost or reordered by a roll-over, a truncation, a failed write or a
restart."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from services.broker.storage import commitlog as commitlog_module
from services.broker.storage import segment as segment_module
from services.broker.storage.config import FlushDiskType
from services.broker.storage.record import decode_record, encode_record
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import SEGMENT, StoreFactory, msg
from tests.unit.storage.test_commitlog import put_mixed, walk_commit_log

#: A committer that never runs by itself in these tests (an hour): only readers, flushes,
#: roll-overs and the buffer filling up commit.
IDLE = 3_600_000


def pool_store(open_store: StoreFactory, **overrides: object) -> MessageStore:
    return open_store(transient_store_pool_enable=True, commit_interval_commit_log=IDLE,
                      flush_interval_commit_log=IDLE, **overrides)


def file_bytes(store: MessageStore, offset: int, size: int) -> bytes:
    """What the commit log file holds at ``offset`` (read with ``pread``, not the mapping)."""
    path = Path(store.config.commit_log_dir) / f"{offset - offset % SEGMENT:020d}"
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, offset % SEGMENT)


def test_appends_wait_in_the_buffer_and_readers_see_them_at_once(open_store: StoreFactory) -> None:
    store = pool_store(open_store)
    first = store.put_message(msg(0))
    second = store.put_message(msg(1))
    start = first.physical_offsets[0]
    # not in the file yet (the committer is idle) ...
    assert file_bytes(store, start, second.end_offset - start) == bytes(second.end_offset - start)
    assert store.flushed_offset <= start
    # ... but every reader sees them: through the consume queue, by offset, as raw bytes
    got = store.get_messages("TopicA", 0, 0, 32)
    assert [r.body for r in got.messages] == [msg(0).body, msg(1).body]
    assert store.read_message(second.physical_offsets[0]).body == msg(1).body  # type: ignore[union-attr]
    with store.get_data(start, 10**6) as piece:  # type: ignore[union-attr]
        assert decode_record(piece.data, 0).body == msg(0).body
    # reading committed them
    assert decode_record(file_bytes(store, start, first.wrote_bytes), 0).body == msg(0).body


def test_a_flush_commits_first(open_store: StoreFactory) -> None:
    store = pool_store(open_store)
    result = store.put_message(msg(0))
    assert store.flush() == result.end_offset
    assert decode_record(file_bytes(store, 0, result.wrote_bytes), 0).body == msg(0).body


def test_sync_flush_acknowledges_only_what_is_in_the_file(open_store: StoreFactory) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, commit_interval_commit_log=IDLE)
    for i in range(20):
        result = store.put_message(msg(i))
        assert result.ok, result
        assert store.flushed_offset >= result.end_offset
        record = decode_record(file_bytes(store, result.physical_offsets[0], result.wrote_bytes), 0)
        assert record.body == msg(i).body


def test_roll_over_batches_and_restart(open_store: StoreFactory, tmp_path: Path) -> None:
    store = pool_store(open_store)
    sent = put_mixed(store, 400)  # singles and batches over many 16 KiB segments
    for m, _q, p in sent:
        assert store.read_message(p).body == m.body  # type: ignore[union-attr]
    store.flush()
    records, blanks = walk_commit_log(tmp_path / "store" / "commitlog")
    assert len(blanks) >= 9
    assert [(r.body, r.queue_offset, r.physical_offset) for r in records] == \
        [(m.body, q, p) for m, q, p in sent]
    more = put_mixed(store, 30, seed=2)
    store.shutdown()  # commits and flushes what is still buffered
    again = open_store()
    assert again.recovery is not None and not again.recovery.abnormal
    for m, _q, p in sent + more:
        assert again.read_message(p).body == m.body  # type: ignore[union-attr]


def test_a_failed_commit_keeps_the_bytes_and_is_retried(open_store: StoreFactory,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = pool_store(open_store)
    a = store.put_message(msg(0))
    real = segment_module.Segment.write_through
    failures = [OSError(28, "No space left on device")]

    def failing(self: segment_module.Segment, pos: int, data: bytes | memoryview) -> None:
        if failures:
            raise failures.pop()
        real(self, pos, data)

    monkeypatch.setattr(segment_module.Segment, "write_through", failing)
    with pytest.raises(OSError):
        store._log.commit()
    b = store.put_message(msg(1))  # appends go on meanwhile
    assert b.ok
    assert store.flushed_offset < a.end_offset
    assert store.flush() == b.end_offset  # the failed chunk first, then the rest
    assert decode_record(file_bytes(store, 0, a.wrote_bytes), 0).body == msg(0).body
    assert decode_record(file_bytes(store, b.physical_offsets[0], b.wrote_bytes), 0).body == msg(1).body


def test_truncation_drops_buffered_records(open_store: StoreFactory) -> None:
    store = pool_store(open_store)
    results = [store.put_message(msg(i)) for i in range(5)]
    cut = results[2].physical_offsets[0]
    store.truncate_dirty(cut)
    assert store.max_offset == cut
    assert store.max_queue_offset("TopicA", 0) == 2
    assert file_bytes(store, cut, results[4].end_offset - cut) == bytes(results[4].end_offset - cut)
    again = store.put_message(msg(9))
    assert again.physical_offsets[0] == cut and list(again.queue_offsets) == [2]
    store.flush()
    assert decode_record(file_bytes(store, cut, again.wrote_bytes), 0).body == msg(9).body


def crash_copy(store: MessageStore, to: Path) -> Path:
    """The store's files as a killed process leaves them (copied while it runs: the ``abort``
    file is there, the write buffer files hold what was not committed, as the page cache
    would after a SIGKILL)."""
    shutil.copytree(store.config.store_path_root_dir, to, ignore=shutil.ignore_patterns("lock"))
    return to


def test_a_killed_process_loses_no_buffered_record(open_store: StoreFactory, tmp_path: Path) -> None:
    store = pool_store(open_store)
    sent = put_mixed(store, 120)  # over several segments: rolls commit, the rest stays buffered
    assert store._log._wb_len > 0
    assert file_bytes(store, sent[-1][2], 8) == bytes(8)
    copy = crash_copy(store, tmp_path / "crashed")
    again = open_store(root=copy, transient_store_pool_enable=True)
    assert again.recovery is not None and again.recovery.abnormal
    assert again.max_offset == store.max_offset
    for m, q, p in sent:
        record = again.read_message(p)
        assert record is not None and record.body == m.body and record.queue_offset == q
    for topic in ("TopicA", "TopicB"):
        for queue_id in range(3):
            mine = [m.body for m, _q, _p in sent if m.topic == topic and m.queue_id == queue_id]
            got = again.get_messages(topic, queue_id, 0, 32, max_bytes=10**9)
            assert [r.body for r in got.messages] == mine[:32]
            assert again.max_queue_offset(topic, queue_id) == len(mine)
    assert again.put_message(msg(999)).ok


def test_buffer_files_of_another_size_are_replayed_and_resized(open_store: StoreFactory,
                                                                tmp_path: Path) -> None:
    """Buffer files left by a killed run whose buffers had another size (4 MiB before the
    buffers grew to WRITE_BUFFER_SIZE) are replayed all the same, then resized in place."""
    store = pool_store(open_store)
    results = [store.put_message(msg(i)) for i in range(5)]
    assert store._log._wb_len > 0
    copy = crash_copy(store, tmp_path / "crashed")
    for name in ("0", "1"):
        os.truncate(copy / "writebuffer" / name, 4 * 1024 * 1024)
    again = open_store(root=copy, transient_store_pool_enable=True)
    assert again.max_offset == results[-1].end_offset
    got = again.get_messages("TopicA", 0, 0, 32)
    assert [r.body for r in got.messages] == [msg(i).body for i in range(5)]
    for name in ("0", "1"):
        assert os.path.getsize(copy / "writebuffer" / name) == commitlog_module.WRITE_BUFFER_SIZE
    assert again.put_message(msg(5)).ok


def test_a_torn_record_in_the_buffer_is_not_replayed(open_store: StoreFactory, tmp_path: Path) -> None:
    store = pool_store(open_store)
    results = [store.put_message(msg(i)) for i in range(4)]
    copy = crash_copy(store, tmp_path / "crashed")
    # the last record as a kill in the middle of its append leaves it: MAGICCODE not yet set
    torn_at = results[3].physical_offsets[0] - results[0].physical_offsets[0]
    with open(copy / "writebuffer" / "0", "r+b") as f:
        os.pwrite(f.fileno(), bytes(4), torn_at + 4)
    again = open_store(root=copy, transient_store_pool_enable=True)
    assert again.max_offset == results[2].end_offset
    assert again.max_queue_offset("TopicA", 0) == 3


def test_truncated_records_are_never_replayed(open_store: StoreFactory, tmp_path: Path) -> None:
    store = pool_store(open_store)
    results = [store.put_message(msg(i)) for i in range(4)]
    store.truncate_dirty(results[1].end_offset)
    copy = crash_copy(store, tmp_path / "crashed")
    again = open_store(root=copy, transient_store_pool_enable=True)
    assert again.max_offset == results[1].end_offset
    assert again.max_queue_offset("TopicA", 0) == 2


def test_replayed_after_a_crash_even_with_the_buffer_switched_off(open_store: StoreFactory,
                                                                   tmp_path: Path) -> None:
    store = pool_store(open_store)
    results = [store.put_message(msg(i)) for i in range(3)]
    copy = crash_copy(store, tmp_path / "crashed")
    again = open_store(root=copy, transient_store_pool_enable=False)
    assert again.max_offset == results[-1].end_offset
    got = again.get_messages("TopicA", 0, 0, 32)
    assert [r.body for r in got.messages] == [msg(i).body for i in range(3)]


def test_single_puts_take_the_short_path_and_write_what_encode_record_makes(open_store: StoreFactory) -> None:
    """A single put whose record ends within the bound the last general-path append set
    (CommitLog._arm) skips the general path's checks and packs the record with one struct per
    record shape (made when a shape comes a second time; the first time the parts go in one by
    one). Across roll-overs, commits in between and shapes seen once, twice or often, every
    record is byte for byte what encode_record makes, and most puts took the short path."""
    store = pool_store(open_store)
    log = store._log
    sent = []
    short = 0
    for i in range(400):
        size = 100 if i % 3 else 37 + i  # (a shape met often, and shapes met once)
        m = msg(i, queue_id=i % 2, size=size, tags="t" if i % 5 == 0 else None)
        armed_until = log._fast_until
        result = store.put_message(m)
        assert result.ok, result
        short += result.end_offset <= armed_until
        sent.append((m, result))
        if i % 97 == 0:
            store.flush()  # (commits: the next put takes the general path and arms again)
    assert short > 300
    store.flush()
    for m, r in sent:
        expected = encode_record(m, queue_offset=r.queue_offsets[0], physical_offset=r.physical_offsets[0],
                                 store_timestamp=r.store_timestamp, store_host=store.store_host)
        assert file_bytes(store, r.physical_offsets[0], r.wrote_bytes) == expected
    for queue_id in (0, 1):
        bodies: list[bytes] = []
        while len(bodies) < 200:
            got = store.get_messages("TopicA", queue_id, len(bodies), 32)
            assert got.messages
            bodies += [x.body for x in got.messages]
        assert bodies == [m.body for m, _ in sent if m.queue_id == queue_id]

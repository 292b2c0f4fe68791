"""Start-up recovery: clean restart (no scan), crash restart (scan, truncate torn or corrupt tails,
rebuild consume queues), checkpoint handling, runtime truncation."""

from __future__ import annotations

import os
from pathlib import Path

from services.broker.storage.checkpoint import Checkpoint, CheckpointFile
from services.broker.storage.record import HEADER_SIZE
from services.broker.storage.status import GetMessageStatus, PutResult
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import CQ_FILE, SEGMENT, msg, small_config


def fill(store: MessageStore, n: int, queues: int = 2) -> list[PutResult]:
    results = [store.put_message(msg(i, queue_id=i % queues, size=150 + i % 50)) for i in range(n)]
    assert all(r.ok for r in results)
    return results


def bodies(store: MessageStore, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_queue_offset("TopicA", queue_id)
    while True:
        got = store.get_messages("TopicA", queue_id, offset, 32)
        if not got.found:
            return out
        out += [m.body for m in got.messages]
        offset = got.next_begin_offset


def expected(n: int, queue_id: int, queues: int = 2) -> list[bytes]:
    return [msg(i, queue_id=i % queues, size=150 + i % 50).body for i in range(n) if i % queues == queue_id]


def simulate_crash(root: Path, checkpoint: Checkpoint | None = None) -> None:
    """After a clean shutdown, make the directory look like the process died: the abort file is
    back and (optionally) the checkpoint is older."""
    (root / "abort").touch()
    if checkpoint is not None:
        cp = CheckpointFile(str(root / "checkpoint"))
        cp.save(checkpoint)
        cp.close()


def segment_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def test_clean_restart_trusts_the_checkpoint(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 300)
        end = store.max_offset
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and not info.abnormal and info.mode == "checkpoint"
        assert info.scanned_records == 0 and info.redispatched == 0 and info.commit_log_end == end
        assert bodies(store, 0) == expected(300, 0) and bodies(store, 1) == expected(300, 1)
        assert store.put_message(msg(300, queue_id=0)).queue_offsets == (150,)


def test_crash_restart_scans_from_the_checkpoint_segment(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 300)
        end = store.max_offset
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and info.abnormal and info.mode == "scan"
        assert info.scan_from == end - end % SEGMENT  # the segment holding the flushed offset
        assert info.scanned_records == sum(1 for r in results if r.physical_offsets[0] >= info.scan_from)
        assert info.commit_log_end == end and info.stop_reason == "end of data"
        assert bodies(store, 0) == expected(300, 0)
    assert not (tmp_path / "abort").exists()


def test_crash_with_stale_checkpoint_rebuilds_consume_queues(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 200)
        end = store.max_offset
    simulate_crash(tmp_path, Checkpoint())  # nothing known flushed: scan and re-dispatch everything
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and info.scan_from == 0 and info.scanned_records == 200
        assert info.reput_from == 0 and info.redispatched == 200 and info.commit_log_end == end
        assert bodies(store, 0) == expected(200, 0) and bodies(store, 1) == expected(200, 1)
        assert store.max_queue_offset("TopicA", 0) == 100


def test_corrupted_byte_ends_the_log(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 330)
        last_start = store.max_offset - store.max_offset % SEGMENT
        in_last = [(i, r) for i, r in enumerate(results) if r.physical_offsets[0] >= last_start]
        assert len(in_last) >= 5
        bad_index, bad = in_last[len(in_last) // 2]
        end = store.max_offset
    data = bytearray(segment_path(tmp_path, bad.physical_offsets[0]).read_bytes())
    data[bad.physical_offsets[0] - last_start + HEADER_SIZE + 5] ^= 0x5A  # a body byte
    segment_path(tmp_path, bad.physical_offsets[0]).write_bytes(data)
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and info.stop_reason == "body CRC mismatch"
        assert info.commit_log_end == store.max_offset == bad.physical_offsets[0] < end
        for q in (0, 1):
            assert bodies(store, q) == expected(bad_index, q)
            assert store.max_queue_offset("TopicA", q) == len(expected(bad_index, q))
        # the bad record and everything after it are gone from the file too
        after = segment_path(tmp_path, bad.physical_offsets[0]).read_bytes()
        assert not any(after[bad.physical_offsets[0] - last_start:])
        # new appends go where the bad record was
        again = store.put_message(msg(bad_index, queue_id=bad_index % 2, size=150 + bad_index % 50))
        assert again.physical_offsets == bad.physical_offsets and again.queue_offsets == bad.queue_offsets
    with MessageStore(config) as store:
        assert store.recovery is not None and store.recovery.mode == "checkpoint"
        assert bodies(store, bad_index % 2) == expected(bad_index + 1, bad_index % 2)


def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 100)
        last = results[-1]
    # the last record was only half written when the machine died
    path = segment_path(tmp_path, last.physical_offsets[0])
    data = bytearray(path.read_bytes())
    start = last.physical_offsets[0] % SEGMENT
    half = last.wrote_bytes // 2
    data[start + half:start + last.wrote_bytes] = bytes(last.wrote_bytes - half)
    path.write_bytes(data)
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        assert store.max_offset == last.physical_offsets[0]
        assert bodies(store, 0) == expected(99, 0) and bodies(store, 1) == expected(99, 1)
        assert store.get_messages("TopicA", 1, 49, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_garbage_after_the_end_is_zeroed(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 50)
        end = store.max_offset
    path = segment_path(tmp_path, end)
    data = bytearray(path.read_bytes())
    data[end % SEGMENT:end % SEGMENT + 700] = os.urandom(700)  # a partial write of unknown bytes
    path.write_bytes(data)
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        assert store.max_offset == end
        assert not any(path.read_bytes()[end % SEGMENT:])
        assert bodies(store, 0) == expected(50, 0)
        store.put_message(msg(50, queue_id=0, size=150))
    with MessageStore(config) as store:
        assert bodies(store, 0)[-1] == msg(50, queue_id=0, size=150).body


def test_torn_first_record_of_a_new_segment(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 200)
    segments = sorted(os.listdir(tmp_path / "commitlog"))
    last_start = int(segments[-1])
    first_in_last = next(i for i, r in enumerate(results) if r.physical_offsets[0] == last_start)
    data = bytearray((tmp_path / "commitlog" / segments[-1]).read_bytes())
    data[0:8] = bytes(8)  # the header of the first record never made it
    (tmp_path / "commitlog" / segments[-1]).write_bytes(data)
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        assert store.max_offset == last_start
        assert sorted(os.listdir(tmp_path / "commitlog")) == segments[:-1]
        assert bodies(store, 0) == expected(first_in_last, 0)
        assert store.put_message(msg(0)).physical_offsets == (last_start,)


def test_clean_start_with_a_bad_checkpoint_checks_the_last_segments(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 300)
        end = store.max_offset
    (tmp_path / "checkpoint").write_bytes(os.urandom(64))
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and not info.abnormal and info.mode == "scan"
        segments = sorted(os.listdir(tmp_path / "commitlog"))
        assert info.scan_from == int(segments[-3]) and info.commit_log_end == end
        assert bodies(store, 1) == expected(300, 1)


def test_checkpoint_behind_the_data_is_not_trusted(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 100)
        end = store.max_offset
    cp = CheckpointFile(str(tmp_path / "checkpoint"))
    cp.save(Checkpoint(physic_offset=end - 100, logics_offset=end - 100))  # claims less than is there
    cp.close()
    with MessageStore(config) as store:
        assert store.recovery is not None and store.recovery.mode == "scan"
        assert store.max_offset == end and bodies(store, 0) == expected(100, 0)


def test_truncate_dirty_at_runtime(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 120)
        cut = results[80].physical_offsets[0]
        store.truncate_dirty(cut)
        assert store.max_offset == cut and store.dispatched_offset == cut
        assert store.max_queue_offset("TopicA", 0) == 40 and store.max_queue_offset("TopicA", 1) == 40
        assert store.get_messages("TopicA", 0, 40, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert store.read_message(cut) is None
        redo = store.put_message(msg(80, queue_id=0, size=150 + 80 % 50))
        assert redo.physical_offsets == (cut,) and redo.queue_offsets == (40,)
    for abort in (False, True):
        if abort:
            simulate_crash(tmp_path)
        with MessageStore(config) as store:
            assert bodies(store, 0) == expected(81, 0) and bodies(store, 1) == expected(80, 1)


def test_truncate_dirty_to_an_earlier_segment(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        results = fill(store, 300)
        cut = results[10].physical_offsets[0]
        store.truncate_dirty(cut)
        assert sorted(os.listdir(tmp_path / "commitlog")) == [f"{0:020d}"]
        assert store.max_queue_offset("TopicA", 0) == 5
        assert bodies(store, 0) == expected(10, 0)
        fill(store, 30)
        assert store.max_queue_offset("TopicA", 0) == 20


def test_an_empty_segment_file_from_an_interrupted_creation_is_sized_not_fatal(tmp_path: Path) -> None:
    """SIGKILL between creating a segment file and sizing it leaves a 0-byte file (commit log or
    consume queue): the store starts, keeps every message and writes on."""
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 100)
        end = store.max_offset
    next_log = segment_path(tmp_path, end + SEGMENT)
    next_log.touch()
    queue_dir = tmp_path / "consumequeue" / "TopicA" / "0"
    last_queue_file = max(queue_dir.iterdir())
    empty_queue_file = queue_dir / f"{int(last_queue_file.name) + CQ_FILE:020d}"
    empty_queue_file.touch()
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        assert store.max_offset == end
        assert bodies(store, 0) == expected(100, 0) and bodies(store, 1) == expected(100, 1)
        assert not next_log.exists()  # past the log's end: removed by recovery
        assert os.path.getsize(empty_queue_file) == CQ_FILE
        more = [store.put_message(msg(i, queue_id=i % 2, size=150 + i % 50)) for i in range(100, 160)]
        assert all(r.ok for r in more)
        assert bodies(store, 0) == expected(160, 0)

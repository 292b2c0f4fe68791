"""Consume queues open on first use after a restart with a trusted checkpoint: they answer with
the same offsets and data as if opened at start, after a clean and a crash restart, and get
the truncations that happened before they were opened."""

from __future__ import annotations

from pathlib import Path

from services.broker.storage.checkpoint import Checkpoint
from services.broker.storage.status import GetMessageStatus
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import msg, small_config
from tests.unit.storage.test_recovery import simulate_crash

TOPICS = 6
QUEUES = 4


def fill(store: MessageStore, rounds: int) -> list[int]:
    """``rounds`` messages to every queue of every topic; the physical offset of each."""
    offsets = []
    for r in range(rounds):
        for t in range(TOPICS):
            for q in range(QUEUES):
                result = store.put_message(msg(r, topic=f"T{t}", queue_id=q, size=60))
                assert result.ok and result.queue_offsets == (r,)
                offsets.append(result.physical_offsets[0])
    return offsets


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_queue_offset(topic, queue_id)
    while True:
        got = store.get_messages(topic, queue_id, offset, 32)
        if not got.found:
            return out
        out += [m.body for m in got.messages]
        offset = got.next_begin_offset


def expected(topic: str, queue_id: int, n: int) -> list[bytes]:
    return [msg(r, topic=topic, queue_id=queue_id, size=60).body for r in range(n)]


def test_clean_restart_opens_queues_on_first_use(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 30)
    with MessageStore(config) as store:
        assert store.recovery is not None and store.recovery.mode == "checkpoint"
        assert store.unopened_queue_count == TOPICS * QUEUES
        # Listing topics does not open anything.
        assert store.topics() == {f"T{t}": list(range(QUEUES)) for t in range(TOPICS)}
        assert store.unopened_queue_count == TOPICS * QUEUES
        assert store.max_queue_offset("T0", 0) == 30 and store.min_queue_offset("T0", 0) == 0
        assert store.unopened_queue_count == TOPICS * QUEUES - 1
        assert bodies(store, "T1", 2) == expected("T1", 2, 30)
        # A send to an unopened queue continues its offsets.
        result = store.put_message(msg(30, topic="T2", queue_id=3, size=60))
        assert result.queue_offsets == (30,)
        assert store.unopened_queue_count == TOPICS * QUEUES - 3
        assert bodies(store, "T2", 3) == expected("T2", 3, 31)
    with MessageStore(config) as store:  # and once more, with the new message
        assert bodies(store, "T2", 3) == expected("T2", 3, 31)
        for t in range(TOPICS):
            for q in range(QUEUES):
                assert store.max_queue_offset(f"T{t}", q) == (31 if (t, q) == (2, 3) else 30)


def test_crash_restart_rebuilds_from_the_checkpoint_and_opens_lazily(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        offsets = fill(store, 30)
        end = store.max_offset
    # The last consume queue flush covered only the first 10 rounds: later entries are dropped
    # (in queues opened late too) and rebuilt from the commit log.
    safe = offsets[10 * TOPICS * QUEUES]
    simulate_crash(tmp_path, Checkpoint(physic_offset=end, logics_offset=safe))
    with MessageStore(config) as store:
        info = store.recovery
        assert info is not None and info.abnormal and info.reput_from == safe
        assert info.redispatched == 20 * TOPICS * QUEUES
        for t in range(TOPICS):
            for q in range(QUEUES):
                assert store.max_queue_offset(f"T{t}", q) == 30
                assert bodies(store, f"T{t}", q) == expected(f"T{t}", q, 30)


def test_truncation_reaches_queues_opened_later(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        offsets = fill(store, 20)
    with MessageStore(config) as store:
        unopened = store.unopened_queue_count
        assert unopened == TOPICS * QUEUES
        cut = offsets[12 * TOPICS * QUEUES]  # the first message of round 12
        store.truncate_dirty(cut)
        assert store.unopened_queue_count == unopened  # nothing opened by the truncation
        for t in range(TOPICS):
            for q in range(QUEUES):
                assert store.max_queue_offset(f"T{t}", q) == 12
                assert bodies(store, f"T{t}", q) == expected(f"T{t}", q, 12)
        got = store.get_messages("T0", 0, 12, 1)
        assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    simulate_crash(tmp_path)
    with MessageStore(config) as store:
        assert bodies(store, "T5", 3) == expected("T5", 3, 12)


def test_delete_topic_drops_unopened_queues(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        fill(store, 3)
    with MessageStore(config) as store:
        assert store.delete_topic("T1") == QUEUES
        assert "T1" not in store.topics()
        assert store.max_queue_offset("T1", 0) == 0
        assert not (tmp_path / "consumequeue" / "T1").exists()
    with MessageStore(config) as store:
        assert "T1" not in store.topics() and store.max_queue_offset("T0", 1) == 3


def test_a_consume_queue_file_holds_one_descriptor(tmp_path: Path) -> None:
    import os

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with MessageStore(small_config(tmp_path)) as store:
        store.put_message(msg(0, topic="warm"))
        before = open_fds()
        for q in range(60):
            assert store.put_message(msg(0, topic="Many", queue_id=q)).ok
        # One for each file's mapping; the file's own descriptor is not kept.
        assert open_fds() - before <= 60 + 2
        store.flush()
        assert bodies(store, "Many", 59) == [msg(0, topic="Many", queue_id=59).body]

"""kill -9 a process writing with SYNC_FLUSH; every acknowledged message must survive.

A child process (``crash_writer``) writes from four threads and prints each message after its
put returned PUT_OK. The parent SIGKILLs it mid-stream, reopens the store (recovery runs) and
checks every acknowledged message byte for byte, that the consume queues cover them, and that
everything the store serves is valid. Two rounds: the second child continues on the recovered
store and is killed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.broker.storage.config import FlushDiskType
from services.broker.storage.record import CheckKind, check_record
from services.broker.storage.store import MessageStore
from tests.integration.storage.crash_writer import QUEUES, TOPIC, config, message

REPO = Path(__file__).resolve().parents[3]


def run_and_kill(root: Path, first_index: int, run_for: float,
                 flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> dict[int, tuple[int, int, int]]:
    """Start a writer, SIGKILL it after ``run_for`` seconds of writing; returns the acknowledged
    messages: index -> (queue id, queue offset, physical offset)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               CRASH_FLUSH=flush.name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.storage.crash_writer", str(root), "20", str(first_index)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line == "READY\n":
                ready.set()
            elif line.endswith("\n"):  # a line cut by the kill was not fully acknowledged to us
                lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait(10)
                pytest.fail(f"writer did not start: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(run_for)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    assert proc.returncode == -signal.SIGKILL
    acked: dict[int, tuple[int, int, int]] = {}
    for line in lines:
        index, queue_id, queue_offset, physical_offset = map(int, line.split())
        acked[index] = (queue_id, queue_offset, physical_offset)
    return acked


def check_store(root: Path, acked: dict[int, tuple[int, int, int]],
                flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> None:
    store = MessageStore(config(str(root), flush))
    store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        # every acknowledged message is there, byte for byte, where the put said
        for index, (queue_id, queue_offset, physical_offset) in acked.items():
            expected = message(index)
            record = store.read_message(physical_offset)
            assert record is not None, f"acknowledged message {index} lost"
            assert (record.body, record.topic, record.queue_id, record.queue_offset) == (
                expected.body, TOPIC, queue_id, queue_offset)
            got = store.get_messages(TOPIC, queue_id, queue_offset, 1)
            assert got.found and got.messages[0].physical_offset == physical_offset
        for queue_id in range(QUEUES):
            mine = [q for qid, q, _ in acked.values() if qid == queue_id]
            assert store.max_queue_offset(TOPIC, queue_id) >= len(mine)
            if mine:
                assert store.max_queue_offset(TOPIC, queue_id) > max(mine)
            # everything the queue serves is a valid message (no garbage after the torn tail)
            offset = store.min_queue_offset(TOPIC, queue_id)
            while offset < store.max_queue_offset(TOPIC, queue_id):
                got = store.get_messages(TOPIC, queue_id, offset, 32)
                assert got.found, got.status
                assert [r.queue_offset for r in got.messages] == list(range(offset, got.next_begin_offset))
                for record in got.messages:
                    assert record.queue_id == queue_id
                    assert record.body == message(int(record.properties["UNIQ_KEY"])).body
                offset = got.next_begin_offset
        # the whole commit log validates record by record (magic, sizes, CRC) up to its end
        offset, end = store.min_offset, store.max_offset
        while offset < end:
            piece = store.get_data(offset, 1 << 30)
            assert piece is not None
            with piece:
                pos = 0
                while pos < piece.size:
                    check = check_record(piece.data, pos, piece.size - pos, expected_offset=offset + pos)
                    assert check.kind in (CheckKind.RECORD, CheckKind.BLANK), check
                    pos += check.size
                offset = piece.end_offset
    finally:
        store.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_acknowledged_messages_survive_kill_9(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acked = run_and_kill(root, 0, 1.5)
    assert len(acked) > 50, "the writer acknowledged too little to make the test meaningful"
    check_store(root, acked)
    # second life: recover, continue writing, get killed again
    more = run_and_kill(root, 1_000_000, 1.0)
    assert more
    acked.update(more)
    check_store(root, acked)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_async_flush_loses_nothing_written_when_the_process_is_killed(tmp_path: Path) -> None:
    """ASYNC_FLUSH appends go into the write buffer files; what was not yet committed to the
    commit log when the process died is appended by recovery: every acknowledged message is
    there (only a machine crash may lose unflushed ones)."""
    root = tmp_path / "store"
    acked = run_and_kill(root, 0, 1.5, FlushDiskType.ASYNC_FLUSH)
    assert len(acked) > 50, "the writer acknowledged too little to make the test meaningful"
    check_store(root, acked, FlushDiskType.ASYNC_FLUSH)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slave_killed_mid_dispatch_dispatches_every_record_once(tmp_path: Path) -> None:
    """A slave-like store copies a whole commit log, has dispatched about half of it when it is
    SIGKILLed; after recovery every record is in its consume queue exactly once, at its queue
    offset, as on the source."""
    source = tmp_path / "source"
    src = MessageStore(config(str(source)))
    src.start()
    sent: dict[int, tuple[int, int]] = {}  # index -> (queue id, queue offset)
    for index in range(600):
        result = src.put_message(message(index))
        assert result.ok
        sent[index] = (index % QUEUES, result.queue_offsets[0])
    src.shutdown()
    root = tmp_path / "replica"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.storage.crash_writer", "--replica", str(root), str(source)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "READY", proc.stderr.read() if proc.stderr else ""
        max_offset, dispatched = int(line[1]), int(line[2])
        assert 0 < dispatched < max_offset
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    store = MessageStore(config(str(root)))
    store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        assert store.max_offset == max_offset and store.dispatched_offset == max_offset
        assert store.recovery.redispatched > 0  # the lagging dispatch was finished by recovery
        seen: dict[int, tuple[int, int]] = {}
        for queue_id in range(QUEUES):
            assert store.min_queue_offset(TOPIC, queue_id) == 0
            count = sum(1 for q, _ in sent.values() if q == queue_id)
            assert store.max_queue_offset(TOPIC, queue_id) == count
            offset = 0
            while offset < store.max_queue_offset(TOPIC, queue_id):
                got = store.get_messages(TOPIC, queue_id, offset, 32)
                assert got.found, got.status
                for record in got.messages:
                    index = int(record.properties["UNIQ_KEY"])
                    assert index not in seen, f"message {index} dispatched twice"
                    seen[index] = (record.queue_id, record.queue_offset)
                    assert record.body == message(index).body
                offset = got.next_begin_offset
        assert seen == sent
    finally:
        store.shutdown()

"""The slave's receive thread (``services/broker/replication/direct.py``): frames read with
blocking calls, catch-up bodies straight into the dispatch ring. Real stores (segments large
enough for bulk frames), real loopback sockets; fake masters send frames cut up as a network
would."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from services.broker.replication import encode_heartbeat, encode_transfer_header
from services.broker.storage import replica
from services.broker.storage.config import StoreConfig
from services.broker.storage.reput import SCAN_BYTES
from services.broker.storage.store import MessageStore
from tests.unit.replication.test_ha_io import (
    FakeMaster,
    burst_master,
    fill,
    logs_identical,
    running_master,
    running_slave,
    slave_settings,
    transfer_frames,
    until,
)

pytestmark = pytest.mark.asyncio

SEGMENT = 4 * 1024 * 1024
MIB = 1024 * 1024
#: A catch-up's frame size (at least HAND_OVER_MIN: the event loop hands such a stream over).
FRAME = 320 * 1024


def make_store(path: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(path), mapped_file_size_commit_log=SEGMENT,
                                     max_message_size=4096))
    store.start()
    return store


@pytest.fixture
def big(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    """(master store, slave store) with 4 MiB segments: bulk frames fit in one."""
    stores = make_store(tmp_path / "master"), make_store(tmp_path / "slave")
    yield stores
    for store in stores:
        store.shutdown()


def spy_ring(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many views each :meth:`MessageStore.ring_space` gave (0: none, not in the ring)."""
    calls: list[int] = []
    real = store.ring_space

    def ring_space(start: int, size: int) -> list[memoryview] | None:
        views = real(start, size)
        calls.append(len(views) if views is not None else 0)
        return views

    monkeypatch.setattr(store, "ring_space", ring_space)
    return calls


def receiver_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "HASlaveReceiver"]


@pytest.mark.parametrize("handover", ["inside a header", "inside a body"])
async def test_frames_cut_anywhere_by_the_network_are_received_whole(
        big: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch, handover: str) -> None:
    """A first bulk read hands the stream to the receive thread wherever it ends (inside the
    next header, or inside a body); then headers and bodies arrive in pieces (a header cut in
    two, bodies in three): bulk bodies still go straight into the ring, the small frames at the
    end through the thread's buffer (the first of them hands the stream back), every ack covers
    only what is in the file, and the log is the master's byte for byte."""
    master_store, slave_store = big
    fill(master_store, 3500)  # ~3.8 MB, one segment
    end = master_store.max_offset
    frames = transfer_frames(master_store, FRAME)
    frames[-1:] = transfer_frames_from(master_store, frames, 3000)  # (the tail in small frames)
    cut = 7 if handover == "inside a header" else 12 + 5000
    stream = b"".join(frames)
    first = len(frames[0]) + len(frames[1]) + cut
    pieces = [stream[:first]]
    rest = stream[first:]
    at = len(frames[2]) - cut  # the rest of the third frame, then each frame in pieces
    pieces.append(rest[:at])
    for frame in frames[3:]:
        body = frame[12:]
        third = len(body) // 3
        pieces += [frame[:5], frame[5:12], body[:third], body[third:2 * third], body[2 * third:]]
    acks: list[tuple[int, int]] = []
    bursty = burst_master(pieces, 0.002, lambda ack: acks.append((ack, slave_store.max_offset)))
    ring = spy_ring(slave_store, monkeypatch)
    async with FakeMaster(bursty) as fake, running_slave(slave_store, slave_settings(fake.addr)) as slave:
        await until(lambda: any(ack == end for ack, _ in acks), 10.0, "the slave acked everything")
        sessions = (slave.reconnects, fake.connections)
    assert sessions == (0, 1)
    assert ring.count(1) >= 8  # the bulk frames after the first read: in place
    assert all(ack <= in_file for ack, in_file in acks)
    assert [ack for ack, _ in acks] == sorted(ack for ack, _ in acks)
    assert logs_identical(master_store, slave_store)
    assert slave_store.wait_dispatched(end, 5), slave_store.dispatch_error


def transfer_frames_from(store: MessageStore, frames: list[bytes], size: int) -> list[bytes]:
    """The last of ``frames`` again as frames of at most ``size`` bytes."""
    last = frames[-1]
    offset = int.from_bytes(last[:8], "big")
    out: list[bytes] = []
    while offset < store.max_offset:
        with store.get_data(offset, size) as piece:  # type: ignore[union-attr]
            out.append(encode_transfer_header(offset, piece.size) + bytes(piece.data))
            offset = piece.end_offset
    return out


async def test_a_catch_up_wraps_the_ring_and_crosses_segments(
        big: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A real master's 1 MiB catch-up frames through a ring of 4.75 MiB: the frame at 9 MiB
    goes across the ring's end (received in two pieces), a frame at a new segment goes through
    the buffer (and is copied into the ring); everything is the master's, and dispatched."""
    monkeypatch.setattr(replica, "DISPATCH_RING", SCAN_BYTES + 11 * MIB // 4)
    master_store, slave_store = big
    fill(master_store, 10000)  # ~10.9 MB: three segments
    end = master_store.max_offset
    ring = spy_ring(slave_store, monkeypatch)
    settings = slave_settings("", segment_size=SEGMENT)
    async with running_master(master_store, sync_from_earliest=True, segment_size=SEGMENT) as master:
        addr = f"127.0.0.1:{master.port}"
        async with running_slave(slave_store, replace(settings, master_address_override=addr)) as slave:
            await until(lambda: slave_store.max_offset == end, 10.0, "the slave has everything")
            reconnects = slave.reconnects
    assert reconnects == 0
    assert 2 in ring  # a frame across the ring's end
    assert 0 in ring  # the frames starting a segment
    assert ring.count(1) >= 4
    assert logs_identical(master_store, slave_store)
    assert slave_store.wait_dispatched(end, 5), slave_store.dispatch_error


@pytest.mark.parametrize("bad", ["gap", "too large"])
async def test_a_bad_frame_closes_the_connection_with_a_log_line_and_keeps_what_came_before(
        big: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    master_store, slave_store = big
    ring = spy_ring(slave_store, monkeypatch)
    fill(master_store, 1200)
    frames = transfer_frames(master_store, FRAME)
    good = b"".join(frames[:2])
    good_end = int.from_bytes(frames[2][:8], "big") + len(frames[2]) - 12
    if bad == "gap":  # a frame that does not start where the log ends
        wrong = encode_transfer_header(good_end + 1088, 100) + bytes(100)
    else:  # larger than any slave accepts
        wrong = encode_transfer_header(good_end, 64 * MIB)
    requests: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(int.from_bytes(await reader.readexactly(8), "big"))
        if len(requests) == 1:  # a bulk read (the thread takes over), a frame, the wrong one
            for burst in (good, frames[2], wrong):
                writer.write(burst)
                await writer.drain()
                await asyncio.sleep(0.05)
        else:
            writer.write(encode_heartbeat(requests[-1]))
        await writer.drain()
        with contextlib.suppress(Exception):
            while await reader.read(8):
                pass

    with caplog.at_level(logging.WARNING):
        async with FakeMaster(serve) as fake, running_slave(slave_store, slave_settings(fake.addr)):
            await until(lambda: len(requests) >= 2, 5.0, "the slave reconnected")
    assert requests[:2] == [0, good_end]  # the good frames kept, asked again from there
    assert slave_store.max_offset == good_end
    ended = [r for r in caplog.records if r.getMessage() == "replication session ended"]
    kind = "ContinuityError" if bad == "gap" else "FrameTooLargeError"
    assert any(getattr(r, "kind", "") == kind for r in ended), [r.__dict__ for r in ended]
    assert 1 in ring  # the third frame went into the ring: the thread read the wrong header
    assert bytes(slave_store.get_data(0, good_end).data) == b"".join(f[12:] for f in frames[:3])  # type: ignore[union-attr]


async def test_stop_during_a_catch_up_ends_the_receive_thread_at_once(
        big: tuple[MessageStore, MessageStore]) -> None:
    """A stop while the thread waits in the middle of a 1 MiB body: it returns promptly, the
    thread is gone, and the log holds the master's bytes up to where they stopped coming (the
    event loop's first bulk read appends whatever part of a frame it holds)."""
    master_store, slave_store = big
    fill(master_store, 3000)
    frames = transfer_frames(master_store, MIB)
    whole = frames[0]
    first_end = len(whole) - 12
    stalled = frames[1][:12 + 300 * 1024]  # then nothing more, the connection open
    sent = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)
        writer.write(whole + stalled)
        await writer.drain()
        sent.set()
        with contextlib.suppress(Exception):
            while await reader.read(8):
                pass

    async with FakeMaster(serve) as fake, running_slave(slave_store, slave_settings(fake.addr)) as slave:
        await until(lambda: slave_store.max_offset >= first_end, 5.0, "the first frame is in")
        await sent.wait()
        await until(lambda: receiver_threads(), 2.0, "the receive thread runs")
        started = time.monotonic()
        await slave.stop()
        took = time.monotonic() - started
    assert took < 2.0
    await until(lambda: not receiver_threads(), 2.0, "the receive thread ended")
    held = slave_store.max_offset
    assert first_end <= held < first_end + 300 * 1024
    data = slave_store.get_data(0, held)
    assert data is not None and data.size == held
    with data:
        assert bytes(data.data) == whole[12:] + stalled[12:][:held - first_end]


async def test_a_steady_stream_of_small_frames_stays_on_the_event_loop(
        big: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """Bulk reads of haTransferBatchSize frames (a SYNC_MASTER's busy stream) are appended and
    acked on the event loop: no receive thread, no ring reservation."""
    master_store, slave_store = big
    fill(master_store, 1500)
    end = master_store.max_offset
    frames = transfer_frames(master_store, 32 * 1024)
    bursts = [b"".join(frames[i:i + 16]) for i in range(0, len(frames), 16)]  # 512 KiB reads
    acks: list[int] = []
    seen: list[int] = []
    ring = spy_ring(slave_store, monkeypatch)
    bursty = burst_master(bursts, 0.01, acks.append)
    async with FakeMaster(bursty) as fake, running_slave(slave_store, slave_settings(fake.addr)):
        await until(lambda: seen.append(len(receiver_threads())) or end in acks, 5.0, "all acked")
    assert ring == [] and not any(seen)
    assert logs_identical(master_store, slave_store)

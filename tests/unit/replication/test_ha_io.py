"""The replication I/O layers (master.py / slave.py) in one process: real MessageStores with
small segments, real loopback sockets, short intervals.  Fake peers (raw sockets) play bogus
slaves and masters."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from services.broker.replication import (
    TRANSFER_HEADER_SIZE,
    SlaveConnectionProtocol,
    encode_ack,
    encode_heartbeat,
    encode_transfer_header,
)
from services.broker.replication import receive as receive_module
from services.broker.replication.master import HAMaster
from services.broker.replication.master_settings import MasterSettings
from services.broker.replication.slave import HASlave, SlaveSettings, is_record_boundary
from services.broker.storage.config import StoreConfig
from services.broker.storage.record import Message
from services.broker.storage.segment import Segment
from services.broker.storage.status import PutMessageStatus
from services.broker.storage.store import MessageStore
from tests.support import async_wait_until

pytestmark = pytest.mark.asyncio

SEGMENT = 64 * 1024
BODY = 1000  # records of 1,088 bytes with the topic "t" and no properties


def make_store(path: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(path), mapped_file_size_commit_log=SEGMENT,
                                     max_message_size=4096))
    store.start()
    return store


def fill(store: MessageStore, count: int, body: bytes = b"") -> None:
    for i in range(count):
        payload = body or i.to_bytes(4, "big") * (BODY // 4)
        assert store.append_message(Message("t", payload, i % 2)).stored


def master_settings(**kw: object) -> MasterSettings:
    base: dict[str, object] = dict(host="127.0.0.1", port=0, batch_size=4096, segment_size=SEGMENT,
                                   heartbeat_interval_s=0.2, housekeeping_interval_s=1.0,
                                   fall_behind_max=256 * 1024 * 1024)
    base.update(kw)
    return MasterSettings(**base)  # type: ignore[arg-type]


def slave_settings(addr: str, tmp: Path | None = None, **kw: object) -> SlaveSettings:
    base: dict[str, object] = dict(master_address_override=addr, heartbeat_interval_s=0.2,
                                   housekeeping_interval_s=1.0, segment_size=SEGMENT,
                                   backoff_min_s=0.02, backoff_max_s=0.2,
                                   diverged_dir=str(tmp / "diverged") if tmp else "")
    base.update(kw)
    return SlaveSettings(**base)  # type: ignore[arg-type]


async def until(predicate: Callable[[], object], limit: float = 5.0, what: str = "") -> None:
    await async_wait_until(predicate, limit, what, interval=0.01)


def logs_identical(a: MessageStore, b: MessageStore, start: int = 0) -> bool:
    """The commit log bytes of a and b are equal from ``start`` to a's max offset."""
    if a.max_offset != b.max_offset:
        return False
    offset = start
    while offset < a.max_offset:
        x = a.get_data(offset, a.max_offset - offset)
        y = b.get_data(offset, a.max_offset - offset)
        assert x is not None and y is not None
        with x, y:
            n = min(x.size, y.size)
            if bytes(x.data[:n]) != bytes(y.data[:n]):
                return False
            offset += n
    return True


def transfer_frames(store: MessageStore, size: int) -> list[bytes]:
    """``store``'s whole commit log as a master would send it: frames of at most ``size``
    bytes, none crossing a segment."""
    frames: list[bytes] = []
    offset = store.min_offset
    while offset < store.max_offset:
        with store.get_data(offset, size) as piece:  # type: ignore[union-attr]
            frames.append(encode_transfer_header(offset, piece.size) + bytes(piece.data))
            offset = piece.end_offset
    return frames


@contextlib.asynccontextmanager
async def running_master(store: MessageStore, **kw: object) -> AsyncIterator[HAMaster]:
    master = HAMaster(store, master_settings(**kw))
    await master.start()
    try:
        yield master
    finally:
        await master.stop()


@contextlib.asynccontextmanager
async def running_slave(store: MessageStore, settings: SlaveSettings) -> AsyncIterator[HASlave]:
    slave = HASlave(store, settings)
    await slave.start()
    try:
        yield slave
    finally:
        await slave.stop()


class FakeSlave:
    """A raw client of the HA port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.proto = SlaveConnectionProtocol(0, check_heartbeats=False)

    @classmethod
    async def connect(cls, port: int) -> FakeSlave:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_peer(self, limit: float = 3.0) -> bool:
        """Read until EOF; True if the peer closed within ``limit`` seconds."""
        try:
            async with asyncio.timeout(limit):
                while await self.reader.read(65536):
                    pass
            return True
        except (TimeoutError, ConnectionError):
            return False

    def close(self) -> None:
        self.writer.close()


# ------------------------------------------------------------------------------------ catch-up


async def test_empty_slave_catches_up_from_the_earliest_offset_byte_for_byte(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    fill(master_store, 250)  # ~270 KB: five segments
    assert master_store.max_offset > 4 * SEGMENT
    async with running_master(master_store, sync_from_earliest=True) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")) as slave:
        await until(lambda: slave_store.max_offset == master_store.max_offset, what="caught up")
        await until(lambda: master.tracker.push2slave_max_offset == master_store.max_offset,
                    what="acknowledged")
        assert slave.connected and slave.reconnects == 0
    assert logs_identical(master_store, slave_store)
    # Replicated records are dispatched (by the reput thread, behind the ack): consumers can
    # read them from the slave.
    assert await asyncio.to_thread(slave_store.wait_dispatched, master_store.max_offset, 10)
    got = slave_store.get_messages("t", 1, 0, 32)
    assert [m.body for m in got.messages][:2] == [(2 * i + 1).to_bytes(4, "big") * 250 for i in range(2)]
    assert slave_store.max_queue_offset("t", 0) == master_store.max_queue_offset("t", 0) == 125


async def test_empty_slave_starts_at_the_masters_last_segment_by_default(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    fill(master_store, 250)
    last_segment = master_store.max_offset - master_store.max_offset % SEGMENT
    async with running_master(master_store) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")):
        await until(lambda: slave_store.max_offset == master_store.max_offset)
    assert slave_store.min_offset == last_segment
    assert logs_identical(master_store, slave_store, start=last_segment)


async def test_live_appends_stream_and_a_restarted_slave_resumes_without_gap(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    async with running_master(master_store, sync_from_earliest=True) as master:
        settings = slave_settings(f"127.0.0.1:{master.port}")
        async with running_slave(slave_store, settings):
            for _ in range(5):
                fill(master_store, 20)
                await asyncio.sleep(0.01)
            await until(lambda: slave_store.max_offset == master_store.max_offset)
        stopped_at = slave_store.max_offset
        fill(master_store, 100)  # written while no slave is connected
        async with running_slave(slave_store, settings):
            await until(lambda: slave_store.max_offset == master_store.max_offset)
            fill(master_store, 30)
            await until(lambda: slave_store.max_offset == master_store.max_offset)
        conn_requests = stopped_at
    assert conn_requests > 0
    assert logs_identical(master_store, slave_store)
    assert await asyncio.to_thread(slave_store.wait_dispatched, master_store.max_offset, 10)
    assert slave_store.max_queue_offset("t", 0) == master_store.max_queue_offset("t", 0)


# ------------------------------------------------------------------------------------ SYNC_MASTER


async def test_wait_replicated_statuses(stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    async with running_master(master_store) as master:
        fill(master_store, 1)
        started = time.monotonic()
        status = await master.wait_replicated(master_store.max_offset, 10.0)
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert time.monotonic() - started < 2.0  # no slave: at once, not after the 10 s timeout
        async with running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")):
            await until(lambda: len(master.tracker) == 1)
            fill(master_store, 3)
            # Many concurrent sends, one ack releases them all.
            ends = [master_store.max_offset - 1000, master_store.max_offset]
            results = await asyncio.gather(*(master.wait_replicated(e, 2.0) for e in ends * 20))
            assert set(results) == {PutMessageStatus.PUT_OK}
            assert master.waiter.pending == 0


async def test_flush_slave_timeout_when_the_slave_stops_acking(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    async with running_master(master_store, housekeeping_interval_s=10.0) as master:
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(0))  # request offset 0, then silence
        await until(lambda: len(master.tracker) == 1)
        fill(master_store, 2)
        started = time.monotonic()
        status = await master.wait_replicated(master_store.max_offset, 0.3)
        elapsed = time.monotonic() - started
        assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert 0.29 <= elapsed < 2.0  # a real deadline (the silent slave is only dropped after 10 s)
        fake.close()


async def test_a_slave_too_far_behind_is_not_available(stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    fill(master_store, 10)
    async with running_master(master_store, fall_behind_max=5000) as master:
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(0))
        await until(lambda: len(master.tracker) == 1)
        end = master_store.max_offset
        assert await master.wait_replicated(end, 1.0) is PutMessageStatus.SLAVE_NOT_AVAILABLE
        await fake.send(encode_ack(end - 3000))  # within reach now (and it has been sent)
        await until(lambda: master.tracker.ack_offset(next(iter(master.connections))) == end - 3000)
        fill(master_store, 1)
        status = await master.wait_replicated(master_store.max_offset, 0.1)
        assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        fake.close()


# ------------------------------------------------------------------------------------ bogus peers


async def test_an_ack_beyond_the_max_offset_closes_the_connection_and_changes_nothing(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 5)
    async with running_master(master_store, sync_from_earliest=True) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")):
        await until(lambda: master.tracker.push2slave_max_offset == master_store.max_offset)
        before = master.tracker.push2slave_max_offset
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(0))
        await fake.send(encode_ack(master_store.max_offset + 10_000))
        with caplog.at_level(logging.WARNING):
            assert await fake.closed_by_peer()
        assert master.tracker.push2slave_max_offset == before
        assert any("beyond the master's max offset" in getattr(r, "error", "") for r in caplog.records)
        # The real slave is still served.
        fill(master_store, 2)
        await until(lambda: slave_store.max_offset == master_store.max_offset)
        assert await master.wait_replicated(master_store.max_offset, 1.0) is PutMessageStatus.PUT_OK


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\xff" * 64,
    struct.pack(">q", -5),
])
async def test_garbage_closes_only_that_connection(
        stores: tuple[MessageStore, MessageStore], garbage: bytes) -> None:
    master_store, slave_store = stores
    fill(master_store, 3)
    async with running_master(master_store, sync_from_earliest=True) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")) as slave:
        # the slave's ack of the whole log has reached the master (not just its append): no ack is
        # in flight that could move push2SlaveMaxOffset while the garbage is handled
        end = master_store.max_offset
        assert await master.waiter.wait(end, 5.0), "the slave's ack of the whole log reached the master"
        push2 = master.tracker.push2slave_max_offset
        assert push2 == end
        fake = await FakeSlave.connect(master.port)
        await fake.send(garbage)
        assert await fake.closed_by_peer()
        assert master.tracker.push2slave_max_offset == push2
        assert len(master.connections) == 1 and slave.reconnects == 0
        fill(master_store, 2)
        await until(lambda: slave_store.max_offset == master_store.max_offset)


async def test_master_heartbeats_when_idle_and_expires_a_silent_slave(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    fill(master_store, 2)
    end = master_store.max_offset
    async with running_master(master_store, heartbeat_interval_s=0.1, housekeeping_interval_s=0.5) as master:
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(end))  # up to date: nothing to send, so heartbeats
        header = await asyncio.wait_for(fake.reader.readexactly(TRANSFER_HEADER_SIZE), 1.0)
        assert header == encode_heartbeat(end)
        started = time.monotonic()
        assert await fake.closed_by_peer(2.0)  # never acked again: housekeeping closes it
        assert time.monotonic() - started < 1.0
        await until(lambda: not master.connections)


async def test_a_slave_that_stops_reading_is_expired_even_while_the_master_is_blocked_writing(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    fill(master_store, 12_000)  # ~13 MB: more than the socket buffers hold
    async with running_master(master_store, sync_from_earliest=True, housekeeping_interval_s=0.5) as master:
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(0))  # then neither reads nor acks
        await until(lambda: master.connections, 2.0)
        conn = next(iter(master.connections.values()))
        await until(lambda: not master.connections, 3.0, "expired by housekeeping")
        assert 0 < conn.transferred_bytes < master_store.max_offset  # the writer was blocked
        assert "haHousekeepingInterval" in conn.close_reason
        fake.close()


async def test_a_connection_that_never_sends_its_offset_is_closed(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    async with running_master(master_store, housekeeping_interval_s=0.3) as master:
        fake = await FakeSlave.connect(master.port)
        assert await fake.closed_by_peer(2.0)
        assert not master.connections


# ------------------------------------------------------------------------------------ slave side


class FakeMaster:
    """A listening socket whose connections are handled by ``handler``."""

    def __init__(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeMaster:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)  # type: ignore[misc]
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"



def burst_master(bursts: list[bytes], gap_s: float, on_ack: Callable[[int], None] | None = None,
                 ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A fake master's session: takes the request offset, writes each burst with ``gap_s``
    after it (one slave read each), then hands every ack to ``on_ack`` (or just reads on)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)
        for burst in bursts:
            writer.write(burst)
            await writer.drain()
            await asyncio.sleep(gap_s)
        with contextlib.suppress(Exception):
            while True:
                ack = await reader.readexactly(8)
                if on_ack is not None:
                    on_ack(struct.unpack(">q", ack)[0])
    return serve

async def test_slave_heartbeats_and_reconnects_when_the_master_is_silent(
        stores: tuple[MessageStore, MessageStore]) -> None:
    _, slave_store = stores
    acks: list[int] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                acks.append(struct.unpack(">q", await reader.readexactly(8))[0])

    async with FakeMaster(silent) as fake:
        settings = slave_settings(fake.addr, heartbeat_interval_s=0.05, housekeeping_interval_s=0.3)
        async with running_slave(slave_store, settings) as slave:
            await until(lambda: fake.connections >= 2, 3.0, "reconnect after housekeeping")
            assert slave.reconnects >= 1
            assert len(acks) >= 4 and set(acks) == {0}  # request + heartbeats


async def test_slave_closes_on_a_continuity_error_and_keeps_its_log(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 3)
    data = master_store.get_data(0, master_store.max_offset)
    assert data is not None
    with data:
        payload = bytes(data.data)
    fill(slave_store, 1)
    slave_max = slave_store.max_offset

    async def skipping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)
        writer.write(encode_transfer_header(slave_max + 100, 100) + payload[:100])  # a gap
        await writer.drain()
        with contextlib.suppress(Exception):
            await reader.read()

    async with FakeMaster(skipping) as fake:
        with caplog.at_level(logging.WARNING):
            async with running_slave(slave_store, slave_settings(fake.addr)) as slave:
                await until(lambda: slave.reconnects >= 2, 3.0)
        assert slave_store.max_offset == slave_max
        assert "continuity error" in caplog.text


async def test_slave_ahead_of_the_master_is_truncated_back_and_resumes(
        stores: tuple[MessageStore, MessageStore], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 40)
    fill(slave_store, 40)  # same sizes and payloads, written by another broker: same record layout
    fill(slave_store, 10, body=b"diverged" * 125)
    master_end, slave_end = master_store.max_offset, slave_store.max_offset
    assert is_record_boundary(slave_store, master_end, SEGMENT)
    assert not is_record_boundary(slave_store, master_end + 7, SEGMENT)
    async with running_master(master_store) as master:
        with caplog.at_level(logging.WARNING):
            settings = slave_settings(f"127.0.0.1:{master.port}", tmp_path)
            async with running_slave(slave_store, settings) as slave:
                await until(lambda: slave.repairs == 1, 5.0, "repair")
                await until(lambda: len(master.tracker) == 1)
                fill(master_store, 5)
                await until(lambda: slave_store.max_offset == master_store.max_offset)
    assert "DIVERGED" in caplog.text
    saved = tmp_path / "diverged" / f"{master_end:020d}-{slave_end:020d}.bin"
    assert saved.stat().st_size == slave_end - master_end
    assert await asyncio.to_thread(slave_store.wait_dispatched, master_store.max_offset, 10)
    assert slave_store.max_queue_offset("t", 0) == master_store.max_queue_offset("t", 0)
    # Equal from the master's end on (the slave's own first 40 records differ in timestamps).
    assert logs_identical(master_store, slave_store, start=master_end)


async def test_slave_ahead_of_an_empty_master_is_not_truncated(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(slave_store, 5)
    before = slave_store.max_offset
    async with running_master(master_store) as master:
        with caplog.at_level(logging.ERROR):
            async with running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")) as slave:
                await until(lambda: slave.reconnects >= 2, 3.0)
    assert slave_store.max_offset == before and slave.repairs == 0
    assert "NOT truncating" in caplog.text


async def test_a_slave_older_than_the_masters_retained_log_is_told_and_left_alone(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 250)
    master_store.flush()
    assert master_store.delete_expired(now=2**62) >= 1  # the oldest segments are gone
    assert master_store.min_offset > 0
    fill(slave_store, 1)
    before = slave_store.max_offset
    async with running_master(master_store) as master:
        with caplog.at_level(logging.WARNING):
            async with running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")) as slave:
                await until(lambda: slave.reconnects >= 2, 3.0)
    assert slave_store.max_offset == before
    assert "must be rebuilt" in caplog.text  # both sides say so


async def test_slave_follows_a_new_master_address(stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    fill(master_store, 3)
    async with running_master(master_store, sync_from_earliest=True) as master:
        slave = HASlave(slave_store, slave_settings(""))
        await slave.start()
        try:
            await asyncio.sleep(0.05)
            assert not slave.connected
            slave.set_master(f"127.0.0.1:{master.port}")
            await until(lambda: slave_store.max_offset == master_store.max_offset)
            other = socket.socket()
            other.bind(("127.0.0.1", 0))
            other.listen(1)
            try:
                slave.set_master(f"127.0.0.1:{other.getsockname()[1]}")  # routes changed
                await until(lambda: not master.connections, 3.0, "old master connection closed")
            finally:
                other.close()
        finally:
            await slave.stop()


async def test_is_record_boundary(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s")
    try:
        fill(store, 3)
        size = store.max_offset // 3
        assert is_record_boundary(store, 0, SEGMENT)
        assert is_record_boundary(store, size, SEGMENT)
        assert is_record_boundary(store, store.max_offset, SEGMENT)
        assert not is_record_boundary(store, size + 1, SEGMENT)
        assert not is_record_boundary(store, store.max_offset + 1, SEGMENT)
    finally:
        store.shutdown()


async def test_a_read_without_data_while_a_large_append_runs_does_not_reuse_its_buffer(
        stores: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A large read is appended on the writer thread while the slave reads on; a read that
    holds only a heartbeat in between must not make the next read land in the buffer the
    writer is still appending from."""
    master_store, slave_store = stores
    fill(master_store, 200)
    end = master_store.max_offset
    assert end > 3 * SEGMENT
    chunks = transfer_frames(master_store, 16 * 1024)
    half = len(chunks) // 2
    cut = sum(len(c) - TRANSFER_HEADER_SIZE for c in chunks[:half])

    # One read of > 64 KiB (appended on the writer thread), a read with no data, then the rest
    # (arrives while the first append still runs).
    bursty = burst_master([b"".join(chunks[:half]), encode_heartbeat(cut), b"".join(chunks[half:])], 0.05)

    real_append = slave_store.queue_data
    slowed: list[int] = []

    def slow_first_append(start: int, pieces: object) -> concurrent.futures.Future[int]:
        if not slowed:
            slowed.append(start)
            time.sleep(0.3)
        return real_append(start, pieces)  # type: ignore[arg-type]

    monkeypatch.setattr(slave_store, "queue_data", slow_first_append)
    async with FakeMaster(bursty) as fake, \
            running_slave(slave_store, slave_settings(fake.addr, receive_thread=False)) as slave:
        await until(lambda: slave_store.max_offset == end, 5.0, "the slave has everything")
        sessions = (slave.reconnects, fake.connections)
    assert sessions == (0, 1)  # one session: a damaged append would have ended it (CRC check)
    assert logs_identical(master_store, slave_store)
    assert slave_store.wait_dispatched(end, 5), slave_store.dispatch_error


async def test_large_appends_queue_up_while_the_disk_is_slow_and_each_is_acked(
        stores: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """While the writer thread is held up by one append, the next reads go on into the free
    buffers and their appends queue up behind it (the writer thread goes from one to the next
    without waiting for the event loop); once every buffer waits, reading stops until one is
    free."""
    master_store, slave_store = stores
    fill(master_store, 600)
    end = master_store.max_offset
    chunks = transfer_frames(master_store, 16 * 1024)
    bursts = [b"".join(chunks[i:i + 5]) for i in range(0, len(chunks), 5)]  # > 64 KiB each
    assert len(bursts) >= 7 and all(len(b) >= 64 * 1024 for b in bursts[:-1])
    acks: list[int] = []

    bursty = burst_master(bursts, 0.05, acks.append)

    real_append = slave_store.queue_data
    queued_behind_first: list[int] = []
    executor = concurrent.futures.ThreadPoolExecutor(1)
    submitted: list[int] = []

    class Counting:
        def submit(self, fn: Callable[..., int], *args: object) -> concurrent.futures.Future[int]:
            submitted.append(1)
            return executor.submit(fn, *args)

    def slow_first_append(start: int, pieces: object) -> concurrent.futures.Future[int]:
        if not queued_behind_first:
            time.sleep(0.8)  # every burst but the last few arrives meanwhile
            queued_behind_first.append(len(submitted) - 1)
        return real_append(start, pieces)  # type: ignore[arg-type]

    monkeypatch.setattr(slave_store, "queue_data", slow_first_append)
    try:
        async with FakeMaster(bursty) as fake, \
                running_slave(slave_store, slave_settings(fake.addr, receive_thread=False)) as slave:
            monkeypatch.setattr(slave, "_writer", Counting)
            await until(lambda: end in acks, 5.0, "the slave acked everything")
            sessions = (slave.reconnects, fake.connections)
    finally:
        executor.shutdown()
    assert queued_behind_first == [3]  # four buffers: one being appended, three queued, then no more reads
    assert sessions == (0, 1)
    assert acks == sorted(acks) and acks[-1] == end
    assert logs_identical(master_store, slave_store)
    assert slave_store.wait_dispatched(end, 5), slave_store.dispatch_error


async def test_the_disk_writes_one_read_while_the_next_is_taken_and_acks_wait_for_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """During a catch-up the write thread writes one read's bytes while the writer thread
    takes the next ones (their buffers are free again before the disk is done), and an ack
    never goes ahead of the bytes in the slave's file."""
    config = dict(mapped_file_size_commit_log=1024 * 1024, max_message_size=4096)
    master_store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "master"), **config))  # type: ignore[arg-type]
    slave_store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "slave"), **config))  # type: ignore[arg-type]
    for store in (master_store, slave_store):
        store.start()
    try:
        fill(master_store, 800)
        end = master_store.max_offset
        assert end < 1024 * 1024
        chunks = transfer_frames(master_store, 16 * 1024)
        bursts = [b"".join(chunks[i:i + 8]) for i in range(0, len(chunks), 8)]  # > 64 KiB each
        acks: list[tuple[int, int]] = []

        bursty = burst_master(bursts, 0.02, lambda ack: acks.append((ack, slave_store.max_offset)))

        taken_meanwhile: list[int] = []
        real_queue = slave_store.queue_data
        taken: list[int] = []

        def counting_queue(start: int, pieces: object) -> concurrent.futures.Future[int]:
            taken.append(start)
            return real_queue(start, pieces)  # type: ignore[arg-type]

        real_write_at = Segment.write_at

        def slow_first_write(seg: Segment, pos: int, views: object, stage: object = None, *,
                             aligned: bool = False) -> int:
            if threading.current_thread().name.startswith("CommitLogWriter") and not taken_meanwhile:
                first = len(taken)
                time.sleep(0.5)  # the next bursts arrive meanwhile
                taken_meanwhile.append(len(taken) - first)
            return real_write_at(seg, pos, views, stage, aligned=aligned)  # type: ignore[arg-type]

        monkeypatch.setattr(slave_store, "queue_data", counting_queue)
        monkeypatch.setattr(Segment, "write_at", slow_first_write)
        async with FakeMaster(bursty) as fake, \
                running_slave(slave_store, slave_settings(fake.addr, receive_thread=False)) as slave:
            await until(lambda: any(ack == end for ack, _ in acks), 5.0, "the slave acked everything")
            sessions = (slave.reconnects, fake.connections)
        assert sessions == (0, 1)
        assert taken_meanwhile and taken_meanwhile[0] >= 4  # more reads than buffers meanwhile
        assert all(ack <= in_file for ack, in_file in acks)
        assert [ack for ack, _ in acks] == sorted(ack for ack, _ in acks)
        assert logs_identical(master_store, slave_store)
        assert slave_store.wait_dispatched(end, 5), slave_store.dispatch_error
    finally:
        for store in (master_store, slave_store):
            store.shutdown()


async def test_a_failing_queued_append_ends_the_session_and_is_reported_once(
        stores: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An append on the writer thread that raises ends the session (logged with its reason);
    the slave reconnects from its own max offset and gets everything; asyncio has no unread
    exception of it to complain about."""
    master_store, slave_store = stores
    fill(master_store, 300)
    end = master_store.max_offset
    real_append = slave_store.queue_data
    failed: list[int] = []

    def fail_once(start: int, pieces: object) -> concurrent.futures.Future[int]:
        if not failed:
            assert threading.current_thread().name.startswith("HASlaveWriter")
            failed.append(start)
            raise OSError(5, "Input/output error")
        return real_append(start, pieces)  # type: ignore[arg-type]

    monkeypatch.setattr(slave_store, "queue_data", fail_once)
    monkeypatch.setattr(receive_module, "_THREADED_APPEND", 1)  # every append on the writer thread
    with caplog.at_level(logging.WARNING):
        async with running_master(master_store, sync_from_earliest=True) as master, \
                running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}",
                                                          receive_thread=False)) as slave:
            await until(lambda: slave_store.max_offset == end, 5.0, "the slave has everything")
            reconnects = slave.reconnects
        gc.collect()
        await asyncio.sleep(0)
    assert failed and reconnects >= 1
    assert any("Input/output error" in str(getattr(r, "reason", "")) for r in caplog.records)
    assert not any("never retrieved" in r.getMessage() for r in caplog.records)
    assert logs_identical(master_store, slave_store)

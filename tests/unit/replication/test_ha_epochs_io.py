"""The identity hello and epochs over real loopback sockets, with real stores: slaves are named
by brokerId, a returning old master cuts back to the last common epoch point (keeping the cut
bytes) even when its log is shorter than the new master's, and nobody appends from a master of
an older epoch."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.broker.replication.epochfile import EpochFile
from services.broker.replication.epochs import EpochEntry
from services.broker.replication.framing import ACK, encode_heartbeat
from services.broker.replication.hello import HELLO_HEAD_SIZE, decode_hello_head
from services.broker.replication.master import HAMaster
from services.broker.replication.slave import HASlave
from services.broker.storage.store import MessageStore
from tests.unit.replication.test_ha_io import fill, logs_identical, master_settings, slave_settings, until

pytestmark = pytest.mark.asyncio


@contextlib.asynccontextmanager
async def master_with_epochs(store: MessageStore, epochs: EpochFile) -> AsyncIterator[HAMaster]:
    master = HAMaster(store, master_settings(sync_from_earliest=True, broker_name="b"), epochs=epochs)
    await master.start()
    try:
        yield master
    finally:
        await master.stop()


@contextlib.asynccontextmanager
async def slave_with_epochs(store: MessageStore, epochs: EpochFile, port: int, tmp: Path,
                            broker_id: int = 2) -> AsyncIterator[HASlave]:
    settings = slave_settings(f"127.0.0.1:{port}", tmp, broker_name="b", broker_id=broker_id,
                              broker_addr=f"127.0.0.1:1091{broker_id}")
    slave = HASlave(store, settings, epochs=epochs)
    await slave.start()
    try:
        yield slave
    finally:
        await slave.stop()


async def test_slaves_are_named_by_broker_id_across_reconnects(
        stores: tuple[MessageStore, MessageStore], tmp_path: Path) -> None:
    m, s = stores
    m_epochs, s_epochs = EpochFile(str(tmp_path / "master")), EpochFile(str(tmp_path / "slave"))
    m_epochs.start_epoch(1, 0)
    fill(m, 5)
    async with master_with_epochs(m, m_epochs) as master, \
            slave_with_epochs(s, s_epochs, master.port, tmp_path) as slave:
        await until(lambda: s.max_offset == m.max_offset)
        [info] = master.slaves()
        # (the epoch is the slave's when it said hello: an empty slave knows none)
        assert (info.label, info.broker_id, info.broker_addr) == ("2", 2, "127.0.0.1:10912")
        assert info.epoch == 0
        assert s_epochs.entries == (EpochEntry(1, 0),)  # adopted from the master
        first_peer = info.slave
        master.connections[first_peer].sock.shutdown(socket.SHUT_RDWR)  # drop the link
        await until(lambda: master.slaves() and master.slaves()[0].slave != first_peer)
        fill(m, 2)
        await until(lambda: s.max_offset == m.max_offset)
        assert [(i.label, i.epoch) for i in master.slaves()] == [("2", 1)]  # the same series
        assert slave.master_hello is not None and slave.master_hello.epoch == 1


async def test_old_master_cuts_back_to_the_last_common_epoch_point(
        stores: tuple[MessageStore, MessageStore], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = stores  # a: the first master; b: its slave, promoted later
    a_epochs, b_epochs = EpochFile(str(tmp_path / "master")), EpochFile(str(tmp_path / "slave"))
    a_epochs.start_epoch(1, 0)
    fill(a, 5)
    async with master_with_epochs(a, a_epochs) as master:
        async with slave_with_epochs(b, b_epochs, master.port, tmp_path):
            await until(lambda: b.max_offset == a.max_offset)
        fill(a, 3)  # written on a while b was gone: never replicated
    common, a_end = b.max_offset, a.max_offset
    # b becomes master in epoch 2 and writes more than a ever had: offsets alone cannot see that
    # a's last 3 records differ from b's
    b_epochs.start_epoch(2, b.max_offset)
    fill(b, 10)
    assert b.max_offset > a_end
    with caplog.at_level(logging.WARNING):
        async with master_with_epochs(b, b_epochs) as master, \
                slave_with_epochs(a, a_epochs, master.port, tmp_path, broker_id=1) as slave:
            await until(lambda: a.max_offset == b.max_offset, what="the old master follows the new one")
            assert slave.repairs == 1
    assert logs_identical(a, b)
    saved = tmp_path / "diverged" / f"{common:020d}-{a_end:020d}.bin"
    assert saved.stat().st_size == a_end - common
    assert a_epochs.entries == (EpochEntry(1, 0), EpochEntry(2, common))
    assert any("last point it shares" in r.getMessage() for r in caplog.records)


async def test_no_append_from_a_master_of_an_older_epoch(
        stores: tuple[MessageStore, MessageStore], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old, member = stores
    old_epochs, member_epochs = EpochFile(str(tmp_path / "master")), EpochFile(str(tmp_path / "slave"))
    old_epochs.start_epoch(1, 0)
    member_epochs.start_epoch(1, 0)
    member_epochs.start_epoch(3, 0)  # this member already follows (or was) epoch 3's master
    fill(old, 4)
    with caplog.at_level(logging.ERROR):
        async with master_with_epochs(old, old_epochs) as master, \
                slave_with_epochs(member, member_epochs, master.port, tmp_path) as slave:
            await until(lambda: master.newer_epoch_seen == 3, what="the master hears of epoch 3")
            await until(lambda: any("older epoch" in r.getMessage() for r in caplog.records))
            assert "older than this slave's 3" in slave.problem
    assert member.max_offset == 0  # not one byte appended from the deposed master


async def test_new_slave_falls_back_for_an_original_master(
        stores: tuple[MessageStore, MessageStore], tmp_path: Path) -> None:
    """An original master reads the hello as a request offset beyond its log, answers with a
    heartbeat at its max offset and closes; the slave must not take that for divergence."""
    _, s = stores
    fill(s, 2)
    before = s.max_offset
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    loop = asyncio.get_running_loop()
    firsts: list[bytes] = []

    async def original_master() -> None:
        for _ in range(2):
            conn, _ = await loop.sock_accept(listener)
            with conn:
                first = await loop.sock_recv(conn, 8)
                firsts.append(first)
                await loop.sock_sendall(conn, encode_heartbeat(100))
                if len(firsts) == 2:
                    await asyncio.sleep(0.5)

    server = asyncio.create_task(original_master())
    try:
        async with slave_with_epochs(s, EpochFile(str(tmp_path / "slave")), port, tmp_path) as slave:
            await asyncio.wait_for(server, 5)
            assert decode_hello_head(firsts[0][:HELLO_HEAD_SIZE]) is not None
            assert ACK.unpack(firsts[1]) == (before,)  # the second time, an original request offset
            assert slave.repairs == 0
        assert s.max_offset == before
    finally:
        server.cancel()
        listener.close()

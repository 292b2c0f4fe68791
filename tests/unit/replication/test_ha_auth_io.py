"""haAuthSecret in the replication I/O layers (master.py / slave.py) in one process: real
MessageStores, real loopback sockets, short deadlines.  Raw sockets play peers that do not
answer the challenge."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from services.broker.replication import (
    AUTH_CHALLENGE_SIZE,
    AUTH_MAGIC,
    TRANSFER_HEADER_SIZE,
    auth_mac,
    encode_ack,
    encode_heartbeat,
)
from services.broker.storage.store import MessageStore
from tests.unit.replication.test_ha_io import (
    FakeSlave,
    fill,
    logs_identical,
    running_master,
    running_slave,
    slave_settings,
    until,
)

pytestmark = pytest.mark.asyncio

SECRET = b"0123456789abcdef-replication"
OTHER = b"fedcba9876543210-replication"
AUTH_TIMEOUT = 0.3


def records(caplog: pytest.LogCaptureFixture, level: int, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == level and r.getMessage() == message]


async def read_all(fake: FakeSlave, limit: float = 3.0) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes (True) or ``limit`` passes (False)."""
    got = bytearray()
    try:
        async with asyncio.timeout(limit):
            while chunk := await fake.reader.read(65536):
                got += chunk
        return bytes(got), True
    except TimeoutError:
        return bytes(got), False
    except ConnectionError:
        return bytes(got), True


async def test_same_secret_replicates_byte_identical_and_acks_count(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, slave_store = stores
    fill(master_store, 120)
    async with running_master(master_store, sync_from_earliest=True, auth_secret=SECRET,
                              auth_timeout_s=AUTH_TIMEOUT) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}", auth_secret=SECRET,
                                                      auth_timeout_s=AUTH_TIMEOUT)) as slave:
        await until(lambda: slave_store.max_offset == master_store.max_offset, what="caught up")
        await until(lambda: master.tracker.push2slave_max_offset == master_store.max_offset, what="acked")
        fill(master_store, 5)  # live appends keep flowing
        await until(lambda: slave_store.max_offset == master_store.max_offset, what="live data")
        assert slave.connected and slave.reconnects == 0
        assert master.auth_failures == 0 and len(master.connections) == 1
        (info,) = master.slaves()
        assert info.request_offset == 0
    assert logs_identical(master_store, slave_store)


async def test_wrong_secret_gets_no_data_and_is_counted_and_logged(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 20)
    caplog.set_level(logging.INFO)
    async with running_master(master_store, auth_secret=SECRET, auth_timeout_s=AUTH_TIMEOUT) as master:
        settings = slave_settings(f"127.0.0.1:{master.port}", auth_secret=OTHER, auth_timeout_s=AUTH_TIMEOUT)
        async with running_slave(slave_store, settings) as slave:
            await until(lambda: master.auth_failures >= 2, 3.0, "two rejected attempts")
            assert slave_store.max_offset == 0 and slave.received_bytes == 0
            assert not master.connections and master.tracker.push2slave_max_offset == 0
    warnings = records(caplog, logging.WARNING, "HA authentication failed; connection closed")
    assert warnings and all(str(r.__dict__["slave"]).startswith("127.0.0.1:") for r in warnings)
    assert "haAuthSecret differs" in warnings[0].__dict__["reason"]
    errors = records(caplog, logging.ERROR, "replication authentication failed")
    assert errors and "is haAuthSecret the same" in errors[0].__dict__["reason"]


async def test_a_raw_client_that_skips_the_challenge_gets_only_the_challenge(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    fill(master_store, 20)
    async with running_master(master_store, sync_from_earliest=True, auth_secret=SECRET,
                              auth_timeout_s=AUTH_TIMEOUT) as master:
        # the old protocol: a request offset at once, then acks
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(0))
        await fake.send(encode_ack(0) * 3)
        started = time.monotonic()
        got, closed = await read_all(fake)
        assert closed and time.monotonic() - started < AUTH_TIMEOUT + 1.0
        assert len(got) == AUTH_CHALLENGE_SIZE and got.startswith(AUTH_MAGIC + b"\x01")
        assert master.auth_failures == 1 and not master.connections
        assert master.tracker.push2slave_max_offset == 0
        # 32 bytes of garbage in place of the answer: closed at once, still nothing but the challenge
        fake = await FakeSlave.connect(master.port)
        await fake.send(bytes(32) + encode_ack(0))
        got, closed = await read_all(fake)
        assert closed and len(got) == AUTH_CHALLENGE_SIZE
        assert master.auth_failures == 2
        # a silent client is closed by the handshake deadline, not by housekeeping
        fake = await FakeSlave.connect(master.port)
        got, closed = await read_all(fake)
        assert closed and len(got) == AUTH_CHALLENGE_SIZE
        assert master.auth_failures == 3


async def test_the_right_answer_from_a_raw_client_starts_the_normal_stream(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master_store, _ = stores
    fill(master_store, 2)
    end = master_store.max_offset
    async with running_master(master_store, auth_secret=SECRET, auth_timeout_s=AUTH_TIMEOUT,
                              heartbeat_interval_s=0.1) as master:
        fake = await FakeSlave.connect(master.port)
        challenge = await asyncio.wait_for(fake.reader.readexactly(AUTH_CHALLENGE_SIZE), 1.0)
        # answer and request offset in separate writes: the master must not over-read
        await fake.send(auth_mac(SECRET, challenge))
        await asyncio.sleep(0.05)
        await fake.send(encode_ack(end))
        header = await asyncio.wait_for(fake.reader.readexactly(TRANSFER_HEADER_SIZE), 1.0)
        assert header == encode_heartbeat(end)
        await until(lambda: len(master.connections) == 1, 1.0)
        assert master.auth_failures == 0 and master.slaves()[0].request_offset == end
        fake.close()


async def test_slave_with_a_secret_and_a_master_without_one(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 10)
    async with running_master(master_store, housekeeping_interval_s=5.0) as master:
        settings = slave_settings(f"127.0.0.1:{master.port}", auth_secret=SECRET, auth_timeout_s=AUTH_TIMEOUT)
        with caplog.at_level(logging.ERROR):
            async with running_slave(slave_store, settings) as slave:
                await until(lambda: slave.reconnects >= 2, 5.0, "keeps retrying")
                assert slave_store.max_offset == 0 and not slave.connected
        assert not master.slaves() or all(s.request_offset == -1 for s in master.slaves())
    errors = records(caplog, logging.ERROR, "replication authentication failed")
    assert len(errors) >= 2
    assert all("master does not authenticate; check haAuthSecret on both sides" in r.__dict__["reason"]
               for r in errors)


async def test_slave_without_a_secret_and_a_master_with_one(
        stores: tuple[MessageStore, MessageStore], caplog: pytest.LogCaptureFixture) -> None:
    master_store, slave_store = stores
    fill(master_store, 10)
    caplog.set_level(logging.WARNING)
    async with running_master(master_store, sync_from_earliest=True, auth_secret=SECRET,
                              auth_timeout_s=AUTH_TIMEOUT) as master, \
            running_slave(slave_store, slave_settings(f"127.0.0.1:{master.port}")) as slave:
        await until(lambda: slave.reconnects >= 2, 5.0, "keeps retrying")
        await until(lambda: master.auth_failures >= 2, 2.0, "the master counts the failures")
        assert slave_store.max_offset == 0 and slave.received_bytes == 0
        assert not master.connections
    errors = records(caplog, logging.ERROR, "replication authentication failed")
    assert errors and all("the master requires haAuthSecret" in r.__dict__["reason"] for r in errors)
    warnings = records(caplog, logging.WARNING, "HA authentication failed; connection closed")
    assert warnings and "no authentication answer" in warnings[0].__dict__["reason"]


async def test_without_a_secret_the_wire_is_unchanged(stores: tuple[MessageStore, MessageStore]) -> None:
    """No challenge: the first bytes a client gets after its request offset are a frame header."""
    master_store, _ = stores
    fill(master_store, 2)
    end = master_store.max_offset
    async with running_master(master_store, heartbeat_interval_s=0.1) as master:
        fake = await FakeSlave.connect(master.port)
        await fake.send(encode_ack(end))
        header = await asyncio.wait_for(fake.reader.readexactly(TRANSFER_HEADER_SIZE), 1.0)
        assert header == encode_heartbeat(end)
        assert master.auth_failures == 0
        fake.close()

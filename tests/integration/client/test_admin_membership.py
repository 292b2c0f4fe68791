"""The admin client reuses the master list of a cluster between calls on every master (a loop of
topic creations asks the NameServer once), and a call that fails on a remembered master that is
gone is done again on the current masters; with relay="auto" it calls a broker directly once
its address connected."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.admin import AsyncAdmin
from pocketmq.errors import ConnectionFailedError, NotFoundError
from tests.integration.client.cluster import Cluster

pytestmark = pytest.mark.slow


@pytest.mark.asyncio
async def test_topic_admin_reuses_the_master_list_and_retries_on_current_masters(shared: Cluster) -> None:
    async with AsyncAdmin(shared.namesrv, relay="direct") as admin:
        asked = 0
        real = admin._namesrv.cluster_info

        async def counting() -> Any:
            nonlocal asked
            asked += 1
            return await real()

        admin._namesrv.cluster_info = counting  # type: ignore[method-assign]
        for i in range(5):
            results = await admin.create_topic(f"membership-{i}", read_queues=2, write_queues=2)
            assert sorted(r.target.broker_name for r in results if r.ok) == ["broker-a", "broker-b"]
        assert asked == 1
        masters = admin._masters_cache[None][1]

        # A remembered master that moved (here: an address nothing listens on): the call fails
        # there, the current masters are fetched and the call is done where it has not succeeded.
        moved = [t._replace(addr="127.0.0.1:1") if t.broker_name == "broker-b" else t for t in masters]
        admin._masters_cache[None] = (time.monotonic(), moved)
        results = await admin.create_topic("membership-moved", read_queues=2, write_queues=2)
        assert [(r.target, r.ok) for r in results] == [(t, True) for t in masters]
        assert asked == 2

        # membership_ttl=0: the NameServer is asked per call.
        admin.membership_ttl = 0
        await admin.create_topic("membership-fresh", read_queues=2, write_queues=2)
        await admin.create_topic("membership-fresh", read_queues=2, write_queues=2)
        assert asked == 4


@pytest.mark.asyncio
async def test_auto_access_relays_until_a_broker_is_reachable_then_calls_it_directly(shared: Cluster) -> None:
    """relay="auto" (the admin default): the first call to a broker goes through the
    NameServer's relay and starts a connection attempt to the broker's address; once that
    connected, the broker's calls go direct (no relay call at all), and a direct call that
    cannot connect puts its broker back on the relay."""
    async with AsyncAdmin(shared.namesrv) as admin:
        await admin.start()
        relayed: list[str] = []
        real = admin._namesrv.relay

        async def counting(broker_addr: str, method: str, request: bytes, timeout: float) -> bytes:  # noqa: ASYNC109
            relayed.append(method)
            return await real(broker_addr, method, request, timeout)

        admin._namesrv.relay = counting  # type: ignore[method-assign]
        first = await admin.create_topic("auto-access-0", read_queues=2, write_queues=2)
        assert all(r.ok for r in first) and len(first) == 2
        assert relayed == ["CreateTopic", "CreateTopic"]
        caller = admin._caller
        await caller.wait_probes()
        addrs = {r.target.addr for r in first}
        assert caller.direct_addresses == addrs
        for i in range(1, 4):
            results = await admin.create_topic(f"auto-access-{i}", read_queues=2, write_queues=2)
            assert all(r.ok for r in results)
        assert relayed == ["CreateTopic", "CreateTopic"]  # the later ones went direct
        for target in {r.target for r in first}:
            got = await admin.call(target.addr, "GetTopic", broker_pb2.GetTopicRequest(topic="auto-access-3"))
            assert got.topic_config.write_queue_nums == 2

        # A broker taken for reachable whose direct call cannot connect: the error is the
        # caller's, and its later calls are relayed (here: refused, it is not registered).
        caller._direct.add("127.0.0.1:1")
        with pytest.raises(ConnectionFailedError):
            await admin.call("127.0.0.1:1", "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest())
        assert "127.0.0.1:1" not in caller.direct_addresses
        with pytest.raises(NotFoundError):
            await admin.call("127.0.0.1:1", "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest())
        assert relayed[-1] == "GetBrokerStatus"


@pytest.mark.asyncio
async def test_auto_access_keeps_an_unreachable_broker_on_the_relay(shared: Cluster) -> None:
    """The connection attempt to an address nothing listens on fails; the broker stays
    relayed, its channel is closed, and it is not tried again."""
    async with AsyncAdmin(shared.namesrv) as admin:
        await admin.start()
        caller = admin._caller
        caller._probe_later("127.0.0.1:1")
        await caller.wait_probes()
        assert caller.direct_addresses == frozenset()
        assert "127.0.0.1:1" not in caller.pool._channels
        caller._probe_later("127.0.0.1:1")
        assert caller._probes["127.0.0.1:1"] is None  # (no second attempt)

"""The admin client reuses the master list of a cluster between calls on every master (a loop of
topic creations asks the NameServer once), and a call that fails on a remembered master that is
gone is done again on the current masters."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pocketmq.client.admin import AsyncAdmin
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

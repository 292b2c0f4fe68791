from __future__ import annotations

import asyncio
import types
from pathlib import Path

import grpc

from pocketmq.broker.v1 import broker_pb2_grpc
from services.broker.api import BrokerMetadataServicer
from services.broker.delay import restore_message
from services.broker.metadata import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.metadata.sync import SlaveMetadataSync
from services.broker.storage import record


def tables(root: Path) -> types.SimpleNamespace:
    d = str(root)
    return types.SimpleNamespace(topics=TopicConfigManager(d), offsets=ConsumerOffsetManager(d),
                                 delay_offsets=DelayOffsetManager(d), groups=SubscriptionGroupManager(d))


def test_slave_replaces_tables_whose_version_differs_and_persists(tmp_path: Path) -> None:
    async def scenario() -> None:
        master = tables(tmp_path / "master")
        master.topics.put(TopicConfig("orders", 2, 2))
        master.groups.put(SubscriptionGroupConfig("g1"))
        master.offsets.commit("g1", "orders", 1, 17)
        master.delay_offsets.set(3, 5)
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerMetadataServicer_to_server(BrokerMetadataServicer(master), server)  # type: ignore[arg-type]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            slave = tables(tmp_path / "slave")
            sync = SlaveMetadataSync(slave.topics, slave.offsets, slave.delay_offsets, slave.groups,
                                     interval_s=60)
            assert (await sync.sync_once()).error == "master address unknown"
            sync.set_master(f"127.0.0.1:{port}")
            first = await sync.sync_once()
            assert sorted(first.replaced) == sorted(
                ["topics.json", "consumerOffset.json", "delayOffset.json", "subscriptionGroup.json"])
            assert slave.topics.get("orders") == TopicConfig("orders", 2, 2)
            assert slave.offsets.query("g1", "orders", 1) == 17
            assert slave.delay_offsets.get(3) == 5 and "g1" in slave.groups
            assert slave.topics.data_version == master.topics.data_version
            assert not slave.topics.dirty  # persisted
            reloaded = tables(tmp_path / "slave")
            reloaded.offsets.load()
            assert reloaded.offsets.query("g1", "orders", 1) == 17

            # Only the changed table is replaced next time.
            master.offsets.commit("g1", "orders", 1, 18)
            second = await sync.sync_once()
            assert second.replaced == ["consumerOffset.json"]
            assert slave.offsets.query("g1", "orders", 1) == 18
            assert (await sync.sync_once()).replaced == []
            await sync.stop()
        finally:
            await server.stop(0)

    asyncio.run(scenario())


def test_sync_reports_an_unreachable_master(tmp_path: Path) -> None:
    async def scenario() -> None:
        slave = tables(tmp_path)
        sync = SlaveMetadataSync(slave.topics, slave.offsets, slave.delay_offsets, slave.groups,
                                 interval_s=60, timeout_s=0.5)
        sync.set_master("127.0.0.1:1")
        result = await sync.sync_once()
        assert result.error.startswith("UNAVAILABLE") or result.error.startswith("DEADLINE_EXCEEDED")
        await sync.stop()

    asyncio.run(scenario())


def _record(props: dict[str, str]) -> record.MessageRecord:
    return record.MessageRecord(
        "SCHEDULE_TOPIC_XXXX", 1, 0, 100, b"body", props, 7, 0, 123, ("10.0.0.1", 5), 456,
        ("10.0.0.2", 10911), 2, 0, 0, 200)


def test_restore_message_puts_the_message_back_in_its_real_queue() -> None:
    msg = restore_message(_record({"REAL_TOPIC": "orders", "REAL_QID": "3", "DELAY": "2", "TAGS": "t",
                                   "KEYS": "k"}))
    assert msg is not None
    assert (msg.topic, msg.queue_id, msg.body, msg.flag) == ("orders", 3, b"body", 7)
    assert dict(msg.properties) == {"TAGS": "t", "KEYS": "k"}
    assert (msg.born_timestamp, msg.born_host, msg.reconsume_times) == (123, ("10.0.0.1", 5), 2)
    assert restore_message(_record({"DELAY": "2"})) is None
    assert restore_message(_record({"REAL_TOPIC": "orders", "REAL_QID": "x"})) is None

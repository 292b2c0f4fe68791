from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from services.broker.metadata import (
    ConsumerOffsetManager,
    DataVersion,
    DelayOffsetManager,
    MetadataFileError,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
    write_file_atomic,
)
from services.common.errors import InvalidArgumentError, NotFoundError


def test_data_version_changes_and_compares() -> None:
    v0 = DataVersion.initial()
    v1 = v0.next()
    assert v1 != v0 and v1.counter == v0.counter + 1 and v1.timestamp >= v0.timestamp
    assert DataVersion.from_proto(v1.to_proto()) == v1
    assert DataVersion.from_json(v1.to_json()) == v1


def test_write_file_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "x.json"
    write_file_atomic(target, b"one")
    write_file_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(target.parent) == ["x.json"]


def test_topic_manager_versions_persist_reload(tmp_path: Path) -> None:
    calls: list[int] = []
    m = TopicConfigManager(str(tmp_path), default_queue_nums=8)
    m.add_listener(lambda: calls.append(1))
    v0 = m.data_version
    m.put(TopicConfig("T1", 2, 3, 6))
    v1 = m.data_version
    assert v1 != v0 and calls == [1] and m.dirty
    m.put(TopicConfig("T1", 2, 3, 6))  # no change, no new version
    assert m.data_version == v1 and calls == [1]
    assert m.auto_create("Auto").write_queue_nums == 8
    m.persist()
    assert not m.dirty
    doc = json.loads((tmp_path / "topics.json").read_text())
    assert doc["topicConfigTable"]["T1"]["writeQueueNums"] == 3
    assert doc["dataVersion"] == m.data_version.to_json()

    again = TopicConfigManager(str(tmp_path))
    assert again.load()
    assert again.get("T1") == TopicConfig("T1", 2, 3, 6)
    assert again.data_version == m.data_version
    assert [t.topic_name for t in again.all()] == ["Auto", "T1"]

    again.delete("T1")
    with pytest.raises(NotFoundError):
        again.delete("T1")
    with pytest.raises(InvalidArgumentError):
        again.put(TopicConfig("bad name"))
    with pytest.raises(InvalidArgumentError):
        again.put(TopicConfig("ok", 0, 1))


def test_missing_file_is_empty_and_corrupt_file_fails(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    assert not m.load()
    (tmp_path / "consumerOffset.json").write_text("{not json")
    with pytest.raises(MetadataFileError, match="corrupt metadata file"):
        ConsumerOffsetManager(str(tmp_path)).load()


def test_consumer_offsets(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    assert m.query("g", "t", 0) is None
    m.commit("g", "t", 0, 5)
    m.commit("g", "t", 1, 7)
    m.commit("g2", "u", 0, 1)
    v = m.data_version
    m.commit("g", "t", 0, 5)
    assert m.data_version == v
    assert m.query("g", "t", 0) == 5
    assert sorted(m.entries()) == [("g", "t", 0, 5), ("g", "t", 1, 7), ("g2", "u", 0, 1)]
    asyncio.run(m.persist_async())
    doc = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert doc["offsetTable"] == {"t@g": {"0": 5, "1": 7}, "u@g2": {"0": 1}}
    r = ConsumerOffsetManager(str(tmp_path))
    r.load()
    assert sorted(r.entries()) == sorted(m.entries()) and r.data_version == m.data_version
    r.remove_topic("t")
    assert list(r.entries()) == [("g2", "u", 0, 1)]
    master_version = DataVersion(1, 1)
    r.replace_all([("g", "x", 3, 9)], master_version)
    assert r.data_version == master_version and r.query("g", "x", 3) == 9 and r.dirty
    r.persist()
    assert json.loads((tmp_path / "consumerOffset.json").read_text())["dataVersion"] == {
        "timestamp": 1, "counter": 1}


def test_delay_offsets(tmp_path: Path) -> None:
    m = DelayOffsetManager(str(tmp_path))
    assert m.get(3) == 0
    m.set(3, 10)
    m.persist()
    r = DelayOffsetManager(str(tmp_path))
    r.load()
    assert r.all() == {3: 10} and r.data_version == m.data_version


def test_subscription_groups(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(str(tmp_path))
    g = SubscriptionGroupConfig("G1", consume_enable=False, retry_max_times=3)
    m.put(g)
    assert "G1" in m and len(m) == 1
    m.persist()
    r = SubscriptionGroupManager(str(tmp_path))
    r.load()
    assert r.get("G1") == g
    assert SubscriptionGroupConfig.from_proto(g.to_proto()) == g
    with pytest.raises(NotFoundError, match="does not exist"):
        r.delete("nope")
    with pytest.raises(InvalidArgumentError):
        r.put(SubscriptionGroupConfig("bad group"))


def test_overlapping_async_persists_keep_newest(tmp_path: Path) -> None:
    async def scenario() -> None:
        m = DelayOffsetManager(str(tmp_path))
        tasks = []
        for i in range(20):
            m.set(1, i)
            tasks.append(asyncio.create_task(m.persist_async()))
        await asyncio.gather(*tasks)
        assert not m.dirty

    asyncio.run(scenario())
    r = DelayOffsetManager(str(tmp_path))
    r.load()
    assert r.get(1) == 19


def test_subscription_group_from_proto_defaults_unset_fields_like_rocketmq() -> None:
    from pocketmq.broker.v1 import broker_pb2

    bare = SubscriptionGroupConfig.from_proto(broker_pb2.SubscriptionGroupConfig(group_name="g"))
    assert bare == SubscriptionGroupConfig("g")
    assert bare.retry_max_times == 16 and bare.consume_enable and bare.retry_queue_nums == 1
    explicit = broker_pb2.SubscriptionGroupConfig(group_name="g", retry_max_times=0, consume_enable=False)
    got = SubscriptionGroupConfig.from_proto(explicit)
    assert got.retry_max_times == 0 and not got.consume_enable
    custom = SubscriptionGroupConfig("g", retry_max_times=3, consume_broadcast_enable=False)
    assert SubscriptionGroupConfig.from_proto(custom.to_proto()) == custom


def test_topic_changes_since_a_version_for_incremental_registration(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.put(TopicConfig("a", 4, 4))
    v1 = m.data_version
    assert m.changes_since(v1) == (v1, [], [])
    m.put(TopicConfig("b", 4, 4))
    m.put(TopicConfig("a", 8, 8))
    v3 = m.data_version
    m.delete("b")
    version, changed, deleted = m.changes_since(v1) or (None, None, None)
    assert version == m.data_version and [t.topic_name for t in changed] == ["a"] and deleted == ["b"]
    assert m.changes_since(v3) == (m.data_version, [], ["b"])
    assert m.changes_since(DataVersion(1, 1)) is None  # not a version of this log: the whole table
    m.changed()  # the version moved without a topic change (e.g. brokerPermission)
    assert m.changes_since(v3) is None
    now = m.data_version
    m.put(TopicConfig("c", 4, 4))
    assert m.changes_since(now) == (m.data_version, [m.get("c")], [])

"""The official Python SDK (rocketmq-python-client 5.1.2, in .venv-sdk) produces to PocketMQ
through the access point ``namesrv:port``: NORMAL (sync and async), FIFO, DELAY, TRANSACTION.
Receiving uses PocketMQ's own pull API. One SDK run serves every assertion of the module."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.integration.procs import wait_until
from tests.sdk.cluster import Cluster, run_python_sdk, start_broker

NORMAL, FIFO, DELAY, TX = "py-normal", "py-fifo", "py-delay", "py-tx"
GROUPS = ["order-1", "order-2", "order-3", "order-4"]
PER_GROUP = 8


@pytest.fixture(scope="module")
def sdk_run(cluster: Cluster) -> dict[str, Any]:
    cluster.create_topic(NORMAL)
    cluster.create_topic(FIFO, "FIFO")
    plan: list[dict[str, Any]] = [
        {
            "name": "sync",
            "kind": "sync",
            "topic": NORMAL,
            "count": 10,
            "tag": "tag-a",
            "keys": "key-1",
            "properties": {"color": "blue"},
        },
        {"name": "async", "kind": "async", "topic": NORMAL, "count": 64},
        {"name": "fifo", "kind": "fifo", "topic": FIFO, "groups": GROUPS, "count": PER_GROUP},
    ]
    cluster.create_topic(DELAY, "DELAY")
    plan.append({"name": "delay", "kind": "delay", "topic": DELAY, "count": 5, "delay_ms": 3000})
    cluster.create_topic(TX, "TRANSACTION")
    plan.append(
        {
            "name": "tx",
            "kind": "transaction",
            "topic": TX,
            "commit": 3,
            "rollback": 3,
            "unresolved": 2,
            "wait_check": True,
            "check_timeout_s": 30,
        }
    )
    plan.append(
        {
            "name": "consumers",
            "kind": "consumer_start",
            "topic": NORMAL,
            "group": "py-consumers",
            "endpoint": cluster.namesrv,
        }
    )
    started_ms = int(time.time() * 1000)
    results = run_python_sdk(cluster.namesrv, plan)
    return {"results": results, "started_ms": started_ms, "ended_ms": int(time.time() * 1000)}


def receipts(sdk_run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    doc = sdk_run["results"][name]
    assert "error" not in doc, doc["error"]
    return list(doc["receipts"])


def by_id(cluster: Cluster, topic: str) -> dict[str, bpb.MessageExt]:
    return {m.properties["UNIQ_KEY"]: m for m in cluster.messages(topic)}


def test_normal_sync_keeps_message_id_tag_keys_properties_and_born_time(
    cluster: Cluster, sdk_run: dict[str, Any]
) -> None:
    sent = receipts(sdk_run, "sync")
    assert len(sent) == 10
    stored = by_id(cluster, NORMAL)
    for r in sent:
        msg = stored[r["message_id"]]
        assert msg.body == f"sync-{r['i']}".encode()
        assert msg.tags == "tag-a" and msg.keys == "key-1"
        assert msg.properties["color"] == "blue"
        # The SDK sends whole seconds.
        assert sdk_run["started_ms"] - 1000 <= msg.born_timestamp <= sdk_run["ended_ms"]
        assert r["offset"] == msg.queue_offset


def test_normal_async_64_in_flight_all_stored_once(cluster: Cluster, sdk_run: dict[str, Any]) -> None:
    sent = receipts(sdk_run, "async")
    ids = [r["message_id"] for r in sent]
    assert len(ids) == 64 == len(set(ids))
    stored = [m for m in cluster.messages(NORMAL) if m.body.startswith(b"async-")]
    assert sorted(m.properties["UNIQ_KEY"] for m in stored) == sorted(ids)
    # Round-robin over both broker groups' queues, not one queue.
    assert len({(m.store_host, m.queue_id) for m in stored}) > 1


def test_fifo_one_queue_per_message_group_in_send_order(cluster: Cluster, sdk_run: dict[str, Any]) -> None:
    sent = receipts(sdk_run, "fifo")
    assert len(sent) == len(GROUPS) * PER_GROUP
    per_group: dict[str, list[bpb.MessageExt]] = defaultdict(list)
    for msg in cluster.messages(FIFO):
        per_group[msg.properties["__SHARDINGKEY"]].append(msg)
    assert sorted(per_group) == sorted(GROUPS)
    for group, msgs in per_group.items():
        assert len({(m.store_host, m.queue_id) for m in msgs}) == 1, f"{group} spread over queues"
        msgs.sort(key=lambda m: m.queue_offset)
        assert [m.body for m in msgs] == [f"{group}:{i}".encode() for i in range(PER_GROUP)]


def test_delay_delivered_not_before_its_time_and_within_a_second(
    cluster: Cluster, sdk_run: dict[str, Any]
) -> None:
    sent = receipts(sdk_run, "delay")
    ids = {r["message_id"]: r for r in sent}
    stored = wait_until(
        lambda: (s := by_id(cluster, DELAY)) and set(ids) <= set(s) and s,
        30,
        message="delayed messages delivered",
    )
    for message_id, r in ids.items():
        msg = stored[message_id]
        assert r["deliver_ms"] <= msg.store_timestamp <= r["deliver_ms"] + 1000, (msg.store_timestamp, r)


def test_transaction_commit_visible_rollback_never_unresolved_checked_and_committed(
    cluster: Cluster, sdk_run: dict[str, Any]
) -> None:
    doc = sdk_run["results"]["tx"]
    assert "error" not in doc, doc["error"]
    sent = doc["receipts"]
    unresolved = {r["message_id"] for r in sent if r["outcome"] == "unresolved"}
    assert unresolved <= set(doc["checked"]), "the SDK's TransactionChecker was not asked"
    assert all(r["transaction_id"] for r in sent)
    expected = {r["message_id"] for r in sent if r["outcome"] in ("commit", "unresolved")}
    stored = wait_until(
        lambda: (s := by_id(cluster, TX)) and expected <= set(s) and s,
        30,
        message="committed and checked transactions visible",
    )
    rolled_back = {r["message_id"] for r in sent if r["outcome"] == "rollback"}
    assert not rolled_back & set(stored)
    assert set(stored) == expected


def test_transaction_checked_after_broker_restart(cluster: Cluster) -> None:
    """Half messages survive a broker restart; a producer connecting afterwards is asked about
    them (its checker commits) - the producer that sent them left them open and is gone."""
    topic = "py-tx-restart"
    cluster.create_topic(topic, "TRANSACTION", only=["broker-a"])
    first = run_python_sdk(
        cluster.namesrv,
        [{"name": "tx", "kind": "transaction", "topic": topic, "unresolved": 2}],
        checker="unknown",
    )
    ids = [r["message_id"] for r in receipts({"results": first}, "tx")]
    assert len(ids) == 2 and not set(ids) & set(by_id(cluster, topic))
    broker = cluster.broker("broker-a")
    broker.client.close()
    assert broker.proc.terminate(15) == 0
    port = int(broker.addr.rsplit(":", 1)[1])
    extra = broker.args[broker.args.index("--max-message-size") + 2 :]
    restarted = start_broker(
        cluster.procs,
        broker.store_dir.parent,
        "broker-a",
        cluster.namesrv,
        extra,
        port=port,
        store_dir=broker.store_dir,
    )
    cluster.brokers[cluster.brokers.index(broker)] = restarted
    assert not set(ids) & set(by_id(cluster, topic)), "a half message became visible by itself"
    second = run_python_sdk(
        cluster.namesrv,
        [
            {
                "name": "later",
                "kind": "await_checks",
                "topic": topic,
                "message_ids": ids,
                "check_timeout_s": 30,
            }
        ],
    )
    doc = second["later"]
    assert "error" not in doc, doc["error"]
    assert set(ids) <= set(doc["checked"])
    wait_until(lambda: set(ids) <= set(by_id(cluster, topic)), 30, message="checked transactions committed")
    assert sorted(m.properties["UNIQ_KEY"] for m in cluster.messages(topic)) == sorted(ids)


def test_sdk_consumers_start_with_the_broker_settings(sdk_run: dict[str, Any]) -> None:
    doc = sdk_run["results"]["consumers"]
    assert "error" not in doc, doc["error"]
    # Without Settings the PushConsumer's start fails after 10 s.
    assert doc["simple_start_s"] < 5 and doc["push_start_s"] < 5


def test_sdk_message_ids_and_keys_are_found_by_lookup(cluster: Cluster, sdk_run: dict[str, Any]) -> None:
    """The SDK's message id (stored as UNIQ_KEY) and its keys, through the admin lookup API."""
    from pocketmq.client.admin import Admin

    sent = receipts(sdk_run, "sync")
    with Admin(cluster.namesrv) as admin:
        for r in sent[:3]:
            got = admin.get_message(r["message_id"], topic=NORMAL)
            assert got.body == f"sync-{r['i']}".encode() and got.properties["UNIQ_KEY"] == r["message_id"]
        found = wait_until(lambda: len(admin.find_messages(NORMAL, "key-1", limit=100).messages) == 10,
                           10, "all 10 keyed messages indexed")
        assert found
        by_key = admin.find_messages(NORMAL, "key-1", limit=100)
        assert sorted(m.body for m in by_key.messages) == sorted(f"sync-{r['i']}".encode() for r in sent)
        assert not by_key.errors

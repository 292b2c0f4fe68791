"""The official Node.js SDK (rocketmq-client-nodejs, tests/sdk/node) produces NORMAL and FIFO
messages and consumes with its SimpleConsumer (POP) against PocketMQ through the NameServer
access point: a second implementation of the protocol, so PocketMQ does not fit one SDK's
quirks."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.sdk.cluster import NODE_DIR, Cluster, run_node_sdk

NORMAL, FIFO = "node-normal", "node-fifo"
GROUPS = ["n-1", "n-2", "n-3"]
PER_GROUP = 6


@pytest.fixture(scope="module")
def node_run(cluster: Cluster) -> dict[str, Any]:
    cluster.create_topic(NORMAL)
    cluster.create_topic(FIFO, "FIFO")
    return run_node_sdk(
        cluster.namesrv,
        [
            {
                "name": "normal",
                "kind": "normal",
                "topic": NORMAL,
                "count": 12,
                "tag": "node",
                "keys": ["k-1", "k-2"],
            },
            {"name": "fifo", "kind": "fifo", "topic": FIFO, "groups": GROUPS, "count": PER_GROUP},
        ],
    )


def test_node_sdk_sends_normal_messages(cluster: Cluster, node_run: dict[str, Any]) -> None:
    doc = node_run["normal"]
    assert "error" not in doc, doc["error"]
    sent = {r["message_id"]: r for r in doc["receipts"]}
    assert len(sent) == 12
    stored = {m.properties["UNIQ_KEY"]: m for m in cluster.messages(NORMAL)}
    assert set(stored) == set(sent)
    for message_id, r in sent.items():
        msg = stored[message_id]
        assert msg.body == f"normal-{r['i']}".encode()
        assert msg.tags == "node" and msg.keys == "k-1 k-2"
        assert msg.queue_offset == r["offset"]


def test_node_sdk_sends_fifo_in_order_per_group(cluster: Cluster, node_run: dict[str, Any]) -> None:
    doc = node_run["fifo"]
    assert "error" not in doc, doc["error"]
    assert len(doc["receipts"]) == len(GROUPS) * PER_GROUP
    per_group: dict[str, list[bpb.MessageExt]] = defaultdict(list)
    for msg in cluster.messages(FIFO):
        per_group[msg.properties["__SHARDINGKEY"]].append(msg)
    assert sorted(per_group) == sorted(GROUPS)
    for group, msgs in per_group.items():
        assert len({(m.store_host, m.queue_id) for m in msgs}) == 1
        msgs.sort(key=lambda m: m.queue_offset)
        assert [m.body for m in msgs] == [f"{group}:{i}".encode() for i in range(PER_GROUP)]


def test_node_simple_consumer_receives_and_acks_from_every_broker(cluster: Cluster) -> None:
    topic = "node-pop"
    cluster.create_topic(topic)
    sent = []
    for broker in cluster.brokers:
        for i in range(6):
            body = f"{broker.name}-{i}"
            broker.client.send(topic, body.encode(), tags="np")
            sent.append(body)
    proc = subprocess.run(
        [
            "node",
            "consume.js",
            "--endpoint",
            cluster.namesrv,
            "--topic",
            topic,
            "--group",
            "node-pop-group",
            "--count",
            str(len(sent)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=NODE_DIR,
    )
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert docs and docs[-1] == {"event": "done"}, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    messages = docs[0]["messages"]
    assert sorted(m["body"] for m in messages) == sorted(sent)
    assert {m["attempt"] for m in messages} == {1} and {m["tag"] for m in messages} == {"np"}

"""Put statuses that store the message but miss the configured durability reach v2 clients as
their RocketMQ 5 codes, with the message id and offset (the message is stored)."""

from __future__ import annotations

from pathlib import Path

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from tests.integration.procs import ProcessGroup
from tests.sdk.cluster import V2Client, start_cluster, v2_message


def test_sync_master_without_slave_answers_ha_not_available_and_stores(
    procs: ProcessGroup, tmp_path: Path
) -> None:
    cluster = start_cluster(procs, tmp_path, names=("broker-s",), extra=["--broker-role", "SYNC_MASTER"])
    client = V2Client(cluster.brokers[0].addr)
    try:
        msg = v2_message("sync-master-topic", b"kept")
        reply = client.call("SendMessage", s.SendMessageRequest(messages=[msg]))
    finally:
        client.close()
    [entry] = reply.entries
    assert entry.status.code == d.Code.HA_NOT_AVAILABLE
    assert "stored on the master" in entry.status.message
    assert entry.message_id == msg.system_properties.message_id
    stored = cluster.messages("sync-master-topic")
    assert [(m.body, m.queue_offset) for m in stored] == [(b"kept", entry.offset)]

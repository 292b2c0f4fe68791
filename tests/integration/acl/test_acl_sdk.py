"""The official RocketMQ 5 Python SDK (its own venv, in a subprocess) against the cluster with
access control on: with its credentials it produces and consumes; with a wrong secret it is
refused and nothing is stored."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import grpc

from pocketmq.broker.v1 import broker_pb2
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2
from pocketmq.wire.auth import Credentials
from tests.integration.acl.conftest import SDK, AclCluster
from tests.integration.procs import ROOT, wait_until
from tests.sdk.cluster import SDK_PYTHON

PRODUCE = ROOT / "tests" / "sdk" / "python" / "produce.py"
CONSUME = ROOT / "tests" / "sdk" / "python" / "consume.py"
TOPIC = "acl-sdk"


def run_sdk(script: Any, endpoint: str, plan: list[dict[str, Any]], credentials: Credentials,
            timeout: float = 90) -> tuple[dict[str, dict[str, Any]], str]:
    env = {"PATH": "/usr/bin:/bin", "TZ": "UTC", "SDK_ACCESS_KEY": credentials.access_key,
           "SDK_SECRET_KEY": credentials.secret_key}
    proc = subprocess.run([str(SDK_PYTHON), str(script), "--endpoint", endpoint, "--plan", json.dumps(plan)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            results[doc.get("name") or doc["event"]] = doc
    return results, proc.stdout + proc.stderr[-4000:]


def _max_offsets(cluster: AclCluster) -> list[int]:
    stub = cluster.broker_stub()
    return [stub.GetMaxOffset(broker_pb2.QueueRequest(topic=TOPIC, queue_id=q), timeout=5).offset
            for q in (0, 1)]


def test_python_sdk_with_credentials_produces_and_consumes_and_a_wrong_secret_is_refused(
        cluster: AclCluster) -> None:
    cluster.broker_stub().CreateTopic(broker_pb2.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
        topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6)), timeout=5)
    endpoint = cluster.master
    names = cluster.namesrv_stub()
    route = namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
    wait_until(lambda: names.GetRouteInfoByTopic(route, timeout=5).queue_datas, 20,
               message="route of the SDK topic", ignore=(grpc.RpcError,))
    produce = [{"name": "sync", "kind": "sync", "topic": TOPIC, "count": 5}]
    results, output = run_sdk(PRODUCE, endpoint, produce, SDK)
    assert "done" in results and "error" not in results.get("sync", {"error": "missing"}), output
    sent = {r["message_id"] for r in results["sync"]["receipts"]}
    assert len(sent) == 5
    results, output = run_sdk(CONSUME, endpoint, [{"name": "simple", "kind": "simple", "topic": TOPIC,
                                                   "group": "g-sdk", "count": 5, "timeout": 40}], SDK)
    assert "error" not in results.get("simple", {"error": "missing"}), output
    assert {d[0] for d in results["simple"]["deliveries"]} == sent
    before = _max_offsets(cluster)
    wrong = Credentials(SDK.access_key, "not-the-secret")
    results, output = run_sdk(PRODUCE, endpoint, produce[:1], wrong)
    assert not results.get("sync", {}).get("receipts"), output
    assert _max_offsets(cluster) == before
    log = cluster.master_proc.log_text()
    assert "access key 'sdk-app' is unknown or the signature is wrong" in log
    assert SDK.secret_key not in log

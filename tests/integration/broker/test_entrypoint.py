"""``python -m services.broker``: broker.conf + environment + flags, config errors, health and
reflection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ProcessGroup
from tests.support import ROOT, free_port

pytestmark = pytest.mark.slow


def test_broker_conf_env_and_flags_are_merged(procs: ProcessGroup, tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# RocketMQ-style\n"
        "brokerClusterName=FromFile\n"
        "brokerName=broker-conf\n"
        "brokerId=0\n"
        "brokerRole=ASYNC_MASTER\n"
        "flushDiskType=ASYNC_FLUSH\n"
        "namesrvAddr=\n"
        f"listenPort={port}\n"
        f"haListenPort={free_port()}\n"
        "metricsPort=0\n"
        "listenHost=127.0.0.1\n"
        "brokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path / 'store'}\n"
    )
    addr = f"127.0.0.1:{port}"
    proc = procs.start_grpc("services.broker", ["-c", str(conf), "--flush-disk-type", "SYNC_FLUSH"], addr,
                            env={"POCKETMQ_BROKER_CLUSTER_NAME": "FromEnv"},
                            service="pocketmq.broker.v1.Broker")
    client = BrokerClient(addr)
    try:
        status = client.status()
        assert (status.cluster_name, status.broker_name, status.flush_disk_type) == (
            "FromEnv", "broker-conf", "SYNC_FLUSH")
        with grpc.insecure_channel(addr) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            replies = stub.ServerReflectionInfo(iter([request]))
            names = {s.name for r in replies for s in r.list_services_response.service}
        expected = {"pocketmq.broker.v1.Broker", "pocketmq.broker.v1.BrokerMetadata", "grpc.health.v1.Health"}
        assert expected <= names
    finally:
        client.close()
    assert proc.terminate() == 0
    assert "broker stopped" in proc.log_text()


def test_invalid_configuration_names_the_key_and_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.broker", "--broker-role", "SLAVE", "--broker-id", "0",
         "--store-path-root-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "brokerId" in result.stderr and "SLAVE needs brokerId > 0" in result.stderr
    conf = tmp_path / "typo.conf"
    conf.write_text("brokerNmae=x\n")
    result = subprocess.run([sys.executable, "-m", "services.broker", "-c", str(conf)], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "did you mean 'brokerName'" in result.stderr

"""The checked-in protobuf/gRPC code must match proto/ (regenerate with `make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.genproto", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_generated_modules_import() -> None:
    from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc

    assert namesrv_pb2.DESCRIPTOR.package == "pocketmq.namesrv.v1"
    assert hasattr(namesrv_pb2_grpc, "NameServerStub")


def test_rocketmq_v2_contract_imports() -> None:
    """The RocketMQ 5 API is generated at its own import path (apache/rocketmq/v2)."""
    from apache.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc

    assert service_pb2.DESCRIPTOR.package == "apache.rocketmq.v2"
    assert service_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/service.proto"
    assert definition_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/definition.proto"
    methods = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
    assert {"QueryRoute", "Heartbeat", "SendMessage", "ReceiveMessage", "AckMessage", "EndTransaction",
            "Telemetry", "NotifyClientTermination", "ChangeInvisibleDuration",
            "RecallMessage"} <= set(methods)
    assert definition_pb2.Code.OK == 20000
    assert definition_pb2.Code.MESSAGE_BODY_TOO_LARGE == 41301
    assert hasattr(service_pb2_grpc, "MessagingServiceStub")

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

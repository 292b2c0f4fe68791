"""A real NameServer and broker groups for the RocketMQ 5 SDK tests, plus helpers to run the
official SDKs in subprocesses (their own venv / node_modules) and to talk v2 directly with
PocketMQ's generated stubs. The SDKs are never imported here."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from apache.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc
from pocketmq.broker.v1 import broker_pb2 as bpb
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ROOT, ManagedProcess, ProcessGroup, free_port, wait_until

SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"
SDK_PY_SCRIPT = ROOT / "tests" / "sdk" / "python" / "produce.py"
NODE_DIR = ROOT / "tests" / "sdk" / "node"
MAX_MESSAGE_SIZE = 64 * 1024
V2 = "apache.rocketmq.v2.MessagingService"


@dataclasses.dataclass
class Broker:
    name: str
    proc: ManagedProcess
    addr: str
    metrics_port: int
    store_dir: Path
    args: list[str]
    client: BrokerClient


@dataclasses.dataclass
class Cluster:
    procs: ProcessGroup
    namesrv: str
    brokers: list[Broker]

    def broker(self, name: str) -> Broker:
        return next(b for b in self.brokers if b.name == name)

    def create_topic(
        self, topic: str, message_type: str = "", queues: int = 4, only: Sequence[str] = ()
    ) -> None:
        """On every broker group (or the ``only`` ones), then wait until the NameServer routes it."""
        attributes = {"message.type": message_type} if message_type else {}
        targets = [b for b in self.brokers if not only or b.name in only]
        for b in targets:
            b.client.stub.CreateTopic(
                bpb.CreateTopicRequest(
                    topic_config=common_pb2.TopicConfig(
                        topic_name=topic,
                        read_queue_nums=queues,
                        write_queue_nums=queues,
                        perm=6,
                        attributes=attributes,
                    )
                ),
                timeout=10,
            )
        with grpc.insecure_channel(self.namesrv) as ch:
            stub = namesrv_pb2_grpc.NameServerStub(ch)

            def routed() -> bool:
                route = stub.GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=5
                )
                return len(route.queue_datas) == len(targets) and all(
                    q.message_type == message_type for q in route.queue_datas
                )

            wait_until(routed, 15, message=f"route of {topic}", ignore=(grpc.RpcError,))

    def messages(self, topic: str) -> list[bpb.MessageExt]:
        """Every stored message of ``topic`` on every broker group."""
        out: list[bpb.MessageExt] = []
        for b in self.brokers:
            tc = b.client.topics().get(topic)
            for q in range(tc.read_queue_nums if tc else 0):
                out.extend(b.client.pull_all(topic, q))
        return out

    def max_offsets(self) -> dict[tuple[str, str, int], int]:
        """(broker, topic, queue) -> max offset, over every topic: a snapshot for "nothing changed"."""
        snap = {}
        for b in self.brokers:
            for name, tc in b.client.topics().items():
                for q in range(tc.write_queue_nums):
                    snap[(b.name, name, q)] = b.client.max_offset(name, q)
        return snap


def start_cluster(
    procs: ProcessGroup, tmp: Path, names: Sequence[str] = ("broker-a", "broker-b"), extra: Sequence[str] = ()
) -> Cluster:
    port = free_port()
    namesrv = f"127.0.0.1:{port}"
    procs.start_grpc(
        "services.namesrv",
        ["--listen", namesrv, "--metrics-port", "0"],
        namesrv,
        name="namesrv",
        service="pocketmq.namesrv.v1.NameServer",
    )
    brokers = [start_broker(procs, tmp, name, namesrv, extra) for name in names]
    cluster = Cluster(procs, namesrv, brokers)
    with grpc.insecure_channel(namesrv) as ch:
        stub = namesrv_pb2_grpc.NameServerStub(ch)
        wait_until(
            lambda: (
                len(
                    stub.GetBrokerClusterInfo(
                        namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5
                    ).broker_addr_table
                )
                == len(names)
            ),
            15,
            message="brokers registered",
        )
    return cluster


def start_broker(
    procs: ProcessGroup,
    tmp: Path,
    name: str,
    namesrv: str,
    extra: Sequence[str] = (),
    port: int | None = None,
    store_dir: Path | None = None,
) -> Broker:
    port = port or free_port()
    metrics_port = free_port()
    store_dir = store_dir or tmp / f"{name}-{port}"
    args = [
        "--broker-name",
        name,
        "--namesrv-addr",
        namesrv,
        "--broker-ip1",
        "127.0.0.1",
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(port),
        "--ha-listen-port",
        str(free_port()),
        "--metrics-port",
        str(metrics_port),
        "--store-path-root-dir",
        str(store_dir),
        "--shutdown-grace-period",
        "1000",
        "--max-message-size",
        str(MAX_MESSAGE_SIZE),
        *extra,
    ]
    addr = f"127.0.0.1:{port}"
    proc = procs.start_grpc("services.broker", args, addr, name=name, service=V2)
    return Broker(name, proc, addr, metrics_port, store_dir, args, BrokerClient(addr))


# -- the SDKs in subprocesses ----------------------------------------------------------------


def _parse(stdout: str) -> dict[str, dict[str, Any]]:
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            results[doc.get("name") or doc["event"]] = doc
    return results


def run_python_sdk(
    endpoint: str, plan: list[dict[str, Any]], timeout: float = 120, checker: str = "commit",
    tls_ca: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Run tests/sdk/python/produce.py in .venv-sdk; results by scenario name. ``tls_ca``: connect
    with TLS, trusting this CA."""
    env = None
    if tls_ca is not None:
        env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls_ca)}
    proc = subprocess.run(
        [
            str(SDK_PYTHON),
            str(SDK_PY_SCRIPT),
            "--endpoint",
            endpoint,
            "--plan",
            json.dumps(plan),
            "--checker",
            checker,
            *(["--tls"] if tls_ca is not None else []),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    results = _parse(proc.stdout)
    assert "done" in results, f"SDK run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return results


def run_node_sdk(
    endpoint: str, plan: list[dict[str, Any]], timeout: float = 120
) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        ["node", "produce.js", "--endpoint", endpoint, "--plan", json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=NODE_DIR,
    )
    results = _parse(proc.stdout)
    assert "done" in results, (
        f"Node SDK run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )
    return results


# -- v2 with PocketMQ's own generated stubs ----------------------------------------------------


class V2Client:
    """Raw RocketMQ 5 API calls (for bad input and protocol checks)."""

    def __init__(self, addr: str, client_id: str = "test-client") -> None:
        self.channel = grpc.insecure_channel(addr)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.client_id = client_id

    def close(self) -> None:
        self.channel.close()

    def metadata(self, namespace: str = "", client_id: str | None = None) -> list[tuple[str, str]]:
        md = [
            ("x-mq-client-id", self.client_id if client_id is None else client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
        ]
        if namespace:
            md.append(("x-mq-namespace", namespace))
        return md

    def call(self, rpc: str, request: Any, namespace: str = "", client_id: str | None = None) -> Any:
        return getattr(self.stub, rpc)(request, metadata=self.metadata(namespace, client_id), timeout=10)

    def telemetry(
        self, *commands: service_pb2.TelemetryCommand, client_id: str | None = None
    ) -> list[service_pb2.TelemetryCommand]:
        return list(
            self.stub.Telemetry(iter(commands), metadata=self.metadata(client_id=client_id), timeout=10)
        )


def v2_message(
    topic: str,
    body: bytes,
    *,
    message_id: str = "",
    namespace: str = "",
    group: str = "",
    message_type: int = definition_pb2.MessageType.NORMAL,
) -> definition_pb2.Message:
    sp = definition_pb2.SystemProperties(
        message_id=message_id or f"01{time.time_ns():032X}"[:34],
        message_type=message_type,
        born_host="127.0.0.1",
    )  # type: ignore[arg-type]
    sp.born_timestamp.GetCurrentTime()
    if group:
        sp.message_group = group
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic, resource_namespace=namespace),
        body=body,
        system_properties=sp,
    )

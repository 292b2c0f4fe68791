"""Fixtures for NameServer process tests: real ``python -m services.namesrv`` processes and
broker stand-ins (``registrar_proc``) on loopback, with a shortened expiry."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from tests.integration.procs import ManagedProcess, ProcessGroup
from tests.support import free_port, wait_until

EXPIRY_MS = 2000
SCAN_MS = 100
REGISTER_PERIOD_S = 0.25


@dataclasses.dataclass
class Namesrv:
    proc: ManagedProcess
    addr: str
    metrics_port: int
    stub: namesrv_pb2_grpc.NameServerStub

    def cluster_info(self) -> pb.ClusterInfo:
        return self.stub.GetBrokerClusterInfo(pb.GetBrokerClusterInfoRequest(), timeout=5)

    def live_addrs(self) -> set[str]:
        return set(self.cluster_info().broker_live_table)

    def route(self, topic: str) -> pb.TopicRouteData | None:
        try:
            return self.stub.GetRouteInfoByTopic(pb.GetRouteInfoByTopicRequest(topic=topic), timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return None
            raise


@dataclasses.dataclass
class Registrar:
    proc: ManagedProcess
    status_file: Path
    broker_addr: str

    def status(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return doc


@pytest.fixture
def start_namesrv(procs: ProcessGroup) -> Iterator[Callable[..., Namesrv]]:
    """``start_namesrv(expiry_ms=2000, scan_ms=100, *extra_flags)`` -> a healthy NameServer."""
    channels: list[grpc.Channel] = []

    def start(*extra: str, expiry_ms: int = EXPIRY_MS, scan_ms: int = SCAN_MS, name: str = "namesrv",
              metrics: bool = True) -> Namesrv:
        port = free_port()
        metrics_port = free_port() if metrics else 0
        addr = f"127.0.0.1:{port}"
        args = [
            "--listen", addr, "--metrics-port", str(metrics_port),
            "--broker-channel-expired-time", str(expiry_ms),
            "--scan-not-active-broker-interval", str(scan_ms),
            *extra,
        ]
        proc = procs.start_grpc("services.namesrv", args, addr, name=name,
                                service="pocketmq.namesrv.v1.NameServer")
        channel = grpc.insecure_channel(addr)
        channels.append(channel)
        return Namesrv(proc, addr, metrics_port, namesrv_pb2_grpc.NameServerStub(channel))

    yield start
    for channel in channels:
        channel.close()


@pytest.fixture
def start_registrar(procs: ProcessGroup, tmp_path: Path) -> Callable[..., Registrar]:
    """``start_registrar(namesrvs, broker_name, broker_id=0, topics=(), ...)`` -> a broker stand-in
    that has completed its first registration round."""
    count = 0

    def start(
        namesrvs: list[Namesrv] | list[str],
        broker_name: str,
        broker_id: int = 0,
        topics: tuple[str, ...] = (),
        cluster: str = "c1",
        broker_addr: str | None = None,
        ha_addr: str | None = None,
        period: float = REGISTER_PERIOD_S,
        timeout: float = 1.0,
        extra: tuple[str, ...] = (),
    ) -> Registrar:
        nonlocal count
        count += 1
        addrs = [n if isinstance(n, str) else n.addr for n in namesrvs]
        broker_addr = broker_addr or f"127.0.0.1:{free_port()}"
        ha_addr = ha_addr if ha_addr is not None else f"127.0.0.1:{free_port()}"
        status_file = tmp_path / f"registrar-{count}.json"
        args = [
            "--namesrv", ";".join(addrs), "--cluster", cluster, "--broker-name", broker_name,
            "--broker-id", str(broker_id), "--broker-addr", broker_addr, "--ha-addr", ha_addr,
            "--topics", ",".join(topics), "--period", str(period), "--timeout", str(timeout),
            "--status-file", str(status_file), *extra,
        ]
        proc = procs.start("tests.integration.namesrv.registrar_proc", args,
                           name=f"registrar-{broker_name}-{broker_id}")
        registrar = Registrar(proc, status_file, broker_addr)
        proc_wait_first_round(registrar)
        return registrar

    return start


def proc_wait_first_round(registrar: Registrar, timeout: float = 15.0) -> None:
    from tests.integration.procs import ProcessFailedError

    def done() -> bool:
        if not registrar.proc.alive:
            raise ProcessFailedError(f"registrar exited\n{registrar.proc.describe()}")
        return int(registrar.status().get("rounds", 0)) >= 1

    try:
        wait_until(done, timeout, message="first registration round")
    except TimeoutError as exc:
        raise ProcessFailedError(f"{exc}\n{registrar.proc.describe()}") from None

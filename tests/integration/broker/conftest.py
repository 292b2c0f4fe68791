"""Fixtures for broker process tests: a real NameServer and real ``python -m services.broker``
processes on loopback with short intervals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ManagedProcess, ProcessGroup
from tests.support import free_port

BROKER_SERVICE = "pocketmq.broker.v1.Broker"


@dataclasses.dataclass
class Broker:
    proc: ManagedProcess
    addr: str
    port: int
    metrics_port: int
    store_dir: Path
    args: list[str]
    client: BrokerClient

    def stop(self, timeout: float = 15.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        self.client.close()
        return self.proc.terminate(timeout)


@pytest.fixture
def start_broker(procs: ProcessGroup, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """``start_broker(name, broker_id=0, namesrv="", store_dir=None, port=None, *flags)``."""
    started: list[Broker] = []

    def start(name: str = "broker-a", broker_id: int = 0, *extra: str, namesrv: str = "",
              store_dir: Path | None = None, port: int | None = None, cluster: str = "c1") -> Broker:
        port = port or free_port()
        metrics_port = free_port()
        store_dir = store_dir or tmp_path / f"{name}-{broker_id}-{port}"
        role = "SLAVE" if broker_id else "ASYNC_MASTER"
        args = [
            "--broker-cluster-name", cluster, "--broker-name", name, "--broker-id", str(broker_id),
            "--broker-role", role, "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", str(metrics_port), "--store-path-root-dir", str(store_dir),
            "--shutdown-grace-period", "2000", *extra,
        ]
        addr = f"127.0.0.1:{port}"
        proc = procs.start_grpc("services.broker", args, addr, name=f"{name}-{broker_id}",
                                service=BROKER_SERVICE)
        broker = Broker(proc, addr, port, metrics_port, store_dir, args, BrokerClient(addr))
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.client.close()

"""Fixtures for replication tests: a real NameServer and real ``python -m services.broker``
masters and slaves on loopback, with small commit-log segments (1 MiB) so "several segments" is
quick, and short HA intervals so heartbeats and housekeeping happen within a test."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ManagedProcess, ProcessGroup
from tests.support import free_port

BROKER_SERVICE = "pocketmq.broker.v1.Broker"
SEGMENT = 1024 * 1024


@dataclasses.dataclass
class Broker:
    proc: ManagedProcess
    addr: str
    port: int
    ha_port: int
    metrics_port: int
    store_dir: Path
    args: list[str]
    client: BrokerClient

    @property
    def ha_addr(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def ha_status(self) -> pb.HAStatus:
        return self.client.stub.GetHAStatus(pb.GetHAStatusRequest(), timeout=5)

    def stop(self, timeout: float = 15.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        self.client.close()
        return self.proc.terminate(timeout)

    def kill(self) -> int:
        self.client.close()
        return self.proc.kill()


StartBroker = Callable[..., Broker]


@pytest.fixture
def start_broker(procs: ProcessGroup, tmp_path: Path) -> Iterator[StartBroker]:
    """``start_broker(broker_id=0, *flags, role=None, namesrv="", store_dir=None, port=None)``:
    brokerId 0 is an ASYNC_MASTER unless ``role`` says otherwise; > 0 is a SLAVE."""
    started: list[Broker] = []

    def start(broker_id: int = 0, *extra: str, role: str | None = None, namesrv: str = "",
              store_dir: Path | None = None, port: int | None = None, ha_port: int | None = None,
              name: str = "broker-a") -> Broker:
        port = port or free_port()
        ha_port = ha_port or free_port()
        metrics_port = free_port()
        store_dir = store_dir or tmp_path / f"{name}-{broker_id}"
        role = role or ("SLAVE" if broker_id else "ASYNC_MASTER")
        args = [
            "--broker-cluster-name", "c1", "--broker-name", name, "--broker-id", str(broker_id),
            "--broker-role", role, "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(ha_port),
            "--metrics-port", str(metrics_port), "--store-path-root-dir", str(store_dir),
            "--mapped-file-size-commit-log", str(SEGMENT), "--max-message-size", "65536",
            "--shutdown-grace-period", "2000",
            "--ha-send-heartbeat-interval", "1000", "--ha-housekeeping-interval", "5000",
            "--register-name-server-period", "10000", "--slave-sync-interval", "1000", *extra,
        ]
        addr = f"127.0.0.1:{port}"
        proc = procs.start_grpc("services.broker", args, addr, name=f"{name}-{broker_id}",
                                service=BROKER_SERVICE)
        broker = Broker(proc, addr, port, ha_port, metrics_port, store_dir, args, BrokerClient(addr))
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.client.close()

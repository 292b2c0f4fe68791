"""A PocketMQ cluster of real processes for client and CLI tests: one NameServer and broker
groups (masters, optionally slaves) on loopback, with short intervals so group membership and
metadata sync happen within a second or two.

Built on :mod:`tests.integration.procs` (free ports, process groups, health waits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import grpc

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from tests.integration.procs import ManagedProcess, ProcessGroup
from tests.support import free_port, wait_until

BROKER_SERVICE = "pocketmq.broker.v1.Broker"
NAMESRV_SERVICE = "pocketmq.namesrv.v1.NameServer"
#: A consumer silent this long leaves its group (brokers of these tests).
CONSUMER_EXPIRY_MS = 3000


@dataclasses.dataclass
class Broker:
    name: str
    broker_id: int
    addr: str
    host: str
    port: int
    store_dir: Path
    args: list[str]
    proc: ManagedProcess

    def stub(self) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(grpc.insecure_channel(self.addr))

    def status(self) -> broker_pb2.BrokerStatus:
        with grpc.insecure_channel(self.addr) as channel:
            reply: broker_pb2.BrokerStatus = broker_pb2_grpc.BrokerStub(channel).GetBrokerStatus(
                broker_pb2.GetBrokerStatusRequest(), timeout=5)
            return reply


class Cluster:
    """Processes of one test (or one module); ``group`` stops them."""

    def __init__(self, group: ProcessGroup, tmp: Path, cluster_name: str = "c1") -> None:
        self.group = group
        self.tmp = tmp
        self.cluster_name = cluster_name
        self.namesrv = ""
        self.namesrv_proc: ManagedProcess | None = None
        self.brokers: list[Broker] = []

    # -- processes ------------------------------------------------------------------------------

    def start_namesrv(self, *extra: str) -> str:
        port = free_port()
        addr = f"127.0.0.1:{port}"
        self.namesrv_proc = self.group.start_grpc(
            "services.namesrv", ["--listen", addr, "--metrics-port", "0", *extra], addr, name="namesrv",
            service=NAMESRV_SERVICE)
        self.namesrv = addr
        return addr

    def start_broker(self, name: str = "broker-a", broker_id: int = 0, *extra: str, host: str = "127.0.0.1",
                     role: str | None = None, port: int | None = None, store_dir: Path | None = None,
                     wait_registered: bool = True) -> Broker:
        port = port or free_port()
        store_dir = store_dir or self.tmp / f"{name}-{broker_id}-{port}"
        role = role or ("SLAVE" if broker_id else "ASYNC_MASTER")
        args = [
            "--broker-cluster-name", self.cluster_name, "--broker-name", name, "--broker-id", str(broker_id),
            "--broker-role", role, "--namesrv-addr", self.namesrv, "--broker-ip1", host,
            "--listen-host", host, "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", "0", "--store-path-root-dir", str(store_dir),
            "--mapped-file-size-commit-log", str(64 * 1024 * 1024),
            "--consumer-channel-expired-time", str(CONSUMER_EXPIRY_MS),
            "--slave-sync-interval", "500", "--shutdown-grace-period", "2000",
            "--max-transfer-bytes-on-message-in-memory", str(4 * 1024 * 1024), *extra,
        ]
        addr = f"{host}:{port}"
        proc = self.group.start_grpc("services.broker", args, addr, name=f"{name}-{broker_id}",
                                     service=BROKER_SERVICE)
        broker = Broker(name, broker_id, addr, host, port, store_dir, args, proc)
        self.brokers = [b for b in self.brokers if b.addr != addr] + [broker]
        if wait_registered:
            wait_until(lambda: addr in self.live_addrs(), 10, message=f"{addr} registered")
        return broker

    def restart(self, broker: Broker) -> Broker:
        """Start a stopped broker again with the same flags and store."""
        proc = self.group.start_grpc("services.broker", broker.args, broker.addr,
                                     name=f"{broker.name}-{broker.broker_id}", service=BROKER_SERVICE)
        broker.proc = proc
        wait_until(lambda: broker.addr in self.live_addrs(), 10, message=f"{broker.addr} registered")
        return broker

    def masters(self) -> list[Broker]:
        return [b for b in self.brokers if b.broker_id == 0]

    # -- NameServer -----------------------------------------------------------------------------

    def _namesrv_stub(self) -> tuple[grpc.Channel, namesrv_pb2_grpc.NameServerStub]:
        channel = grpc.insecure_channel(self.namesrv)
        return channel, namesrv_pb2_grpc.NameServerStub(channel)

    def live_addrs(self) -> set[str]:
        channel, stub = self._namesrv_stub()
        with channel:
            info = stub.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
        return set(info.broker_live_table)

    def route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        channel, stub = self._namesrv_stub()
        with channel:
            try:
                reply: namesrv_pb2.TopicRouteData = stub.GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=5)
                return reply
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                    return None
                raise

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(self, topic: str, queues: int = 4, masters: Iterable[Broker] | None = None,
                     timeout: float = 10.0) -> None:
        """Create the topic directly on the masters and wait until the NameServer routes it to
        all of them (and slaves know it, if any)."""
        targets = list(masters) if masters is not None else self.masters()
        config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues,
                                        perm=6)
        for broker in targets:
            with grpc.insecure_channel(broker.addr) as channel:
                broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                    broker_pb2.CreateTopicRequest(topic_config=config), timeout=5)
        names = {b.name for b in targets}

        def routed() -> bool:
            route = self.route(topic)
            return route is not None and {q.broker_name for q in route.queue_datas} >= names

        wait_until(routed, timeout, message=f"route of {topic}")



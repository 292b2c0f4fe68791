"""One real cluster with access control on, shared by the tests of this package: a NameServer
and broker group broker-a (master + slave), all with ``aclEnable=true``, the brokers signing
their own calls with a Broker user."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.auth import Credentials
from tests.integration.conftest import pytest_runtest_makereport  # noqa: F401 (process logs on failure)
from tests.integration.procs import ManagedProcess, ProcessGroup, attach_logs, free_port, wait_until
from tests.support import signed_channel

ADMIN = Credentials("admin", "admin-secret-0123")
BROKER = Credentials("broker", "broker-secret-0123")
PUB = Credentials("pub-only", "pub-secret-0123")
SUB = Credentials("sub-only", "sub-secret-0123")
SDK = Credentials("sdk-app", "sdk-secret-0123")
TOPIC = "acl-t"
GROUP = "g-acl"
CLUSTER = "c1"
#: The signature window of the test cluster (ms).
WINDOW_MS = 60_000

ACL = {
    "users": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "userType": "Super"},
        {"accessKey": BROKER.access_key, "secretKey": BROKER.secret_key, "userType": "Broker"},
        {"accessKey": PUB.access_key, "secretKey": PUB.secret_key, "policies": [
            {"resource": "Topic:acl-*", "actions": ["Pub"], "decision": "Allow"}]},
        {"accessKey": SUB.access_key, "secretKey": SUB.secret_key, "policies": [
            {"resource": "Topic:acl-*", "actions": ["Sub"], "decision": "Allow"},
            {"resource": "Group:g-*", "actions": ["Sub"], "decision": "Allow"},
            {"resource": "Topic:%RETRY%g-*", "actions": ["Sub"]}]},
        {"accessKey": SDK.access_key, "secretKey": SDK.secret_key, "policies": [
            {"resource": "Topic:acl-*", "actions": ["Pub", "Sub"]},
            {"resource": "Group:g-*", "actions": ["Sub"]}]},
    ],
}


@dataclasses.dataclass
class AclCluster:
    procs: ProcessGroup
    namesrv: str
    master: str
    slave: str
    master_metrics: int
    master_proc: ManagedProcess
    acl_file: Path

    def channel(self, addr: str, credentials: Credentials | None) -> grpc.Channel:
        return signed_channel(addr, credentials)

    def broker_stub(self, credentials: Credentials | None = ADMIN,
                    addr: str = "") -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.channel(addr or self.master, credentials))

    def namesrv_stub(self, credentials: Credentials | None = ADMIN) -> namesrv_pb2_grpc.NameServerStub:
        return namesrv_pb2_grpc.NameServerStub(self.channel(self.namesrv, credentials))


def acl_flags(acl_file: Path) -> list[str]:
    return ["--acl-enable", "true", "--acl-config-file", str(acl_file),
            "--acl-signature-window-mills", str(WINDOW_MS)]


@pytest.fixture(scope="package")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    tmp = tmp_path_factory.mktemp("acl")
    acl_file = tmp / "acl.json"
    acl_file.write_text(json.dumps(ACL))
    group = ProcessGroup(tmp / "logs")
    try:
        namesrv = f"127.0.0.1:{free_port()}"
        group.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", "0",
                                              *acl_flags(acl_file)], namesrv, name="namesrv")
        env = {"POCKETMQ_INNER_CLIENT_AUTHENTICATION_CREDENTIALS": json.dumps(
            {"accessKey": BROKER.access_key, "secretKey": BROKER.secret_key})}
        addrs, metrics, procs = [], [], []
        for broker_id in (0, 1):
            port, metrics_port = free_port(), free_port()
            addr = f"127.0.0.1:{port}"
            role = "SLAVE" if broker_id else "ASYNC_MASTER"
            args = ["--broker-cluster-name", CLUSTER, "--broker-name", "broker-a",
                    "--broker-id", str(broker_id), "--broker-role", role, "--namesrv-addr", namesrv,
                    "--broker-ip1", "127.0.0.1", "--listen-host", "127.0.0.1", "--listen-port", str(port),
                    "--ha-listen-port", str(free_port()), "--metrics-port", str(metrics_port),
                    "--store-path-root-dir", str(tmp / f"store-{broker_id}"),
                    "--shutdown-grace-period", "1000",
                    "--slave-sync-interval", "1000", "--auto-create-topic-enable", "false",
                    *acl_flags(acl_file)]
            procs.append(group.start_grpc("services.broker", args, addr, name=f"broker-a-{broker_id}",
                                          env=env, service="pocketmq.broker.v1.Broker"))
            addrs.append(addr)
            metrics.append(metrics_port)
        cluster = AclCluster(group, namesrv, addrs[0], addrs[1], metrics[0], procs[0], acl_file)
        cluster.broker_stub().CreateTopic(broker_pb2.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
            topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6)), timeout=10)
        names = cluster.namesrv_stub()

        def registered() -> bool:
            info = names.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
            route = names.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=5)
            return len(info.broker_live_table) == 2 and len(route.queue_datas) == 1

        wait_until(registered, 20, message="brokers registered with their Broker credential",
                   ignore=(grpc.RpcError,))
        yield cluster
    finally:
        group.stop_all()


@pytest.fixture
def cluster(acl_cluster: AclCluster, request: pytest.FixtureRequest) -> AclCluster:
    attach_logs(request.node, acl_cluster.procs)
    return acl_cluster

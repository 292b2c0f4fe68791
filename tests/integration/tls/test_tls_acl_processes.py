"""TLS and access control together, with real processes: a NameServer and a master with
tlsEnable=true (enforcing) and aclEnable=true; the broker registers over TLS signed with its
innerClientAuthenticationCredentials. A signed client over TLS (own client and CLI) sends; the
same client unsigned over TLS is refused by the ACL; signed but plaintext it cannot connect. The
NameServer's web console reaches the cluster over TLS, signed with the NameServer's credential."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from pocketmq.client.admin import AsyncAdmin
from pocketmq.client.message import Message
from pocketmq.client.producer import AsyncProducer
from pocketmq.errors import PermissionDeniedError, PocketMQError
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import ACCESS_KEY_ENV, SECRET_KEY_ENV
from pocketmq.wire.tls import ClientTls, sync_channel
from tests.integration.procs import ROOT, ProcessGroup, attach_logs, wait_until
from tests.integration.tls.pki import Pki, make_pki
from tests.integration.tls.test_tls_processes import BROKER_SERVICE, NAMESRV_SERVICE, tls_flags
from tests.support import SyncSigner, free_port

ADMIN = Credentials("tls-admin", "tls-admin-secret-01")
BROKER = Credentials("tls-broker", "tls-broker-secret-01")
PUB = Credentials("tls-pub", "tls-pub-secret-01")
TOPIC = "tls-acl-t"
ACL = {"users": [
    {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "userType": "Super"},
    {"accessKey": BROKER.access_key, "secretKey": BROKER.secret_key, "userType": "Broker"},
    {"accessKey": PUB.access_key, "secretKey": PUB.secret_key,
     "policies": [{"resource": "Topic:tls-acl-*", "actions": ["Pub"], "decision": "Allow"}]},
]}


class Cluster:
    def __init__(self, pki: Pki, procs: ProcessGroup, namesrv: str, master: str, console: int) -> None:
        self.pki, self.procs, self.namesrv, self.master, self.console = pki, procs, namesrv, master, console
        self.tls = ClientTls(ca_file=str(pki.ca))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("tls-acl")
    pki = make_pki(tmp / "pki")
    tls = ClientTls(ca_file=str(pki.ca))
    acl_file = tmp / "acl.json"
    acl_file.write_text(json.dumps(ACL))
    acl = ["--acl-enable", "true", "--acl-config-file", str(acl_file)]
    procs = ProcessGroup(tmp / "logs")
    try:
        namesrv, console = f"127.0.0.1:{free_port()}", free_port()
        procs.start_grpc("services.namesrv",
                         ["--listen", namesrv, "--metrics-port", "0", "--console-port", str(console),
                          *tls_flags(pki), *acl], namesrv, name="namesrv", service=NAMESRV_SERVICE, tls=tls,
                         env={ACCESS_KEY_ENV: ADMIN.access_key, SECRET_KEY_ENV: ADMIN.secret_key})
        port = free_port()
        master = f"127.0.0.1:{port}"
        procs.start_grpc("services.broker", [
            "--broker-cluster-name", "c1", "--broker-name", "broker-ta", "--broker-id", "0",
            "--broker-role", "ASYNC_MASTER", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", "0", "--store-path-root-dir", str(tmp / "store"),
            "--shutdown-grace-period", "1000", "--auto-create-topic-enable", "false", *tls_flags(pki), *acl,
        ], master, name="broker", service=BROKER_SERVICE, tls=tls,
            env={"POCKETMQ_INNER_CLIENT_AUTHENTICATION_CREDENTIALS": json.dumps(
                {"accessKey": BROKER.access_key, "secretKey": BROKER.secret_key})})
        yield Cluster(pki, procs, namesrv, master, console)
    finally:
        procs.stop_all()


@pytest.fixture(autouse=True)
def _logs(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    attach_logs(request.node, cluster.procs)


def test_signed_clients_over_tls_send_and_unsigned_ones_are_refused(cluster: Cluster) -> None:
    def names() -> namesrv_pb2_grpc.NameServerStub:
        channel = sync_channel(cluster.namesrv, [], cluster.tls)
        return namesrv_pb2_grpc.NameServerStub(grpc.intercept_channel(channel, SyncSigner(ADMIN)))

    # The broker registered over TLS, signed with its Broker user (unsigned it would be refused).
    def registered() -> bool:
        info = names().GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
        return cluster.master in info.broker_addr_table["broker-ta"].broker_addrs.values()

    wait_until(registered, 20, message="broker registered over TLS with its credential",
               ignore=(grpc.RpcError, KeyError))

    async def create() -> None:
        async with AsyncAdmin(cluster.namesrv, tls=cluster.tls, credentials=ADMIN) as admin:
            results = await admin.create_topic(TOPIC, read_queues=1, write_queues=1)
            assert [r.ok for r in results] == [True], [r.error for r in results]

    asyncio.run(create())
    # The new topic's route reaches the NameServer with the broker's next (signed) registration.
    wait_until(lambda: len(names().GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC),
                                                       timeout=5).queue_datas) == 1,
               20, message="topic route registered", ignore=(grpc.RpcError,))

    async def go() -> None:
        async with AsyncProducer(cluster.namesrv, tls=cluster.tls, credentials=PUB) as producer:
            result = await producer.send(Message(TOPIC, b"signed over tls"))
            assert result.status.name == "SEND_OK"
        # Unsigned over TLS: the connection is fine, the ACL refuses (the route lookup already).
        async with AsyncProducer(cluster.namesrv, tls=cluster.tls, send_timeout=2, retries=0) as producer:
            with pytest.raises(PermissionDeniedError):
                await producer.send(Message(TOPIC, b"unsigned"))
        # Signed but plaintext: nothing answers on the TLS-only ports.
        async with AsyncProducer(cluster.namesrv, tls=False, credentials=PUB, send_timeout=2,
                                 retries=0) as producer:
            with pytest.raises(PocketMQError) as plain:
                await producer.send(Message(TOPIC, b"plaintext"))
            assert not isinstance(plain.value, PermissionDeniedError)

    asyncio.run(go())


def test_cli_signs_over_tls(cluster: Cluster) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
    base = [sys.executable, "-m", "pocketmq.cli", "send", TOPIC, "from the cli", "--namesrv", cluster.namesrv,
            "--ca-file", str(cluster.pki.ca), "--timeout", "5"]
    signed = subprocess.run([*base, "--access-key", PUB.access_key], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**env, SECRET_KEY_ENV: PUB.secret_key})
    assert signed.returncode == 0, signed.stderr
    assert PUB.secret_key not in signed.stdout + signed.stderr
    unsigned = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert unsigned.returncode != 0
    assert ACCESS_KEY_ENV not in env


def test_the_namesrv_console_reaches_the_cluster_over_tls_signed(cluster: Cluster) -> None:
    def page() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.console}/", timeout=10) as reply:
            return str(reply.read().decode())

    wait_until(lambda: "broker-ta" in page(), 30, message="console lists the broker",
               ignore=(OSError,))

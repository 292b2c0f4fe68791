"""TLS on every gRPC and metrics port (tlsEnable=true, tlsServerMode=enforcing), with real
processes: a NameServer, a master and its slave that register, sync metadata and relay over TLS;
plaintext clients are refused; clients with the CA connect (own client, CLI); a certificate
rotated on disk is served to new connections without a restart; mutual TLS refuses clients
without a certificate signed by the trusted CA."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pocketmq.broker.v1 import broker_pb2 as bpb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.client.admin import AsyncAdmin
from pocketmq.client.message import Message
from pocketmq.client.producer import AsyncProducer
from pocketmq.errors import PocketMQError
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.tls import ClientTls, sync_channel
from tests.integration.procs import ROOT, ProcessGroup, attach_logs, wait_until
from tests.integration.tls.pki import Pki, make_pki, served_common_name
from tests.support import free_port

NAMESRV_SERVICE = "pocketmq.namesrv.v1.NameServer"
BROKER_SERVICE = "pocketmq.broker.v1.Broker"


@dataclasses.dataclass
class TlsCluster:
    pki: Pki
    procs: ProcessGroup
    namesrv: str
    namesrv_metrics: int
    namesrv_health: str
    master: str
    master_metrics: int
    slave: str

    @property
    def tls(self) -> ClientTls:
        return ClientTls(ca_file=str(self.pki.ca))


def tls_flags(pki: Pki, *extra: str) -> list[str]:
    return ["--tls-enable", "true", "--tls-server-cert-path", str(pki.server_cert),
            "--tls-server-key-path", str(pki.server_key), "--tls-server-trust-cert-path", str(pki.ca), *extra]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    tmp = tmp_path_factory.mktemp("tls")
    pki = make_pki(tmp / "pki")
    tls = ClientTls(ca_file=str(pki.ca))
    procs = ProcessGroup(tmp / "logs")
    try:
        namesrv, ns_metrics, ns_health = f"127.0.0.1:{free_port()}", free_port(), free_port()
        procs.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", str(ns_metrics),
                                              "--health-listen-port", str(ns_health), *tls_flags(pki)],
                         namesrv, name="namesrv", service=NAMESRV_SERVICE, tls=tls)
        brokers = []
        for broker_id in (0, 1):
            port, metrics = free_port(), free_port()
            args = [
                "--broker-cluster-name", "c1", "--broker-name", "broker-t", "--broker-id", str(broker_id),
                "--broker-role", "SLAVE" if broker_id else "ASYNC_MASTER", "--namesrv-addr", namesrv,
                "--broker-ip1", "127.0.0.1", "--listen-host", "127.0.0.1", "--listen-port", str(port),
                "--ha-listen-port", str(free_port()), "--metrics-port", str(metrics),
                "--store-path-root-dir", str(tmp / f"store-{broker_id}"), "--shutdown-grace-period", "1000",
                "--slave-sync-interval", "500", *tls_flags(pki),
            ]
            addr = f"127.0.0.1:{port}"
            procs.start_grpc("services.broker", args, addr, name=f"broker-{broker_id}",
                             service=BROKER_SERVICE, tls=tls)
            brokers.append((addr, metrics))
        yield TlsCluster(pki, procs, namesrv, ns_metrics, f"127.0.0.1:{ns_health}", brokers[0][0],
                         brokers[0][1], brokers[1][0])
    finally:
        procs.stop_all()


@pytest.fixture(autouse=True)
def _logs(request: pytest.FixtureRequest, cluster: TlsCluster) -> None:
    attach_logs(request.node, cluster.procs)


def health(address: str, tls: ClientTls | None) -> int:
    with sync_channel(address, [], tls) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        return int(reply.status)


def test_plaintext_clients_are_refused_on_every_tls_grpc_port(cluster: TlsCluster) -> None:
    for address in (cluster.namesrv, cluster.master, cluster.slave):
        with pytest.raises(grpc.RpcError) as refused:
            health(address, None)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert health(address, cluster.tls) == health_pb2.HealthCheckResponse.SERVING
    # The v1 and v2 APIs are on the same port: a plaintext v1 call gets nothing either.
    with grpc.insecure_channel(cluster.master) as channel, pytest.raises(grpc.RpcError):
        broker_pb2_grpc.BrokerMetadataStub(channel).GetAllTopicConfig(
            bpb.GetAllTopicConfigRequest(), timeout=3)


def test_the_plaintext_health_port_serves_health_only(cluster: TlsCluster) -> None:
    """healthListenPort: what probes that cannot speak TLS (the kubelet's gRPC probes) use."""
    assert health(cluster.namesrv_health, None) == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(cluster.namesrv_health) as channel, pytest.raises(grpc.RpcError) as refused:
        namesrv_pb2_grpc.NameServerStub(channel).GetBrokerClusterInfo(
            namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=3)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_a_client_trusting_another_ca_is_refused(cluster: TlsCluster) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        health(cluster.namesrv, ClientTls(ca_file=str(cluster.pki.other_ca)))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_brokers_register_and_the_own_client_produces_and_relays_over_tls(cluster: TlsCluster) -> None:
    async def go() -> None:
        async with AsyncAdmin(cluster.namesrv, tls=cluster.tls, relay="relay") as admin:
            # Relayed by the NameServer to the master over TLS.
            results = await admin.create_topic("tls-topic", read_queues=2, write_queues=2)
            assert [r.ok for r in results] == [True], [r.error for r in results]
        async with AsyncProducer(cluster.namesrv, tls=cluster.tls) as producer:
            result = await producer.send(Message("tls-topic", b"over tls"))
            assert result.status.name == "SEND_OK"
        async with AsyncProducer(cluster.namesrv, tls=False, send_timeout=2, retries=0) as producer:
            with pytest.raises(PocketMQError):
                await producer.send(Message("tls-topic", b"plain"))

    asyncio.run(go())
    with sync_channel(cluster.namesrv, [], cluster.tls) as channel:
        info = namesrv_pb2_grpc.NameServerStub(channel).GetBrokerClusterInfo(
            namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
    assert set(info.broker_addr_table["broker-t"].broker_addrs.values()) == {cluster.master, cluster.slave}

    # The slave's metadata sync reaches the master's metadata API over TLS.
    def slave_has_topic() -> bool:
        with sync_channel(cluster.slave, [], cluster.tls) as channel:
            reply = broker_pb2_grpc.BrokerMetadataStub(channel).GetAllTopicConfig(
                bpb.GetAllTopicConfigRequest(), timeout=3)
        return any(t.topic_name == "tls-topic" for t in reply.topic_configs)

    wait_until(slave_has_topic, 15, message="topic synced to the slave")


def test_cli_connects_with_the_ca_file(cluster: TlsCluster) -> None:
    base = [sys.executable, "-m", "pocketmq.cli", "cluster", "list", "--namesrv", cluster.namesrv,
            "-o", "json"]
    ok = subprocess.run([*base, "--ca-file", str(cluster.pki.ca)], cwd=ROOT, capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "broker-t" in ok.stdout
    plain = subprocess.run([*base, "--timeout", "2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0


def test_metrics_are_served_over_https_only(cluster: TlsCluster) -> None:
    ctx = ssl.create_default_context(cafile=str(cluster.pki.ca))
    for port in (cluster.namesrv_metrics, cluster.master_metrics):
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=5) as reply:
            assert b"# TYPE" in reply.read()
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()


def test_a_certificate_rotated_on_disk_is_served_to_new_connections(cluster: TlsCluster) -> None:
    master_port = int(cluster.master.rsplit(":", 1)[1])
    ns_port = int(cluster.namesrv.rsplit(":", 1)[1])
    assert served_common_name(master_port, cluster.pki.ca) == "server-1"
    with sync_channel(cluster.master, [], cluster.tls) as open_channel:
        stub = health_pb2_grpc.HealthStub(open_channel)
        stub.Check(health_pb2.HealthCheckRequest(), timeout=3)
        cluster.pki.reissue_server("server-2")
        for port in (master_port, ns_port):
            assert served_common_name(port, cluster.pki.ca) == "server-2"
        assert served_common_name(cluster.master_metrics, cluster.pki.ca, alpn="http/1.1") == "server-2"
        # The connection opened before the rotation keeps working.
        reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=3)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    # New clients (and the brokers' next registrations) work with the new certificate.
    assert health(cluster.namesrv, cluster.tls) == health_pb2.HealthCheckResponse.SERVING


def test_mutual_tls_refuses_clients_without_a_trusted_certificate(procs: ProcessGroup,
                                                                  tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    namesrv, metrics = f"127.0.0.1:{free_port()}", free_port()
    with_cert = ClientTls(ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key))
    procs.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", str(metrics),
                                          *tls_flags(pki, "--tls-server-need-client-auth", "require")],
                     namesrv, name="namesrv-mtls", service=NAMESRV_SERVICE, tls=with_cert)
    assert health(namesrv, with_cert) == health_pb2.HealthCheckResponse.SERVING
    rogue = ClientTls(ca_file=str(pki.ca), cert_file=str(pki.rogue_cert), key_file=str(pki.rogue_key))
    for refused_tls in (ClientTls(ca_file=str(pki.ca)), rogue):
        with pytest.raises(grpc.RpcError) as refused:
            health(namesrv, refused_tls)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    # The metrics port asks for a client certificate too.
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"https://127.0.0.1:{metrics}/metrics", context=ctx, timeout=5).read()
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with urllib.request.urlopen(f"https://127.0.0.1:{metrics}/metrics", context=ctx, timeout=5) as reply:
        assert b"# TYPE" in reply.read()

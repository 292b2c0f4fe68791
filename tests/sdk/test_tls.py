"""tlsEnable with tlsServerMode=permissive: the broker serves the same APIs on a TLS port
(listenPort + 3 by default) next to the plaintext one; routes answered over TLS point at the
brokers' TLS ports. With the default tlsServerMode=enforcing every port is TLS only, and the
official Python SDK sends through it with TLS on, trusting the cluster's CA."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc
from pocketmq.client.admin import AsyncAdmin
from pocketmq.wire.tls import ClientTls
from services.common.tls import generate_self_signed
from tests.integration.procs import ProcessFailedError, ProcessGroup
from tests.integration.tls.pki import make_pki
from tests.sdk.cluster import run_python_sdk, start_broker, start_cluster, v2_message
from tests.support import free_port


def test_tls_listener_serves_the_v2_api(procs: ProcessGroup, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls" / "server.crt", tmp_path / "tls" / "server.key"
    generate_self_signed(cert, key, hosts=("127.0.0.1",))
    tls_flags = [
        "--tls-enable",
        "true",
        "--tls-server-mode",
        "permissive",
        "--tls-server-cert-path",
        str(cert),
        "--tls-server-key-path",
        str(key),
    ]
    cluster = start_cluster(procs, tmp_path, names=("broker-t",), extra=tls_flags)
    broker = cluster.brokers[0]
    plain_port = int(broker.addr.rsplit(":", 1)[1])
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    md = [("x-mq-client-id", "tls-client")]
    with grpc.secure_channel(f"127.0.0.1:{plain_port + 3}", creds) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="TBW102-routed")), metadata=md, timeout=10
        )
        assert route.status.code == d.Code.OK, route.status
        assert {q.broker.endpoints.addresses[0].port for q in route.message_queues} == {plain_port + 3}
        reply = stub.SendMessage(
            s.SendMessageRequest(messages=[v2_message("over-tls", b"secret")]), metadata=md, timeout=10
        )
        assert reply.status.code == d.Code.OK, reply.status
    assert [m.body for m in cluster.messages("over-tls")] == [b"secret"]
    # The plaintext port keeps answering plain routes.
    with grpc.insecure_channel(broker.addr) as channel:
        route = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="over-tls")), metadata=md, timeout=10
        )
        assert {q.broker.endpoints.addresses[0].port for q in route.message_queues} == {plain_port}


def test_tls_enable_without_a_readable_key_fails_at_start_naming_the_key(
    procs: ProcessGroup, tmp_path: Path
) -> None:
    flags = [
        "--tls-enable",
        "true",
        "--tls-server-cert-path",
        str(tmp_path / "missing.crt"),
        "--tls-server-key-path",
        str(tmp_path / "missing.key"),
    ]
    with pytest.raises(ProcessFailedError) as failure:
        start_broker(procs, tmp_path, "broker-bad", "127.0.0.1:1", flags)
    assert "tlsServerKeyPath" in str(failure.value)


def test_official_python_sdk_sends_over_enforced_tls(procs: ProcessGroup, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    flags = ["--tls-enable", "true", "--tls-server-cert-path", str(pki.server_cert),
             "--tls-server-key-path", str(pki.server_key), "--tls-server-trust-cert-path", str(pki.ca)]
    tls = ClientTls(ca_file=str(pki.ca))
    namesrv = f"127.0.0.1:{free_port()}"
    procs.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", "0", *flags], namesrv,
                     name="namesrv", service="pocketmq.namesrv.v1.NameServer", tls=tls)
    port = free_port()
    procs.start_grpc("services.broker", [
        "--broker-name", "broker-t", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
        "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
        "--metrics-port", "0", "--store-path-root-dir", str(tmp_path / "store"), "--shutdown-grace-period",
        "1000", *flags], f"127.0.0.1:{port}", name="broker", service="apache.rocketmq.v2.MessagingService",
        tls=tls)

    async def create() -> None:
        async with AsyncAdmin(namesrv, tls=tls) as admin:
            for _ in range(50):  # until the broker registered over TLS
                results = await admin.create_topic("sdk-tls", read_queues=2, write_queues=2)
                if results and all(r.ok for r in results):
                    return
                await asyncio.sleep(0.2)
            raise AssertionError("topic not created")

    asyncio.run(create())
    results = run_python_sdk(namesrv, [{"name": "sync", "kind": "sync", "topic": "sdk-tls", "count": 3}],
                             tls_ca=pki.ca)
    assert "error" not in results["sync"], results["sync"]
    assert len(results["sync"]["receipts"]) == 3
    assert all(r["message_id"] for r in results["sync"]["receipts"])

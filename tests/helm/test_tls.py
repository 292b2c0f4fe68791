"""``tls.*``: with TLS on, every NameServer and broker pod mounts ``tls.existingSecret`` as a
directory (rotations reach the files), its config turns TLS on for every gRPC and metrics port
(mutual TLS with ``requireClientCert``, the HA stream with ``tls.ha``), the probes use the plaintext
health-only port, the ServiceMonitor scrapes over HTTPS with the Secret's CA, the helm test pod
trusts it, and the NetworkPolicies are the same as without TLS. The rendered NameServer pod run
as a real process answers its probe on the health port and refuses plaintext clients."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import grpc
import helm_python as helm
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.tls import ClientTls, sync_channel
from tests.helm.chart import RELEASE, VALUE_SETS, Manifests, broker_conf, render
from tests.helm.podenv import container_argv, container_env
from tests.helm.test_service_config import localise, pod_object, write_config_maps
from tests.integration.procs import ProcessGroup
from tests.integration.tls.pki import make_pki
from tests.support import free_port

FULLNAME = f"{RELEASE}-pocketmq"
TLS = VALUE_SETS["tls"]
SECRET = "pocketmq-tls"
MOUNT = "/etc/pocketmq-tls"


def service_pods(m: Manifests) -> list[Any]:
    return [p for p in m.pod_templates()
            if p.labels.get("app.kubernetes.io/component") in ("namesrv", "broker")]


def probes(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in container]


def test_without_tls_nothing_changes() -> None:
    m = render({})
    for pod in service_pods(m):
        c = pod.container()
        assert all(v["name"] != "tls" for v in pod.spec["volumes"])
        assert all(p["grpc"]["port"] == pod.port("grpc") for p in probes(c))
        assert "health" not in {port["name"] for port in c["ports"]}
    assert "tlsEnable" not in broker_conf(m, f"{FULLNAME}-broker-a")
    assert "TLS" not in m.notes()


def test_tls_reaches_every_pod_config_probe_and_the_service_monitor() -> None:
    m = render(TLS)
    pods = service_pods(m)
    assert {p.labels["app.kubernetes.io/component"] for p in pods} == {"namesrv", "broker"}
    for pod in pods:
        c = pod.container()
        (volume,) = [v for v in pod.spec["volumes"] if v["name"] == "tls"]
        assert volume == {"name": "tls", "secret": {"secretName": SECRET}}
        (mount,) = [v for v in c["volumeMounts"] if v["name"] == "tls"]
        # no subPath: a rotated Secret must show in the mounted files
        assert mount == {"name": "tls", "mountPath": MOUNT, "readOnly": True}
        health = pod.port("health")
        assert probes(c) and all(p["grpc"]["port"] == health for p in probes(c))
    conf = broker_conf(m, f"{FULLNAME}-broker-a")
    assert conf["tlsEnable"] == "true" and conf["tlsServerMode"] == "enforcing"
    assert (conf["tlsServerCertPath"], conf["tlsServerKeyPath"], conf["tlsServerTrustCertPath"]) == (
        f"{MOUNT}/tls.crt", f"{MOUNT}/tls.key", f"{MOUNT}/ca.crt")
    assert conf["tlsServerNeedClientAuth"] == "require" and conf["haTlsEnable"] == "true"
    assert conf["tlsClientServerName"] == FULLNAME and conf["healthListenPort"] == "10915"
    ns_conf = m.get("ConfigMap", f"{FULLNAME}-namesrv")["data"]["namesrv.conf"]
    assert "tlsEnable=true" in ns_conf and "healthListenPort=9878" in ns_conf and "haTlsEnable" not in ns_conf
    # No Service exposes the health port.
    for svc in m.of_kind("Service"):
        assert "health" not in {port.get("name") for port in svc["spec"]["ports"]}
    (sm,) = m.of_kind("ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": FULLNAME, "ca": {"secret": {"name": SECRET, "key": "ca.crt"}},
        "cert": {"secret": {"name": SECRET, "key": "tls.crt"}},
        "keySecret": {"name": SECRET, "key": "tls.key"}}
    test_pod = next(p for p in m.of_kind("Pod") if p["metadata"]["name"].endswith("-test"))
    env = {e["name"]: e.get("value") for e in test_pod["spec"]["containers"][0]["env"]}
    assert env["POCKETMQ_TLS_CA_FILE"] == f"{MOUNT}/ca.crt" and env["POCKETMQ_TLS_SERVER_NAME"] == FULLNAME
    assert env["POCKETMQ_TLS_CERT_FILE"] == f"{MOUNT}/tls.crt"
    assert "--ca-file" in m.notes()


def test_network_policies_do_not_change_with_tls() -> None:
    assert render(TLS).of_kind("NetworkPolicy") == render({"metrics": {"serviceMonitor": {"enabled": True}}}
                                                          ).of_kind("NetworkPolicy")


def test_tls_keys_cannot_be_set_around_the_tls_values() -> None:
    with pytest.raises(helm.HelmError, match="tlsEnable"):
        render({"broker": {"config": {"tlsEnable": True}}})
    with pytest.raises(helm.HelmError, match="healthListenPort"):
        render({"namesrv": {"config": {"healthListenPort": 1}}})


def test_the_rendered_nameserver_pod_answers_its_probe_and_refuses_plaintext(tmp_path: Path) -> None:
    m = render(TLS)
    pod = next(p for p in m.pods() if p.labels["app.kubernetes.io/component"] == "namesrv")
    c = pod.container()
    argv = container_argv(c, container_env(c, pod_object(pod, "127.0.0.1")))
    mounts = write_config_maps(m, pod, c, tmp_path / "pod")
    # The Secret's files, as a kubernetes.io/tls Secret names them.
    pki = make_pki(tmp_path / "pki")
    secret_dir = Path(mounts[MOUNT])
    for src, name in ((pki.server_cert, "tls.crt"), (pki.server_key, "tls.key"), (pki.ca, "ca.crt")):
        shutil.copy(src, secret_dir / name)
    conf = Path(mounts["/etc/pocketmq"]) / "namesrv.conf"
    conf.write_text(conf.read_text().replace(MOUNT, str(secret_dir)))
    grpc_port, health_port = free_port(), free_port()
    args = localise(argv[3:], mounts)
    args = [a.replace(f":{pod.port('grpc')}", f":{grpc_port}") for a in args]
    args += ["--metrics-port", "0", "--health-listen-port", str(health_port),
             "--readiness-warm-up-mills", "0"]
    procs = ProcessGroup(tmp_path / "logs")
    try:
        proc = procs.start("services.namesrv", args, name="namesrv-pod")
        # What the kubelet's readiness probe does: plaintext grpc.health.v1 on the health port.
        proc.wait_healthy(f"127.0.0.1:{health_port}", service="pocketmq.namesrv.v1.NameServer")
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel, pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        client = ClientTls(ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key),
                           server_name="localhost")
        with sync_channel(f"127.0.0.1:{grpc_port}", [], client) as channel:
            namesrv_pb2_grpc.NameServerStub(channel).GetBrokerClusterInfo(
                namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
        without_cert = ClientTls(ca_file=str(pki.ca), server_name="localhost")
        with sync_channel(f"127.0.0.1:{grpc_port}", [], without_cert) as channel, \
                pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
    finally:
        procs.stop_all()

"""The rendered chart with its default ``controllerMode: kubernetes``, run as local pods (see
localpods.py) with the Kubernetes API emulated by tests/fake_apiserver.py (emulation 6; no
cluster runs here): one SYNC_MASTER group of three pods elects its master through the group's
Lease, the master labels its own pod and the group's Service follows that label, SIGKILL of the
master pod makes an in-sync slave master (Lease, label and Service follow) and the killed pod
started again rejoins as a slave; a real Prometheus configured from the rendered ServiceMonitor
returns data for every query of the dashboard's failover row."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.fake_apiserver import FakeApiServer
from tests.helm import client
from tests.helm.chart import NAMESPACE, RELEASE, ROLE_LABEL
from tests.helm.e2e import Load, brokers, dashboard_targets, grafana_to_promql, running_cluster, wait_for
from tests.helm.localpods import LocalCluster, LocalPod
from tests.helm.prom import Prometheus

pytestmark = pytest.mark.slow
GROUP = f"{RELEASE}-pocketmq-broker-a"
LEASE = f"{GROUP}-leader"
VALUES: dict[str, Any] = {
    "namesrv": {"replicas": 1, "readinessWarmUpSeconds": 0},
    "broker": {"groups": 1, "slavesPerGroup": 2, "masterRole": "SYNC_MASTER",
               "config": {"haMaxTimeSlaveNotCatchup": 3000}},
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "1s"}},
}


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cluster(api: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(VALUES, tmp_path_factory, api_server=api) as local:
        yield local


@pytest.fixture(scope="module")
def prometheus(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    prom = Prometheus(cluster, tmp_path_factory.mktemp("prometheus"))
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def status(pod: LocalPod) -> bpb.HAStatus | None:
    try:
        return client.ha_status(pod.addr("grpc"))
    except Exception:
        return None


def master_pod(cluster: LocalCluster, among: list[LocalPod] | None = None) -> LocalPod:
    def found() -> LocalPod | None:
        for pod in among or brokers(cluster):
            s = status(pod)
            if s is not None and s.broker_role == "SYNC_MASTER":
                return pod
        return None
    return wait_for(found, 20, "a master elected")


def labelled_master(cluster: LocalCluster, api: FakeApiServer) -> list[str]:
    return [p.name for p in brokers(cluster) if api.pod_labels(NAMESPACE, p.name).get(ROLE_LABEL) == "master"]


def service_target(cluster: LocalCluster) -> str:
    return cluster.resolve(f"{GROUP}.{NAMESPACE}.svc.cluster.local", 10911)


def test_the_group_elects_a_master_through_its_lease_and_the_service_follows_its_label(
        cluster: LocalCluster, api: FakeApiServer) -> None:
    master = master_pod(cluster)
    member = int(master.name.rsplit("-", 1)[1]) + 1  # chart: member id = ordinal + 1
    lease = api.lease(NAMESPACE, LEASE)
    assert lease is not None and lease["spec"]["holderIdentity"] == f"member-{member}"
    assert api.lease(NAMESPACE, f"{LEASE}-members") is not None
    wait_for(lambda: labelled_master(cluster, api) == [master.name], 15, "the master's pod label")
    assert service_target(cluster) == master.addr("grpc")
    wait_for(lambda: len(status(master).sync_state_set) == 3,  # type: ignore[union-attr]
             20, "both slaves in the SyncStateSet")
    for pod in brokers(cluster):
        assert any("Kubernetes API" in r for r in pod.rewrites), pod.rewrites


def test_sigkill_of_the_master_pod_moves_lease_label_and_service(cluster: LocalCluster,
                                                                 api: FakeApiServer) -> None:
    master = master_pod(cluster)
    wait_for(lambda: labelled_master(cluster, api) == [master.name], 15, "the master's pod label")
    wait_for(lambda: len(status(master).sync_state_set) == 3,  # type: ignore[union-attr]
             20, "both slaves in sync")
    load = Load([service_target(cluster)], "HelmK8s")
    load.start()
    try:
        wait_for(lambda: load.sent_ok > 50, 30, "PUT_OK before the kill")
    finally:
        load.stop()
    before = api.lease(NAMESPACE, LEASE)
    assert before is not None
    master.signal(signal.SIGKILL)
    killed = time.monotonic()
    others = [p for p in brokers(cluster) if p is not master]
    new = master_pod(cluster, others)
    took = time.monotonic() - killed
    after = api.lease(NAMESPACE, LEASE)
    assert after is not None
    assert int(after["metadata"]["annotations"]["pocketmq.io/epoch"]) > int(
        before["metadata"]["annotations"]["pocketmq.io/epoch"])
    # the new master labelled itself; the dead pod keeps its stale label until it runs again
    wait_for(lambda: api.pod_labels(NAMESPACE, new.name).get(ROLE_LABEL) == "master", 10,
             "the new master's label")
    cluster.start([master])  # the StatefulSet restarts the pod: it rejoins as a slave
    cluster.wait_ready(60, [master])
    wait_for(lambda: (s := status(master)) is not None and s.broker_role == "SLAVE" and s.connected, 30,
             "the old master follows the new one")
    wait_for(lambda: labelled_master(cluster, api) == [new.name], 15, "one pod labelled master")
    assert service_target(cluster) == new.addr("grpc")
    print(f"master {master.name} -> {new.name} in {took:.2f} s")


@pytest.mark.parametrize("expr", dashboard_targets(controller=True))
def test_failover_row_of_the_dashboard_returns_data(expr: str, cluster: LocalCluster,
                                                    prometheus: Prometheus) -> None:
    promql = grafana_to_promql(expr)
    result = wait_for(lambda: prometheus.query(promql), 30, f"data for {promql}", interval=0.5)
    assert all(r["value"][1] != "NaN" for r in result), result

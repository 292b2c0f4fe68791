"""The SYNC_MASTER value set run as local processes: one NameServer, one group of a master and two
slaves. The master runs as SYNC_MASTER and the slaves follow it over an HA port authenticated with
the Secret the chart generates (broker.haAuth); with replication, sends are acknowledged by a
slave, and pausing one slave under load raises that slave's lag on the shipped dashboard's lag
panel (while the other slave keeps sends PUT_OK) until it resumes and catches up, when the lag
returns to zero."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.helm import client
from tests.helm.chart import HA_AUTH_VALUE
from tests.helm.e2e import (
    Load,
    brokers,
    dashboard_targets,
    grafana_to_promql,
    masters,
    namesrvs,
    panel_query,
    running_cluster,
    wait_for,
)
from tests.helm.localpods import LocalCluster, LocalPod
from tests.helm.prom import Prometheus

pytestmark = pytest.mark.slow
VALUES: dict[str, Any] = {
    # the StatefulSet kind (not the default): brokers name the NameServer pod by its stable name
    "namesrv": {"kind": "StatefulSet", "replicas": 1, "readinessWarmUpSeconds": 1},
    "broker": {"groups": 1, "slavesPerGroup": 2, "masterRole": "SYNC_MASTER", "controllerMode": "none",
               "haAuth": {"create": True, "value": HA_AUTH_VALUE}},
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "1s"}, "prometheusRule": {"enabled": True}},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(VALUES, tmp_path_factory) as local:
        yield local


@pytest.fixture(scope="module")
def load(cluster: LocalCluster) -> Iterator[Load]:
    running = Load([masters(cluster)["broker-a"].addr("grpc")], "HelmSyncLoad")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_ordinal_zero_is_the_sync_master_and_the_slaves_follow_it(cluster: LocalCluster) -> None:
    master = masters(cluster)["broker-a"]
    roles = {p.template.ordinal: client.status(p.addr("grpc")).broker_role for p in brokers(cluster)}
    assert roles == {0: "SYNC_MASTER", 1: "SLAVE", 2: "SLAVE"}
    (ns,) = namesrvs(cluster)
    wait_for(lambda: len(client.cluster_info(ns.addr("grpc")).broker_live_table) == 3, 10,
             "3 brokers registered")
    for slave in (p for p in brokers(cluster) if p.template.ordinal > 0):
        wait_for(lambda s=slave: client.status(s.addr("grpc")).master_addr == master.addr("grpc"), 15,
                 f"{slave.name} learned its master from the NameServer")


def test_sync_sends_are_acknowledged_by_a_slave(cluster: LocalCluster) -> None:
    master = masters(cluster)["broker-a"].addr("grpc")
    client.create_topic(master, "HelmSync", 1)
    reply = wait_for(lambda: client.send(master, "HelmSync", [b"sync"], queue_id=0), 10, "send answered")
    wait_for(lambda: client.send(master, "HelmSync", [b"sync"], queue_id=0).status == bpb.PUT_OK, 30,
             f"a SYNC_MASTER send acknowledged by a slave (first: {reply})")


def test_replication_is_authenticated_with_the_charts_secret(cluster: LocalCluster) -> None:
    master = masters(cluster)["broker-a"]
    slaves = [p for p in brokers(cluster) if p.template.ordinal > 0]
    assert len(slaves) == 2
    for pod in brokers(cluster):  # from the rendered Secret through secretKeyRef
        assert pod.env["POCKETMQ_HA_AUTH_SECRET"] == HA_AUTH_VALUE

    def lines(pod: LocalPod, text: str) -> list[str]:
        return [line for line in pod.log_text().splitlines() if text in line]

    assert "authentication=True" in lines(master, "HA port listening")[0]
    for slave in slaves:
        wait_for(lambda s=slave: any("authenticated=True" in x for x in lines(s, "connected to master")),
                 30, f"{slave.name} authenticated to the master")
    wait_for(lambda: len(lines(master, "HA connection accepted")) >= 2, 30, "the master accepted both slaves")
    assert not lines(master, "HA authentication failed")
    assert all(HA_AUTH_VALUE not in pod.log_text() for pod in cluster.pods), "a pod logged the secret"


@pytest.mark.parametrize("expr", dashboard_targets())
def test_dashboard_query_returns_data_with_sync_replication(expr: str, prometheus: Prometheus,
                                                            load: Load) -> None:
    promql = grafana_to_promql(expr)
    wait_for(lambda: prometheus.query(promql), 30, f"data for {promql}", interval=0.5)


def test_lag_panel_rises_while_a_slave_is_paused_and_returns_to_zero(
        cluster: LocalCluster, prometheus: Prometheus, load: Load) -> None:
    promql = grafana_to_promql(panel_query("Replication lag per slave (bytes)"))
    paused = next(p for p in brokers(cluster) if p.template.ordinal == 2)

    def lag() -> float:
        rows = prometheus.query(promql)
        mine = [r for r in rows if paused.ip in r["metric"].get("slave", "")] or rows
        return max((float(r["value"][1]) for r in mine), default=-1.0)

    wait_for(lambda: lag() == 0, 30, "lag 0 before pausing")
    ok_before = load.sent_ok
    with paused.paused():
        wait_for(lambda: lag() > 0, 30, f"lag above 0 while {paused.name} is paused")
        # the other slave keeps acknowledging: SYNC_MASTER sends still succeed
        wait_for(lambda: load.sent_ok > ok_before + 100, 30, "sends PUT_OK while one slave is paused")
    wait_for(lambda: lag() == 0, 60, f"lag back to 0 after {paused.name} resumed")

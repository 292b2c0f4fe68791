"""Run the rendered chart: every pod the chart's workloads would create is started as a local
process from its own rendered command, args, env and ports (see localpods.py for the five
emulated pieces of a cluster), and the cluster they form must work: each broker gets the
identity its ordinal gives, registers with every NameServer (the Deployment's pods, all behind
the headless Service name of namesrvAddr), routes list both groups, messages
produced through the routes are consumed back, slaves replicate, the helm test pod's round trip
passes, a real Prometheus configured
from the rendered ServiceMonitor/PrometheusRule scrapes every pod, every query of the shipped
dashboard returns data under load, and SIGTERM stops every pod cleanly with brokers unregistered.

Parts whose service does not exist yet are skipped with the missing module named.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.helm import client
from tests.helm.chart import NAMESPACE, RELEASE
from tests.helm.e2e import (
    QUEUES,
    Load,
    brokers,
    dashboard_targets,
    grafana_to_promql,
    group_of,
    masters,
    namesrvs,
    running_cluster,
    wait_for,
)
from tests.helm.localpods import LocalCluster, LocalPod
from tests.helm.prom import Prometheus
from tests.support import require_executable

pytestmark = pytest.mark.slow
FULLNAME = f"{RELEASE}-pocketmq"
TOPIC = "HelmE2E"
#: 2 NameServers (default), 2 groups x (master + slave), metrics scraped every second.
VALUES: dict[str, Any] = {
    # A short readiness warm-up: the NameServers' readiness probe (their NameServer health
    # service) passes only after it, which start_cluster waits for.
    "namesrv": {"readinessWarmUpSeconds": 2},
    # static roles: these tests check the ordinal -> identity mapping (failover under
    # controllerMode kubernetes: test_local_cluster_k8s.py)
    "broker": {"groups": 2, "slavesPerGroup": 1, "controllerMode": "none"},
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "1s"}, "prometheusRule": {"enabled": True}},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(VALUES, tmp_path_factory) as local:
        yield local


def test_every_broker_runs_with_the_identity_of_its_ordinal(cluster: LocalCluster) -> None:
    assert len(brokers(cluster)) == 4 and len(namesrvs(cluster)) == 2
    for pod in brokers(cluster):
        s = client.status(pod.addr("grpc"))
        assert (s.cluster_name, s.broker_name) == ("DefaultCluster", group_of(pod))
        assert s.broker_id == pod.template.ordinal
        assert s.broker_role == ("ASYNC_MASTER" if pod.template.ordinal == 0 else "SLAVE")
        assert s.broker_addr == pod.addr("grpc"), "brokerIP1 must be the pod IP (downward API)"


def test_every_broker_registers_with_every_nameserver(cluster: LocalCluster) -> None:
    expected = {g: {p.template.ordinal: p.addr("grpc") for p in brokers(cluster) if group_of(p) == g}
                for g in ("broker-a", "broker-b")}
    # namesrvAddr names the headless Service; as DNS would, it stands for both NameServer pods
    every_namesrv = ";".join(ns.addr("grpc") for ns in namesrvs(cluster))
    for pod in brokers(cluster):
        assert any(f"-> {every_namesrv!r} (headless Service" in r for r in pod.rewrites), pod.rewrites
    for ns in namesrvs(cluster):
        def registered(ns: LocalPod = ns) -> bool:
            info = client.cluster_info(ns.addr("grpc"))
            got = {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}
            return got == expected and len(info.broker_live_table) == 4
        wait_for(registered, 10, f"all brokers registered at {ns.name}")
        info = client.cluster_info(ns.addr("grpc"))
        assert list(info.cluster_addr_table["DefaultCluster"].broker_names) == ["broker-a", "broker-b"]


def test_nameservers_turned_ready_only_after_their_warm_up(cluster: LocalCluster) -> None:
    for ns in namesrvs(cluster):
        assert ns.log_path is not None
        log = ns.log_path.read_text()
        assert "namesrv warming up" in log and "warm_up_ms=2000" in log, log[-2000:]
        assert "namesrv ready" in log  # (start_cluster waited for the rendered readiness probe)


def test_group_service_reaches_the_master(cluster: LocalCluster) -> None:
    for group, master in masters(cluster).items():
        addr = cluster.resolve(f"{FULLNAME}-{group}.{NAMESPACE}.svc.cluster.local", 10911)
        assert addr == master.addr("grpc")
        assert client.status(addr).broker_id == 0


def test_routes_produce_and_consume(cluster: LocalCluster) -> None:
    for master in masters(cluster).values():
        client.create_topic(master.addr("grpc"), TOPIC, QUEUES)
    for ns in namesrvs(cluster):
        def routed(ns: LocalPod = ns) -> bool:
            r = client.route(ns.addr("grpc"), TOPIC)
            return sorted(q.broker_name for q in r.queue_datas) == ["broker-a", "broker-b"]
        wait_for(routed, 10, f"{TOPIC} routed to both groups by {ns.name}")
    route = client.route(namesrvs(cluster)[0].addr("grpc"), TOPIC)
    assert all(q.write_queue_nums == QUEUES for q in route.queue_datas)
    sent: dict[str, set[bytes]] = {}
    for data in route.broker_datas:
        master_addr = data.broker_addrs[0]
        bodies = [f"{data.broker_name}-{i}".encode() for i in range(200)]
        for queue in range(QUEUES):
            reply = client.send(master_addr, TOPIC, bodies[queue::QUEUES], queue_id=queue)
            assert reply.status == bpb.PUT_OK, reply
        sent[master_addr] = set(bodies)
    for master_addr, bodies in sent.items():
        got = [b for queue in range(QUEUES) for b in client.pull_all(master_addr, TOPIC, queue)]
        assert sorted(got) == sorted(bodies)


def test_slaves_replicate_their_masters(cluster: LocalCluster) -> None:
    for group, master in masters(cluster).items():
        slave = next(p for p in brokers(cluster) if p.template.ordinal == 1 and group_of(p) == group)
        target = client.status(master.addr("grpc")).commit_log_max_offset
        assert target > 0
        wait_for(lambda s=slave, t=target: client.status(s.addr("grpc")).commit_log_max_offset >= t, 20,
                 f"{slave.name} caught up with {master.name}")
        master_msgs = sorted(b for q in range(QUEUES) for b in client.pull_all(master.addr("grpc"), TOPIC, q))
        def on_slave(s: LocalPod = slave) -> list[bytes]:
            return sorted(b for q in range(QUEUES) for b in client.pull_all(s.addr("grpc"), TOPIC, q))
        slave_msgs = wait_for(on_slave, 20, f"messages readable on {slave.name}")
        assert slave_msgs == master_msgs


def test_helm_test_pod_round_trip(cluster: LocalCluster) -> None:
    (pod,) = [p for p in cluster.pods if p.template.owner_kind == "Pod"]
    assert cluster.run_to_completion(pod, timeout=120) == 0, pod.describe()
    assert "round trip OK" in pod.log_text()


# -- metrics ----------------------------------------------------------------------------------


def test_every_pods_metrics_pass_promtool(cluster: LocalCluster) -> None:
    for pod in cluster.workload_pods():
        with urllib.request.urlopen(f"http://{pod.addr('metrics')}/metrics", timeout=10) as reply:
            body = reply.read()
        assert b"pocketmq_" in body, pod.name
        done = subprocess.run([require_executable("promtool", "prometheus"), "check", "metrics"], input=body,
                              capture_output=True, timeout=30)
        assert done.returncode == 0, f"{pod.name}: {done.stdout.decode()} {done.stderr.decode()}"


@pytest.fixture(scope="module")
def load(cluster: LocalCluster) -> Iterator[Load]:
    running = Load([p.addr("grpc") for p in masters(cluster).values()], "HelmLoad")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_prometheus_scrapes_every_pod_through_the_servicemonitor(cluster: LocalCluster,
                                                                 prometheus: Prometheus) -> None:
    expected = {p.name for p in cluster.workload_pods()}

    def all_up() -> bool:
        targets = prometheus.targets()
        return {t["labels"]["pod"] for t in targets if t["health"] == "up"} == expected
    wait_for(all_up, 30, "every pod scraped and up")
    jobs = {t["labels"]["pod"]: t["labels"]["job"] for t in prometheus.targets()}
    assert {jobs[p.name] for p in namesrvs(cluster)} == {"namesrv"}
    assert {jobs[p.name] for p in brokers(cluster)} == {"broker"}


def test_rendered_alert_rules_load_and_are_quiet_on_a_healthy_cluster(cluster: LocalCluster,
                                                                      prometheus: Prometheus) -> None:
    def loaded() -> list[dict[str, Any]]:
        return [r for g in prometheus.api("rules")["groups"] for r in g["rules"] if r.get("lastEvaluation")
                and not r["lastEvaluation"].startswith("0001")]
    rules = wait_for(loaded, 20, "rules evaluated")
    assert {r["name"] for r in rules} == {"PocketMQReplicationLagHigh", "PocketMQSlaveNotAvailable",
                                          "PocketMQFlushSlaveTimeout", "PocketMQHAAuthFailures",
                                          "PocketMQNoInSyncSlave", "PocketMQFailover",
                                          "PocketMQBrokerMissingFromNameServer"}
    assert all(r["health"] == "ok" for r in rules), rules
    wait_for(lambda: prometheus.query('up{job="namesrv"}'), 20, "NameServers scraped")
    wait_for(lambda: prometheus.query("pocketmq_namesrv_live_brokers"), 20, "live brokers scraped")
    assert prometheus.query("ALERTS") == []


@pytest.mark.parametrize("expr", dashboard_targets())
def test_dashboard_query_returns_data_under_load(expr: str, cluster: LocalCluster, prometheus: Prometheus,
                                                 load: Load) -> None:
    promql = grafana_to_promql(expr)
    result = wait_for(lambda: prometheus.query(promql), 30, f"data for {promql}", interval=0.5)
    assert all(r["value"][1] not in ("NaN",) for r in result) or "histogram_quantile" in promql, result
    assert load.answered > 0, load.errors[-3:]


# -- shutdown ---------------------------------------------------------------------------------


def test_sigterm_stops_brokers_cleanly_and_they_unregister(cluster: LocalCluster, load: Load,
                                                           prometheus: Prometheus) -> None:
    prom = prometheus
    load.stop()
    codes = cluster.stop(brokers(cluster), max_grace=30)
    assert codes == {p.name: 0 for p in brokers(cluster)}, "a broker did not exit 0 within its grace period"
    for ns in namesrvs(cluster):
        info = client.cluster_info(ns.addr("grpc"))
        assert dict(info.broker_live_table) == {}, f"{ns.name} still lists brokers after SIGTERM"
    # the rendered "broker missing" alert now matches every NameServer
    (rule,) = cluster.manifests.of_kind("PrometheusRule")
    expr = next(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == "PocketMQBrokerMissingFromNameServer")
    firing = wait_for(lambda: len(prom.query(expr)) == 2 and prom.query(expr), 20,
                      "broker-missing alert expression matching both NameServers")
    assert {r["metric"]["pod"] for r in firing} == {p.name for p in namesrvs(cluster)}
    codes = cluster.stop(namesrvs(cluster), max_grace=30)
    assert codes == {p.name: 0 for p in namesrvs(cluster)}

"""Structural properties of the rendered chart: the wiring between objects (selectors, ports,
ConfigMaps, ServiceAccounts), the broker identity scheme, probes, security, rollout triggers and
network isolation of the replication port."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.helm.chart import (
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    Manifests,
    PodTemplate,
    broker_conf,
    default_values,
    render,
    selector_matches,
    with_master,
)

FULLNAME = f"{RELEASE}-pocketmq"
ALL_SETS = sorted(VALUE_SETS)


def groups_of(m: Manifests) -> list[str]:
    return [s["metadata"]["name"] for s in m.of_kind("StatefulSet")
            if s["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "broker"]


def workload_pods(m: Manifests) -> list[PodTemplate]:
    return [p for p in m.pod_templates() if p.owner_kind != "Pod"]


# -- broker groups and identity ---------------------------------------------------------------


@pytest.mark.parametrize(("groups", "slaves"), [(1, 0), (1, 1), (3, 2)])
def test_one_statefulset_per_group_with_master_plus_slaves(groups: int, slaves: int) -> None:
    m = render({"broker": {"groups": groups, "slavesPerGroup": slaves}})
    names = groups_of(m)
    assert names == [f"{FULLNAME}-broker-{chr(ord('a') + i)}" for i in range(groups)]
    for name in names:
        sts = m.get("StatefulSet", name)
        assert sts["spec"]["replicas"] == 1 + slaves
        # the master starts first, so slaves learn it from their first registration
        assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
        assert sts["spec"]["serviceName"] == f"{name}-headless"
        headless = m.get("Service", f"{name}-headless")
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["publishNotReadyAddresses"] is True
        assert selector_matches({"matchLabels": headless["spec"]["selector"]},
                                sts["spec"]["template"]["metadata"]["labels"])
        # the selector of one group never selects another group's pods
        pods = m.pods_selected_by(sts["spec"]["selector"])
        assert [p.name for p in pods] == [f"{name}-{i}" for i in range(1 + slaves)]


def test_broker_container_runs_the_ordinal_entry_point_then_the_broker() -> None:
    m = render({})
    for name in groups_of(m):
        pod = next(p for p in m.pod_templates() if p.owner_name == name)
        c = pod.container("broker")
        assert c["command"] == ["python", "-m", "services.broker.k8s_env"]
        assert c["args"] == ["python", "-m", "services.broker", "-c", "/etc/pocketmq/broker.conf",
                             "--acl-enable", "true", "--acl-config-file", "/etc/pocketmq-acl/acl.json",
                             "--acl-signature-window-mills", "900000"]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert env["POCKETMQ_BROKER_IP1"]["value"] == "$(POD_IP)"
        # POD_IP is defined before the variable that references it (Kubernetes expands in order)
        order = [e["name"] for e in c["env"]]
        assert order.index("POD_IP") < order.index("POCKETMQ_BROKER_IP1")
        # -c names the broker.conf key of the group's ConfigMap, mounted read-only at /etc/pocketmq
        mount = next(v for v in c["volumeMounts"] if v["name"] == "config")
        assert mount == {"name": "config", "mountPath": "/etc/pocketmq", "readOnly": True}
        volume = next(v for v in pod.spec["volumes"] if v["name"] == "config")
        assert "broker.conf" in m.get("ConfigMap", volume["configMap"]["name"])["data"]
        assert volume["configMap"]["name"] == name


def test_pod_dns_advertising_uses_the_governing_service() -> None:
    m = render({"broker": {"advertise": "podDNS"}})
    c = next(p for p in m.pod_templates() if p.owner_name == f"{FULLNAME}-broker-a").container()
    env = {e["name"]: e for e in c["env"]}
    assert env["POCKETMQ_BROKER_IP1"]["value"] == (
        f"$(POD_NAME).{FULLNAME}-broker-a-headless.$(POD_NAMESPACE).svc.cluster.local")


def test_broker_conf_carries_group_identity_and_the_chart_owned_keys() -> None:
    m = render(VALUE_SETS["three-groups-two-slaves"])
    for letter in "abc":
        conf = broker_conf(m, f"{FULLNAME}-broker-{letter}")
        assert conf["brokerName"] == f"broker-{letter}"
        assert conf["brokerClusterName"] == "DefaultCluster"
        assert conf["brokerRole"] == "ASYNC_MASTER"
        assert "brokerId" not in conf, "brokerId comes from the pod ordinal, never from the shared file"
        assert conf["storePathRootDir"] == "/data/store"
        assert (conf["listenPort"], conf["haListenPort"], conf["metricsPort"]) == ("10911", "10912", "10913")


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_namesrv_deployment_brokers_register_through_the_headless_service(replicas: int) -> None:
    m = render({"namesrv": {"replicas": replicas}})
    deploy = m.get("Deployment", f"{FULLNAME}-namesrv")
    assert deploy["spec"]["replicas"] == replicas
    assert deploy["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert f"{FULLNAME}-namesrv" not in {s["metadata"]["name"] for s in m.of_kind("StatefulSet")}
    pods = [p.name for p in m.pods() if p.owner_name == f"{FULLNAME}-namesrv"]
    assert len(pods) == replicas
    # brokers: the headless Service, which resolves to every ready NameServer pod
    headless = m.get("Service", f"{FULLNAME}-namesrv-headless")
    assert headless["spec"]["clusterIP"] == "None"
    # not-ready pods too: brokers register with a NameServer during its readiness warm-up
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert [p.name for p in m.pods_selected_by(headless["spec"]["selector"], plain_labels=True)] == pods
    assert broker_conf(m, f"{FULLNAME}-broker-a")["namesrvAddr"] == (
        f"{FULLNAME}-namesrv-headless.{NAMESPACE}.svc.cluster.local:9876")
    # clients and port-forward: the ClusterIP Service in front of the same pods
    client_svc = m.get("Service", f"{FULLNAME}-namesrv")
    assert client_svc["spec"]["type"] == "ClusterIP" and "clusterIP" not in client_svc["spec"]
    assert [p.name for p in m.pods_selected_by(client_svc["spec"]["selector"], plain_labels=True)] == pods
    (pdb,) = [p for p in m.of_kind("PodDisruptionBudget") if p["metadata"]["name"] == f"{FULLNAME}-namesrv"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert [p.name for p in m.pods_selected_by(pdb["spec"]["selector"])] == pods
    assert "Deployment" in m.notes() and f"namesrvAddr={FULLNAME}-namesrv-headless." in m.notes()


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_namesrv_statefulset_addr_lists_every_nameserver_by_its_stable_name(replicas: int) -> None:
    m = render({"namesrv": {"kind": "StatefulSet", "replicas": replicas}})
    sts = m.get("StatefulSet", f"{FULLNAME}-namesrv")
    headless = sts["spec"]["serviceName"]
    assert m.get("Service", headless)["spec"]["clusterIP"] == "None"
    suffix = f"{headless}.{NAMESPACE}.svc.cluster.local:9876"
    expected = [f"{FULLNAME}-namesrv-{i}.{suffix}" for i in range(replicas)]
    assert broker_conf(m, f"{FULLNAME}-broker-a")["namesrvAddr"].split(";") == expected


def test_namesrv_kind_defaults_to_deployment_and_explicit_override_wins() -> None:
    assert default_values()["namesrv"]["kind"] == "Deployment"
    assert "Deployment" in render({}).kinds()
    m = render({"broker": {"namesrvAddr": "ns1.example:9876;ns2.example:9876"}})
    assert broker_conf(m, f"{FULLNAME}-broker-a")["namesrvAddr"] == "ns1.example:9876;ns2.example:9876"


def test_client_service_selects_only_the_groups_master() -> None:
    # controllerMode none: ordinal 0, by its pod name
    m = render(VALUE_SETS["static-roles"])
    for name in groups_of(m):
        svc = m.get("Service", name)
        assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == f"{name}-0"
        selected = m.pods_selected_by(svc["spec"]["selector"], plain_labels=True)
        assert [p.name for p in selected] == [f"{name}-0"]


@pytest.mark.parametrize("value_set", ["three-groups-two-slaves", "etcd-controller"])
def test_under_a_controller_the_client_service_follows_the_role_label(value_set: str) -> None:
    m = render(VALUE_SETS[value_set])
    for name in groups_of(m):
        selector = m.get("Service", name)["spec"]["selector"]
        assert selector["pocketmq.io/role"] == "master"
        assert "statefulset.kubernetes.io/pod-name" not in selector
        group_pods = [p for p in m.pods() if p.owner_name == name]
        assert len(group_pods) > 1
        for master in group_pods:  # whichever pod holds the lease, and only it
            selected = [p.name for p in with_master(m.pods(), master.name)
                        if selector_matches({"matchLabels": selector}, p.labels)]
            assert selected == [master.name]


# -- rollout triggers -------------------------------------------------------------------------


def checksum(m: Manifests, sts: str) -> str:
    return str(m.get("StatefulSet", sts)["spec"]["template"]["metadata"]["annotations"]["checksum/config"])


def test_checksum_is_the_hash_of_the_rendered_broker_conf() -> None:
    m = render({})
    for name in groups_of(m):
        text = m.get("ConfigMap", name)["data"]["broker.conf"]
        assert checksum(m, name) == hashlib.sha256(text.rstrip("\n").encode()).hexdigest()


@pytest.mark.parametrize("change", [
    {"broker": {"config": {"fileReservedTime": 48}}},
    {"broker": {"flushDiskType": "SYNC_FLUSH"}},
    {"broker": {"masterRole": "SYNC_MASTER"}},
    {"broker": {"namesrvAddr": "ns1.example:9876"}},
    {"metrics": {"enabled": False}},
])
def test_a_broker_conf_change_changes_the_pod_template(change: dict[str, object]) -> None:
    before, after = render({}), render(change)
    name = f"{FULLNAME}-broker-a"
    assert before.get("ConfigMap", name)["data"] != after.get("ConfigMap", name)["data"]
    assert checksum(before, name) != checksum(after, name)


def test_unrelated_changes_keep_the_checksum() -> None:
    name = f"{FULLNAME}-broker-a"
    base = render({})
    for change in ({"broker": {"resources": {"limits": {"memory": "4Gi"}}}}, {"image": {"tag": "9.9.9"}},
                   {"namesrv": {"config": {"brokerChannelExpiredTime": 60000}}},
                   # Deployment NameServers: brokers find a new pod through DNS, no roll needed
                   {"namesrv": {"replicas": 3}}):
        assert checksum(render(change), name) == checksum(base, name), change


def test_statefulset_namesrv_replicas_roll_the_brokers() -> None:
    name = f"{FULLNAME}-broker-a"
    two = render({"namesrv": {"kind": "StatefulSet", "replicas": 2}})
    three = render({"namesrv": {"kind": "StatefulSet", "replicas": 3}})
    assert checksum(two, name) != checksum(three, name)


def test_namesrv_conf_change_rolls_the_nameservers() -> None:
    def ns_checksum(m: Manifests) -> str:
        (pod,) = [p for p in m.pod_templates() if p.owner_name == f"{FULLNAME}-namesrv"]
        return str(pod.metadata["annotations"]["checksum/config"])

    base = render({})
    changed = render({"namesrv": {"config": {"brokerChannelExpiredTime": 60000}}})
    conf = changed.get("ConfigMap", f"{FULLNAME}-namesrv")["data"]["namesrv.conf"]
    assert "brokerChannelExpiredTime=60000" in conf
    assert ns_checksum(base) != ns_checksum(changed)


# -- networking -------------------------------------------------------------------------------


def rules_with_port(policy: dict[str, object], port: int) -> list[dict[str, object]]:
    ingress = policy["spec"]["ingress"]  # type: ignore[index]
    return [r for r in ingress if any(p["port"] == port for p in r.get("ports", []))]


@pytest.mark.parametrize("value_set", ["default", "three-groups-two-slaves", "everything-on"])
def test_ha_port_only_reachable_from_the_groups_own_pods(value_set: str) -> None:
    m = render(VALUE_SETS[value_set])
    all_pods = m.pods()
    policies = {p["metadata"]["name"]: p for p in m.of_kind("NetworkPolicy")}
    for name in groups_of(m):
        group_pods = {p.name for p in all_pods if p.owner_name == name}
        assert group_pods
        policy = policies[name]
        assert "Ingress" in policy["spec"]["policyTypes"]
        # the policy applies to exactly this group's pods
        selected = {p.name for p in m.pods_selected_by(policy["spec"]["podSelector"])}
        assert selected == group_pods
        ha_port = next(p for p in all_pods if p.owner_name == name).port("ha")
        rules = rules_with_port(policy, ha_port)
        assert len(rules) == 1, "exactly one rule opens the HA port"
        peers = rules[0]["from"]
        assert peers, "an empty 'from' would allow every source"
        for peer in peers:
            assert set(peer) == {"podSelector"}, "no namespaceSelector / ipBlock peers on the HA port"
            allowed = {p.name for p in m.pods_selected_by(peer["podSelector"])}
            assert allowed == group_pods, f"{name}: HA port open to {allowed}"
        # no other policy opens the HA port of these pods
        for other_name, other in policies.items():
            overlap = selected & {p.name for p in m.pods_selected_by(other["spec"]["podSelector"])}
            if other_name != name and overlap:
                assert not rules_with_port(other, ha_port)


def test_grpc_and_metrics_open_by_default_and_restricted_when_opted_in() -> None:
    m = render({})
    policy = m.get("NetworkPolicy", f"{FULLNAME}-broker-a")
    assert all("from" not in r for r in rules_with_port(policy, 10911) + rules_with_port(policy, 10913))
    assert f"{FULLNAME}-namesrv" not in {p["metadata"]["name"] for p in m.of_kind("NetworkPolicy")}

    m = render(VALUE_SETS["everything-on"])
    for policy_name, grpc in ((f"{FULLNAME}-broker-a", 10911), (f"{FULLNAME}-namesrv", 9876)):
        policy = m.get("NetworkPolicy", policy_name)
        (rule,) = rules_with_port(policy, grpc)
        allowed = {p.owner_name for peer in rule["from"] if "podSelector" in peer
                   for p in m.pods_selected_by(peer["podSelector"])}
        # every pod of the release (brokers, NameServers, the helm test pod) may call gRPC
        assert allowed == {p.owner_name for p in m.pod_templates()}
        assert {"namespaceSelector": {"matchLabels": {"team": "apps"}}} in rule["from"]
        metrics_port = 10913 if "broker" in policy_name else 9877
        (metrics_rule,) = rules_with_port(policy, metrics_port)
        assert metrics_rule["from"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_every_service_selects_pods_that_serve_its_target_ports(value_set: str) -> None:
    m = render(VALUE_SETS[value_set])
    for svc in m.of_kind("Service"):
        pods = m.pods_selected_by(svc["spec"]["selector"], plain_labels=True)
        assert pods, f"Service {svc['metadata']['name']} selects no pod"
        for port in svc["spec"]["ports"]:
            for pod in pods:
                target = port["targetPort"]
                number = pod.port(target) if isinstance(target, str) else target
                assert number == port["port"], (svc["metadata"]["name"], port)


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_pdbs_select_their_components_pods(value_set: str) -> None:
    m = render(VALUE_SETS[value_set])
    for pdb in m.of_kind("PodDisruptionBudget"):
        pods = workload_pods(m)
        selected = {p.owner_name for p in pods if selector_matches(pdb["spec"]["selector"], p.labels)}
        assert selected == {pdb["metadata"]["name"]}


# -- probes, lifecycle, security --------------------------------------------------------------


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_probes_are_native_grpc_health_checks_on_the_grpc_port(value_set: str) -> None:
    """... or, with tls.enabled, on the plaintext health-only port (kubelet probes cannot do TLS)."""
    m = render(VALUE_SETS[value_set])
    tls = VALUE_SETS[value_set].get("tls", {}).get("enabled", False)
    for pod in workload_pods(m):
        for c in pod.spec["containers"]:
            grpc_port = pod.port("health" if tls else "grpc")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                handlers = set(c[probe]) - {"periodSeconds", "timeoutSeconds", "failureThreshold"}
                assert handlers == {"grpc"}, probe
                expected = {"port": grpc_port}
                if probe == "readinessProbe" and pod.owner_name == f"{FULLNAME}-namesrv":
                    expected["service"] = "pocketmq.namesrv.v1.NameServer"  # NOT_SERVING in warm-up
                assert c[probe]["grpc"] == expected, (pod.owner_name, probe)


def test_termination_leaves_time_for_prestop_drain_flush_and_unregister() -> None:
    from services.broker.config import BrokerConfig
    from services.namesrv.config import NamesrvConfig

    m = render({})
    budgets = {"broker": BrokerConfig().shutdown_grace_period / 1000 + 30,  # + flush + unregister
               "namesrv": NamesrvConfig().shutdown_grace_period / 1000}
    for pod in workload_pods(m):
        c = pod.container()
        sleep = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        component = pod.labels["app.kubernetes.io/component"]
        assert pod.spec["terminationGracePeriodSeconds"] >= sleep + budgets[component], pod.owner_name


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_pods_run_non_root_with_read_only_root_filesystem_and_limits(value_set: str) -> None:
    m = render(VALUE_SETS[value_set])
    for pod in m.pod_templates():
        psc = pod.spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.spec["enableServiceLinks"] is False, "POCKETMQ_* service env vars would be config keys"
        for c in pod.spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, pod.owner_name
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (pod.owner_name, kind)
            writable = {v["mountPath"] for v in c.get("volumeMounts", []) if not v.get("readOnly")}
            assert writable <= {"/data", "/tmp"}, writable


def test_only_broker_pods_get_a_token_and_the_role_allows_exactly_their_pods() -> None:
    m = render(VALUE_SETS["three-groups-two-slaves"])
    role = m.get("Role", f"{FULLNAME}-broker-pod-labeler")
    (rule,) = role["rules"]
    assert rule["resources"] == ["pods"] and sorted(rule["verbs"]) == ["get", "patch"]
    expected = [f"{FULLNAME}-broker-{g}-{i}" for g in "abc" for i in range(3)]
    assert rule["resourceNames"] == expected
    binding = m.get("RoleBinding", f"{FULLNAME}-broker-pod-labeler")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (subject,) = binding["subjects"]
    for pod in m.pod_templates():
        broker = pod.labels["app.kubernetes.io/component"] == "broker"
        assert pod.spec["automountServiceAccountToken"] is broker, pod.owner_name
        if broker:
            assert pod.spec["serviceAccountName"] == subject["name"]
            env = {e["name"]: e for e in pod.container()["env"]}
            assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    m = render({"broker": {"rbac": {"create": False}, "controllerMode": "none"}})
    assert "Role" not in m.kinds()
    assert all(p.spec["automountServiceAccountToken"] is False for p in m.pod_templates())
    # controllerMode kubernetes needs the token for its Lease even with your own RBAC
    m = render({"broker": {"rbac": {"create": False}}})
    assert "Role" not in m.kinds()
    assert [p.spec["automountServiceAccountToken"] for p in m.pod_templates()
            if p.labels["app.kubernetes.io/component"] == "broker"] == [True]


def test_kubernetes_mode_role_allows_exactly_the_groups_leases() -> None:
    m = render(VALUE_SETS["three-groups-two-slaves"])
    role = m.get("Role", f"{FULLNAME}-broker-leases")
    create, named = role["rules"]
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
    assert create["verbs"] == ["create"] and "resourceNames" not in create
    assert sorted(named["verbs"]) == ["get", "list", "patch", "update", "watch"]
    leases = [f"{FULLNAME}-broker-{g}-leader" for g in "abc"]
    assert named["resourceNames"] == [n for lease in leases for n in (lease, f"{lease}-members")]
    binding = m.get("RoleBinding", f"{FULLNAME}-broker-leases")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    (subject,) = binding["subjects"]
    for pod in m.pod_templates():
        if pod.labels["app.kubernetes.io/component"] == "broker":
            assert pod.spec["serviceAccountName"] == subject["name"]
            assert pod.spec["automountServiceAccountToken"] is True
    # the pods' own labels stay a separate, unchanged Role (the master Service selects by them)
    assert m.get("Role", f"{FULLNAME}-broker-pod-labeler")["rules"][0]["resources"] == ["pods"]
    for other in ("static-roles", "etcd-controller"):
        names = {o["metadata"]["name"] for o in render(VALUE_SETS[other]).of_kind("Role")}
        assert names == {f"{FULLNAME}-broker-pod-labeler"}, other


@pytest.mark.parametrize(("value_set", "mode"), [("default", "kubernetes"), ("etcd-controller", "etcd"),
                                                 ("static-roles", "none")])
def test_controller_mode_reaches_every_broker(value_set: str, mode: str) -> None:
    m = render(VALUE_SETS[value_set])
    for name in groups_of(m):
        conf = broker_conf(m, name)
        env = {e["name"]: e.get("value") for e in m.get("StatefulSet", name)["spec"]["template"]["spec"][
            "containers"][0]["env"]}
        assert env["POCKETMQ_CONTROLLER_MODE"] == mode
        assert "controllerMode" not in conf  # one owner: the environment (k8s_env reads it too)
        if mode == "none":
            assert not {k for k in conf if k.startswith("controller")}
            continue
        assert (conf["controllerLeaseTtl"], conf["controllerRenewInterval"]) == ("3000", "500")
        if mode == "kubernetes":
            assert conf["controllerK8sLeaseName"] == f"{name}-leader"
            assert "controllerEtcdEndpoints" not in conf
        else:
            assert conf["controllerEtcdEndpoints"] == "etcd-0.etcd:2379;etcd-1.etcd:2379;etcd-2.etcd:2379"
            assert "controllerK8sLeaseName" not in conf


def test_store_is_a_persistent_volume_claim_per_broker() -> None:
    m = render({"broker": {"persistence": {"size": "50Gi", "storageClass": "fast"}}})
    sts = m.get("StatefulSet", f"{FULLNAME}-broker-a")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "store"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    mount = next(v for v in mounts if v["name"] == "store")
    assert broker_conf(m, f"{FULLNAME}-broker-a")["storePathRootDir"].startswith(mount["mountPath"] + "/")
    m = render({"broker": {"persistence": {"enabled": False}}})
    sts = m.get("StatefulSet", f"{FULLNAME}-broker-a")
    assert "volumeClaimTemplates" not in sts["spec"]
    assert {"name": "store", "emptyDir": {}} in sts["spec"]["template"]["spec"]["volumes"]


# -- metrics ----------------------------------------------------------------------------------


def test_every_pod_has_a_named_metrics_port_unless_metrics_are_off() -> None:
    m = render({})
    for pod in workload_pods(m):
        assert pod.port("metrics") in (9877, 10913)
    m = render({"metrics": {"enabled": False}})
    for pod in workload_pods(m):
        with pytest.raises(KeyError):
            pod.port("metrics")
    assert broker_conf(m, f"{FULLNAME}-broker-a")["metricsPort"] == "0"
    args = next(p for p in m.pod_templates() if p.owner_name == f"{FULLNAME}-namesrv").container()["args"]
    assert args[args.index("--metrics-port") + 1] == "0"
    assert not any(o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"] for o in m)


def test_servicemonitor_scrapes_every_pod_through_a_metrics_port() -> None:
    m = render(VALUE_SETS["everything-on"])
    (sm,) = m.of_kind("ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    services = [s for s in m.of_kind("Service")
                if selector_matches(sm["spec"]["selector"], s["metadata"]["labels"])]
    scraped = set()
    for svc in services:
        assert any(p["name"] == "metrics" for p in svc["spec"]["ports"]), svc["metadata"]["name"]
        scraped |= {p.owner_name for p in m.pods_selected_by(svc["spec"]["selector"], plain_labels=True)}
    assert scraped == {p.owner_name for p in workload_pods(m)}
    # the job label is the component, which the alert rules rely on (job="namesrv")
    assert sm["spec"]["jobLabel"] == "app.kubernetes.io/component"
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in services} == {"namesrv", "broker"}


def test_dashboards_configmap_ships_every_dashboard_file_with_the_sidecar_label() -> None:
    m = render({"metrics": {"grafanaDashboard": {"namespace": "monitoring",
                                                 "annotations": {"grafana_folder": "MQ"}}}})
    (cm,) = [c for c in m.of_kind("ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "MQ"}
    files = {p.name: p.read_text() for p in (CHART_DIR / "dashboards").glob("*.json")}
    assert files and set(cm["data"]) == set(files)
    for name, text in files.items():
        assert json.loads(cm["data"][name]) == json.loads(text)


# -- helm test --------------------------------------------------------------------------------


def test_helm_test_pod_round_trips_through_the_namesrv_service() -> None:
    m = render({})
    (pod,) = m.of_kind("Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    c = pod["spec"]["containers"][0]
    script = c["args"][0]
    for step in ("pocketmq cluster list", "pocketmq send", "pocketmq consume"):
        assert step in script
    env = {e["name"]: e for e in c["env"]}
    assert env["POCKETMQ_ACCESS"]["value"] == "direct"
    host, port = env["POCKETMQ_NAMESRV"]["value"].split(":")
    assert host == f"{FULLNAME}-namesrv.{NAMESPACE}.svc.cluster.local"
    svc = m.get("Service", f"{FULLNAME}-namesrv")
    assert int(port) in [p["port"] for p in svc["spec"]["ports"]]
    assert "tests" not in str(render({"tests": {"enabled": False}}).kinds())
    assert not render({"tests": {"enabled": False}}).of_kind("Pod")


def test_chart_files_have_no_trailing_whitespace_in_rendered_yaml() -> None:
    m = render(VALUE_SETS["everything-on"])
    for path, text in m.files.items():
        bad = [n for n, line in enumerate(text.splitlines(), 1) if line != line.rstrip()]
        assert not bad, f"{Path(path).name}: trailing whitespace on lines {bad[:5]}"

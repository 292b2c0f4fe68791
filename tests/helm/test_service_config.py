"""The rendered configuration is what the services accept: every broker pod's broker.conf plus its
Kubernetes-resolved environment (downward API, ``$(VAR)`` expansion, and the ordinal mapping of
``services.broker.k8s_env``) loads through the broker's own parser into the intended identity, and
the NameServer's args and namesrv.conf load through the NameServer's parser."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from services.broker import k8s_env
from tests.helm.chart import NAMESPACE, VALUE_SETS, Manifests, PodTemplate, render
from tests.helm.podenv import container_argv, container_env, expand


def pod_object(pod: PodTemplate, ip: str) -> dict[str, Any]:
    return {"metadata": {**pod.metadata, "name": pod.name, "namespace": NAMESPACE, "uid": "uid-" + pod.name},
            "spec": pod.spec, "status": {"podIP": ip}}


def write_config_maps(m: Manifests, pod: PodTemplate, container: dict[str, Any],
                      root: Path) -> dict[str, str]:
    """Materialise the container's ConfigMap mounts, and the mounts of Secrets the chart renders
    (e.g. the generated ACL Secret), under ``root``; returns mountPath -> local dir."""
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    secrets = {s["metadata"]["name"]: s for s in m.of_kind("Secret")}
    mapping = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        local = root / mount["mountPath"].strip("/")
        local.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            for key, text in m.get("ConfigMap", volume["configMap"]["name"])["data"].items():
                (local / key).write_text(text)
        elif "secret" in volume and volume["secret"]["secretName"] in secrets:
            for key, value in (secrets[volume["secret"]["secretName"]].get("data") or {}).items():
                (local / key).write_bytes(base64.b64decode(value))
        mapping[mount["mountPath"]] = str(local)
    return mapping


def localise(argv: list[str], mounts: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if arg == mount_path or arg.startswith(mount_path + "/"):
                arg = local + arg[len(mount_path):]
                break
        out.append(arg)
    return out


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_broker_pod_loads_its_intended_identity(value_set: str, tmp_path: Path) -> None:
    from services.broker.__main__ import SECTIONS, build_parser
    from services.common.config import from_arguments

    values = VALUE_SETS[value_set]
    m = render(values)
    master_role = values.get("broker", {}).get("masterRole", "ASYNC_MASTER")
    brokers = [p for p in m.pods() if p.labels["app.kubernetes.io/component"] == "broker"]
    assert brokers
    for n, pod in enumerate(brokers):
        ip = f"10.1.0.{n + 10}"
        c = pod.container("broker")
        env = container_env(c, pod_object(pod, ip), secrets=m.secrets())
        argv = container_argv(c, env)
        # the container command is the ordinal wrapper; what it execs is the rest
        assert argv[:3] == ["python", "-m", "services.broker.k8s_env"]
        exec_argv = argv[3:]
        assert exec_argv[:3] == ["python", "-m", "services.broker"]
        final_env = {**env, **k8s_env.broker_environment(env["POD_NAME"], env["POCKETMQ_CONTROLLER_MODE"])}
        mounts = write_config_maps(m, pod, c, tmp_path / pod.name)
        args = build_parser().parse_args(localise(exec_argv[3:], mounts))
        broker, store = from_arguments(args, SECTIONS, environ=final_env)
        mode = values.get("broker", {}).get("controllerMode", "kubernetes")
        assert broker.controller_mode == mode
        if mode == "none":
            assert broker.broker_id == pod.ordinal, pod.name
            assert broker.broker_role.name == (master_role if pod.ordinal == 0 else "SLAVE"), pod.name
        else:  # every pod is a member (id ordinal + 1) that takes the master role with the lease
            assert broker.broker_id == pod.ordinal + 1, pod.name
            assert broker.broker_role.name == master_role, pod.name
        if mode == "kubernetes":
            assert broker.controller_k8s_lease_name == f"{pod.owner_name}-leader"
            assert not broker.controller_k8s_api_server and not broker.controller_k8s_namespace
        assert broker.broker_name == pod.labels["pocketmq.io/broker-name"]
        assert broker.broker_cluster_name == pod.labels["pocketmq.io/cluster"]
        if values.get("broker", {}).get("advertise") == "podDNS":
            assert broker.broker_ip1 == f"{pod.name}.{pod.owner_name}-headless.{NAMESPACE}.svc.cluster.local"
        else:
            assert broker.broker_ip1 == ip
        # the ports the broker binds are the pod's named container ports
        assert broker.listen_port == pod.port("grpc")
        assert broker.effective_ha_port == pod.port("ha")
        metrics_on = values.get("metrics", {}).get("enabled", True)
        assert broker.effective_metrics_port == (pod.port("metrics") if metrics_on else 0)
        # the store lives on the store volume
        store_mount = next(v["mountPath"] for v in c["volumeMounts"] if v["name"] == "store")
        assert store.store_path_root_dir.startswith(store_mount + "/")
        expected_flush = values.get("broker", {}).get("flushDiskType", "ASYNC_FLUSH")
        assert store.flush_disk_type.name == expected_flush
        # the HA secret (from the Secret, through the environment) or none
        expected_secret = values.get("broker", {}).get("haAuth", {}).get("value", "")
        assert broker.ha_auth_secret == expected_secret


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_nameserver_pod_loads_its_config(value_set: str, tmp_path: Path) -> None:
    from services.common.config import from_arguments
    from services.namesrv.__main__ import build_parser
    from services.namesrv.config import NamesrvConfig

    values = VALUE_SETS[value_set]
    m = render(values)
    for n, pod in enumerate(p for p in m.pods() if p.labels["app.kubernetes.io/component"] == "namesrv"):
        c = pod.container("namesrv")
        env = container_env(c, pod_object(pod, f"10.2.0.{n + 10}"))
        argv = container_argv(c, env)
        assert argv[:3] == ["python", "-m", "services.namesrv"]
        mounts = write_config_maps(m, pod, c, tmp_path / pod.name)
        (config,) = from_arguments(build_parser().parse_args(localise(argv[3:], mounts)), [NamesrvConfig],
                                   environ=env)
        assert config.listen == f"0.0.0.0:{pod.port('grpc')}"
        metrics_on = values.get("metrics", {}).get("enabled", True)
        assert config.metrics_port == (pod.port("metrics") if metrics_on else 0)
        warm_up_s = values.get("namesrv", {}).get("readinessWarmUpSeconds", 15)
        assert config.readiness_warm_up_mills == warm_up_s * 1000


def test_namesrv_config_values_reach_the_nameserver(tmp_path: Path) -> None:
    from services.common.config import from_arguments
    from services.namesrv.__main__ import build_parser
    from services.namesrv.config import NamesrvConfig

    m = render({"namesrv": {"config": {"brokerChannelExpiredTime": 60000,
                                       "scanNotActiveBrokerInterval": 2000},
                            "readinessWarmUpSeconds": 0}})
    pod = next(p for p in m.pods() if p.labels["app.kubernetes.io/component"] == "namesrv")
    c = pod.container()
    mounts = write_config_maps(m, pod, c, tmp_path)
    (config,) = from_arguments(build_parser().parse_args(localise(container_argv(c, {})[3:], mounts)),
                               [NamesrvConfig], environ={})
    assert (config.broker_channel_expired_time, config.scan_not_active_broker_interval) == (60000, 2000)
    assert config.readiness_warm_up_mills == 0


def test_the_warm_up_is_set_through_its_value_only() -> None:
    with pytest.raises(Exception, match="readinessWarmUpMills"):
        render({"namesrv": {"config": {"readinessWarmUpMills": 1000}}})


def test_kubernetes_env_expansion_semantics() -> None:
    env = {"A": "1", "POD_IP": "10.0.0.1"}
    assert expand("$(POD_IP):10911", env) == "10.0.0.1:10911"
    assert expand("$$(POD_IP)", env) == "$(POD_IP)"
    assert expand("$(MISSING)-$(A)", env) == "$(MISSING)-1"

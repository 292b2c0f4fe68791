"""The local-process harness itself (no process is started): cluster DNS from the rendered objects,
including rewrite 5 (a headless Service name in a NameServer list -> every pod's address)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helm.chart import NAMESPACE, RELEASE, render
from tests.helm.localpods import NAMESRV_LIST_ENV, NAMESRV_LIST_FLAG, ClusterError, LocalCluster

FULLNAME = f"{RELEASE}-pocketmq"
HEADLESS = f"{FULLNAME}-namesrv-headless"
FQDN = f"{HEADLESS}.{NAMESPACE}.svc.cluster.local"


def local(tmp_path: Path, values: Mapping[str, Any] | None = None) -> LocalCluster:
    manifests = render(values or {"namesrv": {"kind": "Deployment", "replicas": 3}})
    return LocalCluster(manifests, tmp_path, NAMESPACE, subnet="127.77.1")


def namesrv_addrs(cluster: LocalCluster) -> list[str]:
    return [p.addr("grpc") for p in cluster.by_component("namesrv")]


def test_headless_service_resolves_to_every_nameserver_pod(tmp_path: Path) -> None:
    cluster = local(tmp_path)
    expected = namesrv_addrs(cluster)
    assert len(expected) == 3 and len(set(expected)) == 3
    for name in (HEADLESS, f"{HEADLESS}.{NAMESPACE}", FQDN):
        assert cluster.resolve_all(name, 9876) == expected
        with pytest.raises(ClusterError, match="headless Service with 3 pods used as one address"):
            cluster.resolve(name, 9876)
    # the client Service is one address (kube-proxy picks a pod)
    assert cluster.resolve_all(f"{FULLNAME}-namesrv", 9876) == [cluster.resolve(f"{FULLNAME}-namesrv", 9876)]
    with pytest.raises(ClusterError, match="does not resolve"):
        cluster.resolve_all("nope.mq.svc.cluster.local", 9876)


def test_broker_conf_namesrv_addr_is_expanded_and_the_rewrite_recorded(tmp_path: Path) -> None:
    cluster = local(tmp_path)
    broker = cluster.pod(f"{FULLNAME}-broker-a-0")
    cluster._prepare(broker)
    conf = (broker.dir / "mnt" / "etc" / "pocketmq" / "broker.conf").read_text()
    (line,) = [x for x in conf.splitlines() if x.startswith("namesrvAddr=")]
    assert line == "namesrvAddr=" + ";".join(namesrv_addrs(cluster))
    assert any(f"namesrvAddr entry '{FQDN}:9876'" in r and "headless Service" in r for r in broker.rewrites)


def test_env_and_flag_namesrv_lists_are_expanded_too(tmp_path: Path) -> None:
    values = {"namesrv": {"kind": "Deployment", "replicas": 2}, "broker": {
        "extraEnv": [{"name": NAMESRV_LIST_ENV, "value": f"{FQDN}:9876;10.1.2.3:9876"}],
        "extraArgs": [NAMESRV_LIST_FLAG, f"{HEADLESS}:9876",
                      f"{NAMESRV_LIST_FLAG}={HEADLESS}.{NAMESPACE}:9876"],
    }}
    cluster = local(tmp_path, values)
    broker = cluster.pod(f"{FULLNAME}-broker-a-0")
    cluster._prepare(broker)
    both = ";".join(namesrv_addrs(cluster))
    assert broker.env[NAMESRV_LIST_ENV] == both + ";10.1.2.3:9876"
    i = broker.argv.index(NAMESRV_LIST_FLAG)
    assert broker.argv[i + 1] == both
    assert f"{NAMESRV_LIST_FLAG}={both}" in broker.argv


def test_a_headless_name_outside_a_namesrv_list_is_still_an_error(tmp_path: Path) -> None:
    values = {"namesrv": {"kind": "Deployment"},
              "broker": {"extraEnv": [{"name": "SOME_ADDR", "value": f"{FQDN}:9876"}]}}
    cluster = local(tmp_path, values)
    with pytest.raises(ClusterError, match="used as one address"):
        cluster._prepare(cluster.pod(f"{FULLNAME}-broker-a-0"))


def test_statefulset_kind_names_each_pod(tmp_path: Path) -> None:
    cluster = local(tmp_path, {"namesrv": {"kind": "StatefulSet", "replicas": 2}})
    broker = cluster.pod(f"{FULLNAME}-broker-a-0")
    cluster._prepare(broker)
    conf = (broker.dir / "mnt" / "etc" / "pocketmq" / "broker.conf").read_text()
    assert "namesrvAddr=" + ";".join(namesrv_addrs(cluster)) in conf.splitlines()
    assert not any("headless Service: every pod" in r for r in broker.rewrites)

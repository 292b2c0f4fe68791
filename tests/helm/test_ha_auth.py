"""``broker.haAuth``: the HA port's shared secret reaches every broker container as
``POCKETMQ_HA_AUTH_SECRET`` through a ``secretKeyRef`` exactly when it is configured, from an
existing Secret (then no Secret is rendered) or from one the chart generates; it never lands in a
ConfigMap or any other object; a generated secret's change rolls the brokers; contradictory or
weak values are refused at render time; and the broker's own parser gets the secret."""

from __future__ import annotations

import base64
from typing import Any

import helm_python as helm
import pytest

from services.broker import k8s_env
from tests.helm.chart import HA_AUTH_VALUE, NAMESPACE, RELEASE, VALUE_SETS, Manifests, lint, render
from tests.helm.podenv import container_argv, container_env
from tests.helm.test_service_config import localise, pod_object, write_config_maps

FULLNAME = f"{RELEASE}-pocketmq"
ENV = "POCKETMQ_HA_AUTH_SECRET"
GENERATED = f"{FULLNAME}-ha-auth"
EXISTING: dict[str, Any] = {"broker": {"groups": 2,
                                       "haAuth": {"existingSecret": "pocketmq-ha", "secretKey": "token"}}}
CREATED: dict[str, Any] = {"broker": {"groups": 2, "haAuth": {"create": True, "value": HA_AUTH_VALUE}}}


def broker_containers(m: Manifests) -> list[dict[str, Any]]:
    return [p.container("broker") for p in m.pod_templates()
            if p.labels.get("app.kubernetes.io/component") == "broker"]


def ha_env(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in container.get("env", []) if e["name"] == ENV]


def every_container(m: Manifests) -> list[dict[str, Any]]:
    return [c for p in m.pod_templates() for c in p.spec["containers"]]


@pytest.mark.parametrize("values", [{}, VALUE_SETS["everything-on"], VALUE_SETS["sync-master"],
                                    {"broker": {"haAuth": {"create": False, "secretKey": "other"}}}])
def test_no_env_and_no_secret_unless_configured(values: dict[str, Any]) -> None:
    m = render(values)
    assert not m.of_kind("Secret")
    assert all(not ha_env(c) for c in every_container(m))
    for sts in m.of_kind("StatefulSet"):
        assert "checksum/ha-auth" not in sts["spec"]["template"]["metadata"].get("annotations", {})


def test_existing_secret_is_referenced_and_no_secret_is_rendered() -> None:
    m = render(EXISTING)
    assert not m.of_kind("Secret"), "existingSecret: the chart must not render a Secret"
    containers = broker_containers(m)
    assert len(containers) == 2
    for c in containers:
        (entry,) = ha_env(c)
        assert entry == {"name": ENV, "valueFrom": {"secretKeyRef": {"name": "pocketmq-ha", "key": "token"}}}
    # only broker containers get it (not the NameServers, not the helm test pod)
    assert sum(len(ha_env(c)) for c in every_container(m)) == 2
    for sts in m.of_kind("StatefulSet"):  # nothing to hash: the operator restarts after a change
        assert "checksum/ha-auth" not in sts["spec"]["template"]["metadata"].get("annotations", {})


def test_generated_secret_holds_the_value_and_every_broker_references_it() -> None:
    m = render(CREATED)
    (secret,) = m.of_kind("Secret")
    assert secret["metadata"]["name"] == GENERATED and secret["metadata"]["namespace"] == NAMESPACE
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["secret"]).decode() == HA_AUTH_VALUE
    assert m.secrets() == {GENERATED: {"secret": HA_AUTH_VALUE}}
    for c in broker_containers(m):
        (entry,) = ha_env(c)
        assert entry["valueFrom"] == {"secretKeyRef": {"name": GENERATED, "key": "secret"}}
        assert "value" not in entry


def test_the_secret_is_nowhere_but_in_its_secret() -> None:
    m = render(CREATED)
    encoded = base64.b64encode(HA_AUTH_VALUE.encode()).decode()
    for path, text in m.files.items():
        if path.endswith("ha-auth-secret.yaml"):
            assert encoded in text and HA_AUTH_VALUE not in text
        else:
            assert HA_AUTH_VALUE not in text and encoded not in text, f"{path} shows the secret"


def test_a_new_generated_secret_rolls_the_brokers() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        sts = render(values).get("StatefulSet", f"{FULLNAME}-broker-a")
        return dict(sts["spec"]["template"]["metadata"]["annotations"])

    before = annotations(CREATED)
    after = annotations({"broker": {"groups": 2, "haAuth": {"create": True, "value": HA_AUTH_VALUE + "-2"}}})
    assert before["checksum/ha-auth"] != after["checksum/ha-auth"]
    assert before["checksum/config"] == after["checksum/config"]
    assert HA_AUTH_VALUE not in before["checksum/ha-auth"]


def test_existing_secret_reaches_the_brokers_parser(tmp_path: Any) -> None:
    from services.broker.__main__ import SECTIONS, build_parser
    from services.common.config import from_arguments

    m = render(EXISTING)
    operator_secret = {"pocketmq-ha": {"token": "created-by-the-operator-0123456789"}}
    for n, pod in enumerate(p for p in m.pods() if p.labels["app.kubernetes.io/component"] == "broker"):
        c = pod.container("broker")
        pod_obj = pod_object(pod, f"10.1.0.{n + 10}")
        with pytest.raises(KeyError, match="pocketmq-ha"):  # no Secret: the kubelet would not start it
            container_env(c, pod_obj, secrets={})
        env = container_env(c, pod_obj, secrets=operator_secret)
        final_env = {**env, **k8s_env.broker_environment(env["POD_NAME"])}
        mounts = write_config_maps(m, pod, c, tmp_path / pod.name)
        args = build_parser().parse_args(localise(container_argv(c, env)[6:], mounts))
        broker, _ = from_arguments(args, SECTIONS, environ=final_env)
        assert broker.ha_auth_secret == "created-by-the-operator-0123456789"


@pytest.mark.parametrize("kube_version", ["1.30", "1.33"])
def test_existing_secret_lints_clean(kube_version: str) -> None:
    assert lint(EXISTING, kube_version) == []


@pytest.mark.parametrize(("values", "message"), [
    ({"broker": {"haAuth": {"create": True, "value": "too-short"}}}, "/broker/haAuth/value"),
    ({"broker": {"haAuth": {"create": True}}}, "/broker/haAuth/value"),
    ({"broker": {"haAuth": {"create": True, "value": HA_AUTH_VALUE, "existingSecret": "mine"}}},
     "either existingSecret (recommended) or create, not both"),
    ({"broker": {"haAuth": {"value": HA_AUTH_VALUE}}}, "broker.haAuth.create is false"),
    ({"broker": {"haAuth": {"existingSecret": "mine", "value": HA_AUTH_VALUE}}}, "value is ignored"),
    ({"broker": {"haAuth": {"existingSecret": "Not_A_Name"}}}, "/broker/haAuth/existingSecret"),
    ({"broker": {"haAuth": {"secretKey": "a/b"}}}, "/broker/haAuth/secretKey"),
    ({"broker": {"haAuth": {"enabled": True}}}, "enabled"),
    ({"broker": {"config": {"haAuthSecret": HA_AUTH_VALUE}}}, "haAuthSecret"),
])
def test_invalid_ha_auth_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError) as info:
        render(values)
    assert message in str(info.value)
    assert HA_AUTH_VALUE not in str(info.value) and "too-short" not in str(info.value), "value shown"

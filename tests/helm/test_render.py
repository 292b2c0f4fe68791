"""The chart renders, passes ``helm lint --strict`` and validates against the Kubernetes 1.30 and
1.33 schemas in strict mode (unknown fields are errors) for every value set; invalid values are
rejected by values.schema.json with a message naming the key."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest

from tests.helm.chart import KUBE_VERSIONS, RELEASE, VALUE_SETS, lint, render

#: The prometheus-operator CRD kinds have no schema in kubernetes-validate; these are our own
#: strict subsets of monitoring.coreos.com/v1 (only the fields the chart may emit are allowed).
_SELECTOR = {"type": "object", "additionalProperties": False,
             "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "matchExpressions": {"type": "array"}}}
_METADATA = {"type": "object", "required": ["name", "namespace"],
             "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}
_DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                          "(([0-9]+)s)?(([0-9]+)ms)?)$"}
_TOP = ["apiVersion", "kind", "metadata", "spec"]
_SECRET_KEY = {"type": "object", "additionalProperties": False, "required": ["name", "key"],
               "properties": {"name": {"type": "string"}, "key": {"type": "string"}}}
_SECRET_OR_CM = {"type": "object", "additionalProperties": False, "properties": {"secret": _SECRET_KEY}}
_TLS_CONFIG = {"type": "object", "additionalProperties": False,
               "properties": {"serverName": {"type": "string"}, "ca": _SECRET_OR_CM, "cert": _SECRET_OR_CM,
                              "keySecret": _SECRET_KEY, "insecureSkipVerify": {"type": "boolean"}}}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object", "required": _TOP, "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
                     "properties": {
                         "jobLabel": {"type": "string"},
                         "namespaceSelector": {"type": "object", "additionalProperties": False,
                                               "properties": {"any": {"type": "boolean"},
                                                              "matchNames": {"type": "array",
                                                                             "items": {"type": "string"}}}},
                         "selector": _SELECTOR,
                         "endpoints": {"type": "array", "minItems": 1, "items": {
                             "type": "object", "additionalProperties": False, "required": ["port"],
                             "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                                            "scheme": {"enum": ["http", "https"]}, "interval": _DURATION,
                                            "scrapeTimeout": _DURATION, "honorLabels": {"type": "boolean"},
                                            "relabelings": {"type": "array"},
                                            "metricRelabelings": {"type": "array"},
                                            "tlsConfig": _TLS_CONFIG}}}}}}},
    "PrometheusRule": {
        "type": "object", "required": _TOP, "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {"type": "object", "additionalProperties": False, "required": ["groups"], "properties": {
                "groups": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "rules"],
                    "properties": {"name": {"type": "string"}, "interval": _DURATION, "rules": {
                        "type": "array", "minItems": 1, "items": {
                            "type": "object", "additionalProperties": False, "required": ["expr"],
                            "properties": {"alert": {"type": "string"}, "record": {"type": "string"},
                                           "expr": {"type": "string"}, "for": _DURATION,
                                           "labels": {"type": "object"},
                                           "annotations": {"type": "object"}}}}}}}}}}},
}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lint_strict(value_set: str, kube_version: str) -> None:
    assert lint(VALUE_SETS[value_set], kube_version) == []


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_objects_validate_against_kubernetes_schemas(value_set: str) -> None:
    manifests = render(VALUE_SETS[value_set])
    assert len(manifests.objects) >= 10
    errors = []
    for obj in manifests:
        what = f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] in CRD_SCHEMAS:
            try:
                jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
            except jsonschema.ValidationError as exc:
                errors.append(f"{what}: {exc.message} at {list(exc.absolute_path)}")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                cause = exc.caused_by
                errors.append(f"{what} (k8s {version}): {cause.message} at {list(cause.absolute_path)}")
    assert errors == []


def test_every_value_set_renders_the_expected_kinds() -> None:
    core = {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount",
            "Role", "RoleBinding", "Pod"}
    for name, values in VALUE_SETS.items():
        kinds = render(values).kinds()
        assert core <= kinds, (name, core - kinds)
    for name, values in VALUE_SETS.items():  # NameServers: a Deployment unless kind says otherwise
        namesrv_kind = values.get("namesrv", {}).get("kind", "Deployment")
        assert ("Deployment" in render(values).kinds()) == (namesrv_kind == "Deployment"), name
    everything = render(VALUE_SETS["everything-on"]).kinds()
    assert {"ServiceMonitor", "PrometheusRule"} <= everything
    assert not {"ServiceMonitor", "PrometheusRule"} & render({}).kinds(), "monitoring CRDs must be opt-in"


@pytest.mark.parametrize(("values", "message"), [
    ({"broker": {"groups": 0}}, "/broker/groups"),
    ({"broker": {"groups": 27}}, "/broker/groups"),
    ({"broker": {"masterRole": "SLAVE"}}, "/broker/masterRole"),
    ({"broker": {"flushDiskType": "SOMETIMES"}}, "/broker/flushDiskType"),
    ({"broker": {"config": {"brokerId": 1}}}, "brokerId"),
    ({"broker": {"config": {"namesrvAddr": "x:1"}}}, "namesrvAddr"),
    ({"broker": {"slavesPerGrup": 1}}, "slavesPerGrup"),
    ({"namesrv": {"kind": "DaemonSet"}}, "/namesrv/kind"),
    ({"namesrv": {"config": {"listen": "0.0.0.0:1"}}}, "listen"),
    ({"networkPolicy": {"metrics": {"restrict": True}}}, "/networkPolicy/metrics/from"),
    ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, "/metrics/serviceMonitor/interval"),
    ({"broker": {"namesrvAddr": "no-port"}}, "/broker/namesrvAddr"),
    ({"tls": {"enabled": True}}, "/tls/existingSecret"),
    ({"tls": {"enabled": True, "existingSecret": "s", "mode": "permissive"}}, "mode"),
    ({"broker": {"controllerMode": "zookeeper"}}, "/broker/controllerMode"),
    ({"broker": {"controllerMode": "etcd"}}, "/broker/controller/etcdEndpoints"),
    ({"broker": {"controller": {"etcdEndpoints": "no-port"}}}, "/broker/controller/etcdEndpoints"),
    ({"broker": {"controller": {"leaseTtl": 1000}}}, "/broker/controller/leaseTtl"),
    ({"broker": {"config": {"controllerMode": "none"}}}, "controllerMode"),
    ({"broker": {"config": {"controllerK8sLeaseName": "x"}}}, "controllerK8sLeaseName"),
])
def test_schema_rejects_invalid_values(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError) as info:
        render(values)
    assert message in str(info.value)


def test_notes_tell_how_to_find_the_master() -> None:
    notes = render({}).notes()
    assert "-L pocketmq.io/role" in notes
    assert f"Lease {RELEASE}-pocketmq-broker-a-leader" in notes and "Automatic failover" in notes
    static = render({"broker": {"controllerMode": "none"}}).notes()
    assert "(pod -0 is the master)" in static and "Automatic failover" not in static
    assert "helm test pmq" in notes

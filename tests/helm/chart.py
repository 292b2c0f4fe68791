"""Render the PocketMQ chart with a real Helm engine (helm-python-sdk embeds Helm v4) and look
at the result: objects by kind and name, pod templates, label selectors, ports.

Nothing here talks to a cluster; ``render`` is cached per value set.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "deploy" / "helm" / "pocketmq"
RELEASE = "pmq"
NAMESPACE = "mq"
KUBE_VERSIONS = ("1.30", "1.33")

Obj = dict[str, Any]
#: The label a broker sets on its own pod (services.broker.k8s_labels).
ROLE_LABEL = "pocketmq.io/role"
#: broker.haAuth.value of the "ha-auth" value set.
HA_AUTH_VALUE = "9f4c1e7a2b8d6035-helm-ha-auth"

#: The value sets every offline check runs on (issue 7: 1 group / 3 groups, 0 / 2 slaves,
#: SYNC_MASTER, metrics off), plus one with every optional object switched on.
VALUE_SETS: dict[str, Obj] = {
    "default": {},
    "one-group-no-slaves": {"broker": {"groups": 1, "slavesPerGroup": 0}},
    "three-groups-two-slaves": {"broker": {"groups": 3, "slavesPerGroup": 2}},
    "sync-master": {"broker": {"masterRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
                               "config": {"slaveTimeout": 3000, "haSlaveFallbehindMax": 268435456}}},
    "metrics-off": {"metrics": {"enabled": False}},
    # the default is controllerMode kubernetes; the other two modes
    "static-roles": {"broker": {"controllerMode": "none", "slavesPerGroup": 2}},
    "etcd-controller": {"broker": {"controllerMode": "etcd", "masterRole": "SYNC_MASTER", "controller": {
        "etcdEndpoints": "etcd-0.etcd:2379;etcd-1.etcd:2379;etcd-2.etcd:2379"}}},
    # the HA port authenticated with a Secret the chart generates
    "ha-auth": {"broker": {"slavesPerGroup": 2, "haAuth": {"create": True, "value": HA_AUTH_VALUE}}},
    # TLS on every port from an existing Secret, mutual TLS, scraped by a ServiceMonitor over HTTPS
    "tls": {"tls": {"enabled": True, "existingSecret": "pocketmq-tls", "requireClientCert": True},
            "metrics": {"serviceMonitor": {"enabled": True}}},
    "everything-on": {
        "namesrv": {"kind": "StatefulSet", "replicas": 3},  # the non-default kind
        "broker": {"groups": 2, "slavesPerGroup": 1, "advertise": "podDNS",
                   "persistence": {"enabled": False}, "podAntiAffinity": "hard"},
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "networkPolicy": {
            "clients": {"restrict": True, "from": [{"namespaceSelector": {"matchLabels": {"team": "apps"}}}]},
            "metrics": {"restrict": True, "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
        },
        "image": {"pullSecrets": ["registry"]},
        "commonLabels": {"team": "messaging"},
        "commonAnnotations": {"owner": "platform"},
    },
}


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> Obj:
    """Deep-merge two value trees (override wins), as ``helm --set`` layering does."""
    out: Obj = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


@functools.cache
def _render_cached(values_json: str, release: str, namespace: str) -> tuple[tuple[str, str], ...]:
    rendered = _chart().render(values=json.loads(values_json), name=release, namespace=namespace,
                               is_install=True)
    return tuple(sorted(rendered.items()))


@dataclasses.dataclass(frozen=True)
class PodTemplate:
    """A pod template of a workload, or (from :meth:`Manifests.pods`) one pod as the workload's
    controller would create it: its name and the labels the controller adds."""

    owner_kind: str
    owner_name: str
    metadata: Obj
    spec: Obj
    #: Pod name (empty for a template).
    name: str = ""
    #: StatefulSet ordinal, -1 otherwise.
    ordinal: int = -1

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.get("labels") or {})

    def container(self, name: str | None = None) -> Obj:
        containers: list[Obj] = self.spec["containers"]
        if name is None:
            assert len(containers) == 1, f"{self.owner_name}: expected one container"
            return containers[0]
        return next(c for c in containers if c["name"] == name)

    def port(self, name: str) -> int:
        for container in self.spec["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == name:
                    return int(port["containerPort"])
        raise KeyError(f"{self.owner_name}: no container port named {name!r}")


class Manifests:
    """The objects one ``helm template`` produced."""

    def __init__(self, files: Mapping[str, str], values: Obj) -> None:
        self.files = dict(files)
        self.values = values
        self.objects: list[Obj] = []
        for path, text in sorted(self.files.items()):
            if not path.endswith((".yaml", ".yml")):
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc.setdefault("metadata", {})
                    self.objects.append(doc)

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.objects)

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> Obj:
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        have = sorted(o["metadata"]["name"] for o in self.of_kind(kind))
        raise KeyError(f"no {kind} {name!r}; have {have}")

    def pod_templates(self) -> list[PodTemplate]:
        pods = []
        for o in self.objects:
            if o["kind"] in ("StatefulSet", "Deployment", "DaemonSet", "Job"):
                t = o["spec"]["template"]
                pods.append(PodTemplate(o["kind"], o["metadata"]["name"], t.get("metadata", {}), t["spec"]))
            elif o["kind"] == "Pod":
                pods.append(PodTemplate("Pod", o["metadata"]["name"], o["metadata"], o["spec"]))
        return pods

    def pods(self) -> list[PodTemplate]:
        """Every pod the workloads would create, named and labelled as their controllers do:
        ``<statefulset>-<ordinal>`` with ``statefulset.kubernetes.io/pod-name`` and
        ``apps.kubernetes.io/pod-index``; ``<deployment>-<hash>-<n>`` with ``pod-template-hash``.
        Broker pods also carry the role label each broker sets on its own pod at run time
        (``pocketmq.io/role``), as when ordinal 0 is the master (always so with controllerMode
        none; under a controller whichever pod holds the lease: see :func:`with_master`)."""
        pods = []
        for t in self.pod_templates():
            if t.owner_kind == "Pod":
                pods.append(dataclasses.replace(t, name=t.owner_name))
                continue
            owner = self.get(t.owner_kind, t.owner_name)
            for i in range(int(owner["spec"].get("replicas", 1))):
                meta = copy.deepcopy(t.metadata)
                labels = meta.setdefault("labels", {})
                if t.owner_kind == "StatefulSet":
                    name = f"{t.owner_name}-{i}"
                    labels["statefulset.kubernetes.io/pod-name"] = name
                    labels["apps.kubernetes.io/pod-index"] = str(i)
                    if labels.get("app.kubernetes.io/component") == "broker":
                        labels[ROLE_LABEL] = "master" if i == 0 else "slave"
                    pods.append(dataclasses.replace(t, metadata=meta, name=name, ordinal=i))
                else:
                    labels["pod-template-hash"] = "5d8f7c9b6"
                    pods.append(dataclasses.replace(t, metadata=meta, name=f"{t.owner_name}-5d8f7c9b6-x{i}"))
        return pods

    def pods_selected_by(self, selector: Mapping[str, Any] | None, *,
                         plain_labels: bool = False) -> list[PodTemplate]:
        """Pods (see :meth:`pods`) a selector matches. ``plain_labels``: ``selector`` is a
        Service-style ``{label: value}`` map rather than a LabelSelector."""
        sel: Obj = {"matchLabels": dict(selector or {})} if plain_labels else dict(selector or {})
        return [p for p in self.pods() if selector_matches(sel, p.labels)]

    def secrets(self) -> dict[str, dict[str, str]]:
        """Secret name -> decoded data (``data`` base64-decoded, ``stringData`` as is)."""
        out: dict[str, dict[str, str]] = {}
        for secret in self.of_kind("Secret"):
            data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            data.update(secret.get("stringData") or {})
            out[secret["metadata"]["name"]] = data
        return out

    def notes(self) -> str:
        return next((text for path, text in self.files.items() if path.endswith("NOTES.txt")), "")


def render(values: Mapping[str, Any] | None = None, *, release: str = RELEASE,
           namespace: str = NAMESPACE) -> Manifests:
    """Render the chart (cached by values). Raises helm errors for invalid values."""
    vals = dict(values or {})
    files = _render_cached(json.dumps(vals, sort_keys=True), release, namespace)
    return Manifests(dict(files), vals)


def lint(values: Mapping[str, Any] | None, kube_version: str) -> list[str]:
    """``helm lint --strict`` problems (warnings and errors; info messages are not problems)."""
    report = helm.lint(CHART_DIR, dict(values or {}), strict=True, kube_version=f"v{kube_version}.0",
                       namespace=NAMESPACE)
    problems = [f"[{m['severity']}] {m['path']}: {m['error']}"
                for m in report["messages"] if m["severity"] >= 2]
    return problems + [str(e) for e in report["errors"]]


def default_values() -> Obj:
    return _chart().values


def with_master(pods: list[PodTemplate], master: str) -> list[PodTemplate]:
    """``pods`` with the role labels as brokers set them when pod ``master`` holds its group's
    lease (the other pods of its StatefulSet are slaves)."""
    owner = next(p.owner_name for p in pods if p.name == master)
    out = []
    for p in pods:
        if p.owner_name == owner:
            meta = copy.deepcopy(p.metadata)
            meta["labels"][ROLE_LABEL] = "master" if p.name == master else "slave"
            p = dataclasses.replace(p, metadata=meta)
        out.append(p)
    return out


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions). An empty selector
    matches everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def broker_conf(manifests: Manifests, group_fullname: str) -> dict[str, str]:
    """The key=value pairs of a group's rendered broker.conf."""
    from services.common.config import parse_properties

    text = manifests.get("ConfigMap", group_fullname)["data"]["broker.conf"]
    return parse_properties(text, f"ConfigMap {group_fullname}")

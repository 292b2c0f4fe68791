"""What the kubelet does to a container's environment, command and args, in Python.

- ``env`` entries are resolved in order; ``value`` may reference earlier variables as
  ``$(NAME)`` (``$$`` is a literal ``$``; unresolvable references stay as they are);
- ``valueFrom.fieldRef`` comes from the pod (downward API): metadata.name, metadata.namespace,
  metadata.uid, status.podIP, metadata.labels['k'] and metadata.annotations['k'];
- ``valueFrom.secretKeyRef`` / ``configMapKeyRef`` come from the Secrets / ConfigMaps passed in
  (decoded values); a missing one is an error unless the reference is ``optional``;
- ``command`` and ``args`` are expanded with the container's whole environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_MAP_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(repl, text)


def field_ref(path: str, pod: Mapping[str, Any]) -> str:
    """The downward-API value of ``path`` for ``pod`` (a dict with metadata and status)."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName"),
    }
    if path in simple:
        value = simple[path]
        if value is None:
            raise KeyError(f"downward API field {path} is not set for this pod")
        return str(value)
    match = _MAP_KEY.match(path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    raise KeyError(f"unsupported downward API field {path}")


def _key_ref(kind: str, name: str, ref: Mapping[str, Any],
             objects: Mapping[str, Mapping[str, str]] | None) -> str | None:
    data = (objects or {}).get(ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise KeyError(f"env {name}: {kind} {ref['name']!r} key {ref['key']!r} does not exist "
                       "(the kubelet would not start the container)")
    return data[ref["key"]]


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any],
                  config_maps: Mapping[str, Mapping[str, str]] | None = None,
                  secrets: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
    """The environment the container starts with (image ENV not included). ``secrets``: Secret
    name -> decoded data (:meth:`tests.helm.chart.Manifests.secrets` for the rendered ones)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(str(entry["value"]), env)
            continue
        source = entry.get("valueFrom", {})
        value: str | None
        if "fieldRef" in source:
            value = field_ref(source["fieldRef"]["fieldPath"], pod)
        elif "configMapKeyRef" in source and config_maps is not None:
            value = _key_ref("ConfigMap", name, source["configMapKeyRef"], config_maps)
        elif "secretKeyRef" in source:
            value = _key_ref("Secret", name, source["secretKeyRef"], secrets)
        else:
            raise KeyError(f"unsupported valueFrom for {name}: {sorted(source)}")
        if value is not None:
            env[name] = value
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` after expansion (the chart always sets ``command``)."""
    command = [expand(str(a), env) for a in container.get("command", [])]
    args = [expand(str(a), env) for a in container.get("args", [])]
    if not command:
        raise ValueError(f"container {container.get('name')} has no command (the image default would run)")
    return command + args

"""What the kubelet does to a container's environment, command and args, in Python.

- ``env`` entries are resolved in order; ``value`` may reference earlier variables as
  ``$(NAME)`` (``$$`` is a literal ``$``; unresolvable references stay as they are);
- ``valueFrom.fieldRef`` comes from the pod (downward API): metadata.name, metadata.namespace,
  metadata.uid, status.podIP, metadata.labels['k'] and metadata.annotations['k'];
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


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any],
                  config_maps: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
    """The environment the container starts with (image ENV not included)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(str(entry["value"]), env)
            continue
        source = entry.get("valueFrom", {})
        if "fieldRef" in source:
            env[name] = field_ref(source["fieldRef"]["fieldPath"], pod)
        elif "configMapKeyRef" in source and config_maps is not None:
            ref = source["configMapKeyRef"]
            env[name] = config_maps[ref["name"]][ref["key"]]
        else:
            raise KeyError(f"unsupported valueFrom for {name}: {sorted(source)}")
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` after expansion (the chart always sets ``command``)."""
    command = [expand(str(a), env) for a in container.get("command", [])]
    args = [expand(str(a), env) for a in container.get("args", [])]
    if not command:
        raise ValueError(f"container {container.get('name')} has no command (the image default would run)")
    return command + args

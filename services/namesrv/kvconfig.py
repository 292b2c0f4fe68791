"""Namespaced key/value configuration kept by a NameServer (RocketMQ's KVConfigManager).

:class:`KVConfig` is the pure table. :func:`load` and :func:`save` read and write its JSON form
(``{"namespace": {"key": "value"}}``); ``save`` writes a temporary file, fsyncs and renames, so a
crash leaves the old or the new file, never half of one. Like the route table, the KV table is
used only from the event loop and needs no lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfig:
    def __init__(self, table: dict[str, dict[str, str]] | None = None) -> None:
        self._table: dict[str, dict[str, str]] = {ns: dict(kv) for ns, kv in (table or {}).items() if kv}

    def put(self, namespace: str, key: str, value: str) -> bool:
        """Set a value; return whether the table changed."""
        kv = self._table.setdefault(namespace, {})
        if kv.get(key) == value:
            return False
        kv[key] = value
        return True

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove a key; return whether it existed."""
        kv = self._table.get(namespace)
        if kv is None or key not in kv:
            return False
        del kv[key]
        if not kv:
            del self._table[namespace]
        return True

    def namespace(self, namespace: str) -> dict[str, str]:
        """A copy of one namespace (empty when unknown)."""
        return dict(self._table.get(namespace, {}))

    def to_json(self) -> str:
        return json.dumps(self._table, sort_keys=True, indent=2, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> KVConfig:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not all(
            isinstance(ns, str) and isinstance(kv, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in kv.items())
            for ns, kv in doc.items()
        ):
            raise ValueError("expected a JSON object of namespace -> {key: value} strings")
        return cls(doc)


def load(path: str | os.PathLike[str]) -> KVConfig:
    """Read the KV file; a missing file is an empty table."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return KVConfig()
    try:
        return KVConfig.from_json(text)
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from exc


def save(path: str | os.PathLike[str], kv: KVConfig) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(kv.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)

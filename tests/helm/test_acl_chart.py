"""Access control in the chart: on by default with a generated Secret (a Super and a Broker
user), or the operator's acl.existingSecret; every NameServer and broker gets the flags and the
mounted file, brokers their credential, the helm test pod a Super user."""

from __future__ import annotations

import json
from typing import Any

from services.common.acl.model import AclDocument, UserType
from tests.helm.chart import Manifests, render


def containers(m: Manifests) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(p.owner_name, p.spec, c) for p in m.pod_templates() for c in p.spec["containers"]]


def test_generated_secret_holds_a_super_and_the_brokers_user() -> None:
    m = render({})
    (name,) = [n for n in m.secrets() if n.endswith("-acl")]
    data = m.secrets()[name]
    doc = AclDocument.from_json(json.loads(data["acl.json"]), "acl.json")
    admin = doc.users[data["admin-access-key"]]
    assert admin.user_type is UserType.SUPER and admin.secret_key == data["admin-secret-key"]
    broker = json.loads(data["broker-credentials"])
    assert doc.users[broker["accessKey"]].user_type is UserType.BROKER
    assert doc.users[broker["accessKey"]].secret_key == broker["secretKey"]
    assert len(admin.secret_key) >= 32
    servers = 0
    for _, spec, c in containers(m):
        env = {e["name"]: e for e in c.get("env", [])}
        if c["name"] in ("namesrv", "broker"):
            servers += 1
            args = c["args"]
            assert args[args.index("--acl-enable") + 1] == "true"
            assert args[args.index("--acl-config-file") + 1] == "/etc/pocketmq-acl/acl.json"
            mount = next(v for v in c["volumeMounts"] if v["name"] == "acl")
            assert mount["mountPath"] == "/etc/pocketmq-acl" and mount["readOnly"]
            # A directory mount (no subPath): Secret updates reach the running pod.
            assert "subPath" not in mount
            volume = next(v for v in spec["volumes"] if v["name"] == "acl")
            assert volume["secret"]["secretName"] == name
        if c["name"] == "broker":
            ref = env["POCKETMQ_INNER_CLIENT_AUTHENTICATION_CREDENTIALS"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": name, "key": "broker-credentials"}
        if c["name"] == "roundtrip":
            assert env["POCKETMQ_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": name,
                                                                                 "key": "admin-secret-key"}
    assert servers >= 2  # the NameServer workload and every broker group


def test_existing_secret_is_used_and_nothing_generated() -> None:
    m = render({"acl": {"existingSecret": "my-acl"}})
    assert not [n for n in m.secrets() if n.endswith("-acl")]
    for _, spec, c in containers(m):
        if c["name"] in ("namesrv", "broker"):
            assert next(v for v in spec["volumes"] if v["name"] == "acl")["secret"]["secretName"] == "my-acl"


def test_disabled_means_todays_open_cluster() -> None:
    m = render({"acl": {"enabled": False}})
    assert not m.of_kind("Secret")
    for _, spec, c in containers(m):
        assert "--acl-enable" not in c.get("args", [])
        assert all(v["name"] != "acl" for v in spec.get("volumes", []))
        assert all(not e["name"].startswith(("POCKETMQ_INNER", "POCKETMQ_SECRET")) for e in c.get("env", []))


def test_the_namesrv_console_signs_with_the_admin_user_when_on() -> None:
    def namesrv_env(values: dict[str, Any]) -> dict[str, Any]:
        (c,) = [c for _, _, c in containers(render(values)) if c["name"] == "namesrv"]
        return {e["name"]: e for e in c.get("env", [])}

    assert "POCKETMQ_ACCESS_KEY" not in namesrv_env({})
    env = namesrv_env({"namesrv": {"console": {"enabled": True}}, "acl": {"existingSecret": "my-acl"}})
    assert env["POCKETMQ_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "my-acl", "key": "admin-access-key", "optional": True}
    assert env["POCKETMQ_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "my-acl", "key": "admin-secret-key", "optional": True}
    assert "POCKETMQ_ACCESS_KEY" not in namesrv_env({"namesrv": {"console": {"enabled": True}},
                                                     "acl": {"enabled": False}})

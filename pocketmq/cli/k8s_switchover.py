"""``pocketmq broker switchover --kubernetes``: the planned switchover request written to a
group's Lease (controllerMode=kubernetes), then the wait for the next master.  Annotation names:
:mod:`pocketmq.wire.dcs`.  Every write carries the resourceVersion just read (409: read again)."""

from __future__ import annotations

import json
import time
from typing import Any

from pocketmq.wire.dcs import K8S_EPOCH, K8S_LEADER, K8S_SWITCHOVER

__all__ = ["switchover"]


def _api(api_server: str, kubeconfig: str) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig or not api_server:
        config.load_kube_config(config_file=kubeconfig or None, client_configuration=configuration)
    if api_server:
        configuration.host = api_server.rstrip("/")
    return client.ApiClient(configuration)


def switchover(api_server: str, kubeconfig: str, namespace: str, lease: str, to: int,
               limit_s: float) -> dict[str, Any] | None:
    """Ask the master named in Lease ``lease`` to hand over: the outcome, or None when no new
    master served within ``limit_s`` (the request is then withdrawn).  ValueError: no master."""
    from kubernetes import client

    api_client = _api(api_server, kubeconfig)
    api = client.CoordinationV1Api(api_client)

    def read() -> dict[str, Any]:
        reply = api.read_namespaced_lease(lease, namespace, _preload_content=False)
        obj: dict[str, Any] = json.loads(reply.data)
        obj["metadata"]["annotations"] = obj["metadata"].get("annotations") or {}
        return obj

    def write(change: dict[str, str | None]) -> None:
        for _ in range(10):
            obj = read()
            annotations = obj["metadata"]["annotations"]
            for key, value in change.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            try:
                api.replace_namespaced_lease(lease, namespace, obj)
                return
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        raise RuntimeError(f"Lease {namespace}/{lease} kept changing: request not written")

    started = time.monotonic()
    try:
        before = read()
        old = json.loads(before["metadata"]["annotations"].get(K8S_LEADER) or "{}")
        if not before["spec"].get("holderIdentity") or not old:
            raise ValueError(f"Lease {namespace}/{lease} names no master")
        old_epoch = int(before["metadata"]["annotations"].get(K8S_EPOCH, "0"))
        write({K8S_SWITCHOVER: json.dumps({"to": to})})
        while time.monotonic() - started < limit_s:
            now = read()
            annotations = now["metadata"]["annotations"]
            new = json.loads(annotations.get(K8S_LEADER) or "{}")
            epoch = int(annotations.get(K8S_EPOCH, "0"))
            if epoch != old_epoch and now["spec"].get("holderIdentity") and new.get("ready"):
                return {"lease": lease, "from": old["brokerId"], "from_epoch": old_epoch,
                        "to": new["brokerId"], "epoch": epoch,
                        "seconds": round(time.monotonic() - started, 3)}
            time.sleep(0.05)
        write({K8S_SWITCHOVER: None})
        return None
    finally:
        api_client.close()

"""Broker pods label themselves with their role and brokerId through the Kubernetes API.

After start-up the broker app calls::

    from services.broker import k8s_labels
    asyncio.create_task(k8s_labels.label_own_pod(config.broker_role, config.broker_id))

so that ``kubectl get pods -L pocketmq.io/role -L pocketmq.io/broker-id`` shows which pod of a
group is the master. Inside a pod it uses the in-cluster configuration (the ServiceAccount token
the chart's Role allows to get/patch the group's pods) and merges two labels into its own pod:

- ``pocketmq.io/role``: ``master`` (ASYNC_MASTER / SYNC_MASTER) or ``slave``
- ``pocketmq.io/broker-id``: the brokerId

Outside a cluster (no ``KUBERNETES_SERVICE_HOST`` or no ServiceAccount token) it logs one line
and does nothing. Labelling is informational: failures are logged, retried when transient, and
never raised; the function returns whether the pod was labelled. The blocking ``kubernetes``
client runs in a worker thread, so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ROLE_LABEL = "pocketmq.io/role"
BROKER_ID_LABEL = "pocketmq.io/broker-id"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: HTTP statuses that retrying cannot fix (missing RBAC, pod gone, invalid patch).
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})
REQUEST_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class PodRef:
    name: str
    namespace: str


def pod_labels(role: enum.Enum | str, broker_id: int) -> dict[str, str]:
    """The labels for a broker of ``role`` (a BrokerRole or its name) and ``broker_id``."""
    name = role.name if isinstance(role, enum.Enum) else str(role)
    role_value = "slave" if name.upper() == "SLAVE" else "master"
    return {ROLE_LABEL: role_value, BROKER_ID_LABEL: str(int(broker_id))}


def in_cluster(environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR) -> bool:
    """Whether this process runs in a pod with a ServiceAccount token (what in-cluster config needs)."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT")
                and (sa_dir / "token").is_file())


def own_pod(environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR) -> PodRef:
    """This pod: ``POD_NAME`` / ``POD_NAMESPACE`` (downward API), else the host name and the
    ServiceAccount's namespace file, else ``default``."""
    env = os.environ if environ is None else environ
    name = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
    namespace = env.get("POD_NAMESPACE", "")
    if not namespace:
        try:
            namespace = (sa_dir / "namespace").read_text(encoding="utf-8").strip()
        except OSError:
            namespace = ""
    return PodRef(name=name, namespace=namespace or "default")


def _in_cluster_client() -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def _patch_labels(api_client: Any, pod: PodRef, labels: dict[str, str]) -> None:
    from kubernetes import client

    client.CoreV1Api(api_client).patch_namespaced_pod(
        pod.name, pod.namespace, {"metadata": {"labels": labels}},
        _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT_S,
    )


async def label_own_pod(
    role: enum.Enum | str,
    broker_id: int,
    *,
    api_client: Any | None = None,
    environ: Mapping[str, str] | None = None,
    attempts: int = 5,
    retry_delay: float = 1.0,
) -> bool:
    """Merge ``pocketmq.io/role`` and ``pocketmq.io/broker-id`` into this pod's labels.

    ``api_client`` (a ``kubernetes.client.ApiClient``) defaults to the in-cluster configuration;
    without one and outside a cluster this logs one line and returns False. Transient failures
    (connection errors, 5xx, 429) are retried ``attempts`` times with doubling delays starting
    at ``retry_delay`` seconds. Never raises except CancelledError.
    """
    labels = pod_labels(role, broker_id)
    owned = api_client is None
    if api_client is None:
        if not in_cluster(environ):
            log.info("not running in a Kubernetes pod; pod self-labelling skipped")
            return False
        try:
            api_client = await asyncio.to_thread(_in_cluster_client)
        except ImportError:
            log.warning("the kubernetes package is not installed (pip install 'pocketmq[k8s]'); "
                        "pod self-labelling skipped")
            return False
        except Exception as exc:  # ConfigException and friends: nothing to retry
            log.warning("cannot load the in-cluster Kubernetes configuration; pod self-labelling skipped",
                        extra={"error": str(exc)})
            return False
    pod = own_pod(environ)
    try:
        delay = retry_delay
        for attempt in range(1, attempts + 1):
            try:
                await asyncio.to_thread(_patch_labels, api_client, pod, labels)
            except Exception as exc:
                status = getattr(exc, "status", None)
                permanent = isinstance(status, int) and status in PERMANENT_STATUSES
                if permanent or attempt == attempts:
                    log.warning("cannot label own pod", extra={
                        "pod": pod.name, "namespace": pod.namespace, "status": status,
                        "error": getattr(exc, "reason", None) or str(exc), "attempts": attempt})
                    return False
                log.info("labelling own pod failed; retrying", extra={
                    "pod": pod.name, "status": status, "error": getattr(exc, "reason", None) or str(exc),
                    "retry_in_s": delay})
                await asyncio.sleep(delay)
                delay *= 2
                continue
            log.info("labelled own pod", extra={"pod": pod.name, "namespace": pod.namespace, **labels})
            return True
        return False
    finally:
        if owned and api_client is not None:
            await asyncio.to_thread(api_client.close)

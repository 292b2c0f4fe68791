"""services.broker.k8s_labels against a fake Kubernetes API server (kmock) with the real
``kubernetes`` client: the merge patch it sends, retries, permanent errors, and the skip outside
a cluster."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
from kubernetes import client

from services.broker import k8s_labels
from services.broker.config import BrokerConfig, BrokerRole

PODS = kmock_lib.resource("", "v1", "pods")
NAMESPACE = "mq"
ENV = {"POD_NAMESPACE": NAMESPACE}


def add_pod(server: Any, name: str, labels: dict[str, str] | None = None) -> None:
    server.objects[PODS, NAMESPACE, name] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels or {"app": "pocketmq"})},
        "spec": {"containers": [{"name": "broker", "image": "pocketmq/pocketmq:0.1.0"}]},
    }


def labels_of(server: Any, name: str) -> dict[str, str]:
    return dict(server.objects[PODS, NAMESPACE, name].raw["metadata"]["labels"])


@pytest.fixture
def api(kmock: Any) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    with client.ApiClient(configuration) as api_client:
        yield api_client


def test_label_values() -> None:
    assert k8s_labels.pod_labels(BrokerRole.SYNC_MASTER, 0) == {"pocketmq.io/role": "master",
                                                                "pocketmq.io/broker-id": "0"}
    assert k8s_labels.pod_labels(BrokerRole.ASYNC_MASTER, 0)["pocketmq.io/role"] == "master"
    assert k8s_labels.pod_labels("SLAVE", 2) == {"pocketmq.io/role": "slave", "pocketmq.io/broker-id": "2"}


@pytest.mark.asyncio
@pytest.mark.parametrize(("pod", "role", "broker_id", "expected_role"), [
    ("pmq-pocketmq-broker-a-0", BrokerRole.SYNC_MASTER, 0, "master"),
    ("pmq-pocketmq-broker-a-2", BrokerRole.SLAVE, 2, "slave"),
])
async def test_broker_labels_its_own_pod(kmock: Any, api: client.ApiClient, pod: str, role: BrokerRole,
                                         broker_id: int, expected_role: str) -> None:
    add_pod(kmock, pod)
    add_pod(kmock, "someone-else")
    ok = await k8s_labels.label_own_pod(role, broker_id, api_client=api, environ={**ENV, "POD_NAME": pod})
    assert ok is True
    assert labels_of(kmock, pod) == {"app": "pocketmq", "pocketmq.io/role": expected_role,
                                     "pocketmq.io/broker-id": str(broker_id)}
    assert labels_of(kmock, "someone-else") == {"app": "pocketmq"}
    (request,) = list(kmock["patch"])
    assert request.url.path == f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}"
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert request.data == {"metadata": {"labels": {"pocketmq.io/role": expected_role,
                                                    "pocketmq.io/broker-id": str(broker_id)}}}


@pytest.mark.asyncio
async def test_relabelling_after_a_promotion_overwrites_the_old_role(kmock: Any,
                                                                      api: client.ApiClient) -> None:
    add_pod(kmock, "b-1", {"pocketmq.io/role": "slave", "pocketmq.io/broker-id": "1", "app": "pocketmq"})
    env = {**ENV, "POD_NAME": "b-1"}
    assert await k8s_labels.label_own_pod(BrokerRole.ASYNC_MASTER, 0, api_client=api, environ=env)
    assert labels_of(kmock, "b-1") == {"app": "pocketmq", "pocketmq.io/role": "master",
                                       "pocketmq.io/broker-id": "0"}


@pytest.mark.asyncio
async def test_transient_errors_are_retried(kmock: Any, api: client.ApiClient) -> None:
    add_pod(kmock, "b-0")
    kmock["patch"][:2] << kmock_lib.KubernetesError(status=503, reason="ServiceUnavailable", message="busy")
    ok = await k8s_labels.label_own_pod("ASYNC_MASTER", 0, api_client=api, environ={**ENV, "POD_NAME": "b-0"},
                                        retry_delay=0.01)
    assert ok is True
    assert len(kmock["patch"]) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [403, 404])
async def test_permanent_errors_give_up_at_once(kmock: Any, api: client.ApiClient, status: int,
                                                caplog: pytest.LogCaptureFixture) -> None:
    add_pod(kmock, "b-0")
    kmock["patch"] << kmock_lib.KubernetesError(status=status, reason="Nope", message="denied")
    ok = await k8s_labels.label_own_pod("SLAVE", 1, api_client=api, environ={**ENV, "POD_NAME": "b-0"},
                                        retry_delay=0.01)
    assert ok is False
    assert len(kmock["patch"]) == 1
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == "cannot label own pod" and warning.__dict__["status"] == status


@pytest.mark.asyncio
async def test_an_unreachable_api_server_is_retried_then_given_up(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="services.broker.k8s_labels")
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: connection refused
    configuration.retries = 0
    with client.ApiClient(configuration) as api:
        ok = await k8s_labels.label_own_pod("SLAVE", 1, api_client=api, environ={**ENV, "POD_NAME": "b-1"},
                                            attempts=3, retry_delay=0.01)
    assert ok is False
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.asyncio
async def test_outside_a_cluster_it_logs_one_line_and_skips(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="services.broker.k8s_labels")
    assert await k8s_labels.label_own_pod(BrokerRole.SLAVE, 1, environ={"POD_NAME": "b-1"}) is False
    (record,) = caplog.records
    assert "skipped" in record.getMessage() and record.levelno == logging.INFO


@pytest.mark.asyncio
async def test_in_cluster_path_uses_the_in_cluster_client(kmock: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("t0ken")
    (tmp_path / "namespace").write_text(NAMESPACE + "\n")
    monkeypatch.setattr(k8s_labels, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setattr(k8s_labels.in_cluster, "__defaults__", (None, tmp_path))
    monkeypatch.setattr(k8s_labels.own_pod, "__defaults__", (None, tmp_path))
    closed: list[bool] = []

    def fake_in_cluster_client() -> client.ApiClient:  # stands in for load_incluster_config (https)
        configuration = client.Configuration()
        configuration.host = str(kmock.url).rstrip("/")
        api = client.ApiClient(configuration)
        original = api.close
        api.close = lambda: (closed.append(True), original())[1]  # type: ignore[method-assign]
        return api

    monkeypatch.setattr(k8s_labels, "_in_cluster_client", fake_in_cluster_client)
    add_pod(kmock, "mq-broker-a-0")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "HOSTNAME": "mq-broker-a-0"}
    assert k8s_labels.in_cluster(env, tmp_path)
    assert k8s_labels.own_pod(env, tmp_path) == k8s_labels.PodRef("mq-broker-a-0", NAMESPACE)
    assert await k8s_labels.label_own_pod(BrokerRole.ASYNC_MASTER, 0, environ=env)
    assert labels_of(kmock, "mq-broker-a-0")["pocketmq.io/role"] == "master"
    assert closed == [True]


@pytest.mark.asyncio
async def test_the_documented_broker_app_call(kmock: Any, api: client.ApiClient) -> None:
    config = BrokerConfig(broker_name="broker-a", broker_id=1, broker_role=BrokerRole.SLAVE)
    add_pod(kmock, "mq-broker-a-1")
    task = asyncio.create_task(k8s_labels.label_own_pod(config.broker_role, config.broker_id, api_client=api,
                                                        environ={**ENV, "POD_NAME": "mq-broker-a-1"}))
    assert await task is True
    assert labels_of(kmock, "mq-broker-a-1")["pocketmq.io/broker-id"] == "1"

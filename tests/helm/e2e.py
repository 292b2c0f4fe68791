"""Shared pieces of the end-to-end tests that run the rendered chart (test_local_cluster*.py):
which services exist yet, polling, a background load, and the shipped dashboard's queries."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from apache.rocketmq.v2 import definition_pb2 as v2
from apache.rocketmq.v2 import service_pb2 as v2s
from apache.rocketmq.v2 import service_pb2_grpc as v2_grpc
from pocketmq.broker.v1 import broker_pb2 as bpb
from pocketmq.wire.auth import Credentials
from tests.fake_apiserver import FakeApiServer
from tests.helm import client
from tests.helm.chart import CHART_DIR, NAMESPACE, Manifests, render
from tests.helm.localpods import LocalCluster, LocalPod
from tests.support import wait_until

T = TypeVar("T")
QUEUES = 4


def wait_for(predicate: Callable[[], T], timeout: float, message: str, interval: float = 0.1) -> T:
    """:func:`tests.support.wait_until` where any exception counts as "not yet" (pods start and
    stop under these tests)."""
    return wait_until(predicate, timeout, message, interval, ignore=(Exception,))


def brokers(cluster: LocalCluster) -> list[LocalPod]:
    return cluster.by_component("broker")


def namesrvs(cluster: LocalCluster) -> list[LocalPod]:
    return cluster.by_component("namesrv")


def group_of(pod: LocalPod) -> str:
    return pod.template.labels["pocketmq.io/broker-name"]


def masters(cluster: LocalCluster) -> dict[str, LocalPod]:
    return {group_of(p): p for p in brokers(cluster) if p.template.ordinal == 0}


def start_cluster(cluster: LocalCluster, timeout: float = 60.0) -> None:
    """Start every workload pod, NameServers first. (In a cluster they start together, and a
    broker that is up before the NameServers registers at its next registerNameServerPeriod,
    30 s later; starting the NameServers first keeps the tests short and deterministic.)"""
    cluster.start(namesrvs(cluster))
    cluster.wait_ready(timeout, namesrvs(cluster))
    cluster.start(brokers(cluster))
    cluster.wait_ready(timeout)


def chart_credentials(manifests: Manifests) -> Credentials | None:
    """The Super user of the chart's ACL Secret (None with access control off): what the tests'
    calls sign with."""
    acl = next((s for name, s in manifests.secrets().items() if name.endswith("-acl")), None)
    return Credentials(acl["admin-access-key"], acl["admin-secret-key"]) if acl else None


@contextlib.contextmanager
def running_cluster(values: dict[str, Any], tmp_path_factory: pytest.TempPathFactory,
                    api_server: FakeApiServer | None = None) -> Iterator[LocalCluster]:
    """The chart rendered with ``values``, started as local pods (:func:`start_cluster`), stopped
    on exit; ``api_server``: the Kubernetes API the pods use (localpods.py, emulation 6)."""
    manifests = render(values)
    local = LocalCluster(manifests, tmp_path_factory.mktemp("pods"), NAMESPACE, api_server=api_server)
    client.CREDENTIALS = chart_credentials(manifests)
    try:
        start_cluster(local)
        yield local
    finally:
        local.stop(max_grace=15)
        client.CREDENTIALS = None


class Load:
    """Background producer and consumer on the given masters (what the dashboard shows)."""

    def __init__(self, master_addrs: Sequence[str], topic: str) -> None:
        self.masters = list(master_addrs)
        self.topic = topic
        self.stopped = threading.Event()
        self.statuses: dict[str, int] = {}
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="helm-e2e-load", daemon=True)
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def sent_ok(self) -> int:
        return self.statuses.get("PUT_OK", 0)

    @property
    def answered(self) -> int:
        """Messages whose send was answered, whatever the put status."""
        return sum(self.statuses.values())

    def start(self) -> None:
        for addr in self.masters:
            client.create_topic(addr, self.topic, QUEUES)
        self.thread.start()
        wait_for(lambda: self.answered > 0, 20, f"the load's first sends answered ({self.errors[-3:]})")

    def _run(self) -> None:
        offsets = {(a, q): 0 for a in self.masters for q in range(QUEUES)}
        n = 0
        while not self.stopped.is_set():
            queue = n % QUEUES
            for addr in self.masters:
                try:
                    reply = client.send(addr, self.topic, [b"x" * 512] * 20, queue_id=queue)
                    name = bpb.PutStatus.Name(reply.status)
                    self.statuses[name] = self.statuses.get(name, 0) + 20
                    with client.broker(addr) as stub:
                        pulled = stub.PullMessage(bpb.PullMessageRequest(
                            consumer_group="helm-load", topic=self.topic, queue_id=queue,
                            queue_offset=offsets[addr, queue], max_msg_nums=32, subscription="*",
                            suspend_timeout_ms=0, commit_offset=-1), timeout=5)
                        if pulled.status == bpb.FOUND:
                            offsets[addr, queue] = pulled.next_begin_offset
                    self._pop(addr)
                except Exception as exc:  # keep loading; the tests look at the counters
                    self.errors.append(repr(exc))
            n += 1
            self.stopped.wait(0.05)

    def _pop(self, addr: str) -> None:
        """A RocketMQ 5 consumer's receive + ack (the dashboard's consumer-health row)."""
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = client.channel(addr)
        stub = v2_grpc.MessagingServiceStub(channel)
        md = [("x-mq-client-id", "helm-load-pop")]
        group, topic = v2.Resource(name="helm-load-pop"), v2.Resource(name=self.topic)
        replies = stub.ReceiveMessage(v2s.ReceiveMessageRequest(
            group=group, message_queue=v2.MessageQueue(topic=topic, id=-1), batch_size=8,
            invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=0)),
            metadata=md, timeout=5)
        entries = [v2s.AckMessageEntry(message_id=r.message.system_properties.message_id,
                                       receipt_handle=r.message.system_properties.receipt_handle)
                   for r in replies if r.HasField("message")]
        if entries:
            stub.AckMessage(v2s.AckMessageRequest(group=group, topic=topic, entries=entries),
                            metadata=md, timeout=5)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        for channel in self._channels.values():
            channel.close()


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART_DIR / "dashboards" / "pocketmq-overview.json").read_text())
    return data


def dashboard_targets(controller: bool = False) -> list[Any]:
    """One pytest param per query of the shipped dashboard; the failover controller's panels
    (pocketmq_controller_*, empty under controllerMode none) only with ``controller``."""
    params = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            if ("pocketmq_controller_" in target["expr"]) == controller:
                params.append(pytest.param(target["expr"], id=f"{panel['title']}/{target['refId']}"))
    return params


def panel_query(title: str, ref: str = "A") -> str:
    panel = next(p for p in dashboard()["panels"] if p["title"] == title)
    return str(next(t["expr"] for t in panel["targets"] if t["refId"] == ref))


def grafana_to_promql(expr: str) -> str:
    """What Grafana sends with "All" selected in every variable and a 1 s scrape interval."""
    expr = expr.replace("$__rate_interval", "10s")
    return re.sub(r"\$(namespace|cluster|broker)\b", ".*", expr)

"""The image the chart runs, built from the Dockerfile and run as the chart's pods.

``scripts/image.py`` builds ``pocketmq/pocketmq:0.1.0`` (Docker where its engine answers, else
podman; from python:3.11-slim, or a Debian base made here when that cannot be pulled; cached by
the hash of its inputs). Then a NameServer, a master and a slave run as containers of it with the
command, args and env of the chart's rendered pods, a read-only root filesystem and the chart's
user (see containers.py): messages produced and consumed with the project's client go through,
the slave replicates, every /metrics answers, the chart's ``helm test`` pod (the image's
``pocketmq`` CLI) passes, and SIGTERM stops each container cleanly within its grace period.

Where no engine can build or run containers these tests fail with the reason; they never skip.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq import Admin, Consumer, Message, Producer, SendStatus
from pocketmq.broker.v1 import broker_pb2 as bpb
from scripts import image
from tests.helm import client
from tests.helm.chart import NAMESPACE, render
from tests.helm.e2e import brokers, chart_credentials, namesrvs, wait_for
from tests.helm.localpods import LocalPod
from tests.image.containers import FIGURES, ContainerCluster

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.timeout(900)]

#: One NameServer (ready as soon as it serves: no warm-up, so its start time is what is
#: measured) and one group of master + slave.
VALUES: dict[str, Any] = {"namesrv": {"replicas": 1, "readinessWarmUpSeconds": 0},
                          "broker": {"groups": 1, "slavesPerGroup": 1,
                                     # no API server next to the containers: static roles
                                     "controllerMode": "none"}}
TOPIC = "ImageE2E"
MESSAGES = 200
QUEUES = 4
#: 250 MB until issue 19 made NumPy a runtime dependency of the broker (its vectorised store paths);
#: NumPy adds about 50 MB even trimmed (28 MB of it the OpenBLAS its core module links).
SIZE_TARGET_BYTES = 320_000_000


def chart_image() -> str:
    (name,) = {pod.container()["image"] for pod in render(VALUES).pod_templates()}
    return str(name)


@pytest.fixture(scope="module")
def built() -> tuple[image.Engine, image.Built]:
    failure = ""
    try:
        engine, result = image.build(chart_image(), out=sys.stderr,
                                     engine_name=os.environ.get("POCKETMQ_IMAGE_ENGINE", "auto"))
        image.check_can_run(engine, result.ref)
    except image.ImageError as exc:
        failure = str(exc)
    if failure:  # never a skip: `make setup` installs podman; a host that cannot run it is a failure
        pytest.fail(f"the chart's image cannot be built and run here: {failure}", pytrace=False)
    FIGURES["engine"] = engine.name
    FIGURES["base"] = result.base
    FIGURES["image_size_mb"] = f"{result.size_bytes / 1e6:.0f}"
    FIGURES["image_build_s"] = f"{result.seconds:.1f} ({'built' if result.built else 'cached'})"
    return engine, result


@pytest.fixture(scope="module")
def cluster(built: tuple[image.Engine, image.Built],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerCluster]:
    engine, result = built
    workdir = tmp_path_factory.mktemp("containers")
    manifests = render(VALUES)
    pods = ContainerCluster(manifests, workdir, NAMESPACE, engine, result.ref)
    # The chart turns access control on: the tests' calls sign with its Super user.
    client.CREDENTIALS = chart_credentials(manifests)
    try:
        (ns,) = namesrvs(pods)
        pods.start([ns])
        pods.wait_ready(60, [ns])
        FIGURES["namesrv_ready_s"] = f"{time.monotonic() - pods.started[ns.name]:.2f}"
        pods.start(brokers(pods))
        pods.wait_ready(120)
        for pod in brokers(pods):
            FIGURES[f"{pod.name}_started_s"] = f"{time.monotonic() - pods.started[pod.name]:.2f}"
        yield pods
    finally:
        pods.stop(max_grace=30)
        pods.remove()
        client.CREDENTIALS = None


def master(cluster: ContainerCluster) -> LocalPod:
    return next(p for p in brokers(cluster) if p.template.ordinal == 0)


def slave(cluster: ContainerCluster) -> LocalPod:
    return next(p for p in brokers(cluster) if p.template.ordinal == 1)


def test_the_image_is_small_and_runs_as_the_charts_user(built: tuple[image.Engine, image.Built]) -> None:
    engine, result = built
    assert result.ref == chart_image()
    size = result.size_bytes
    target_mb = SIZE_TARGET_BYTES / 1e6
    assert size < SIZE_TARGET_BYTES, f"{result.ref} is {size / 1e6:.0f} MB (target < {target_mb:.0f} MB)"
    security = render(VALUES).pod_templates()[0].spec["securityContext"]
    user = engine.run("image", "inspect", "--format", "{{.Config.User}}", result.ref).stdout.strip()
    assert user == f"{security['runAsUser']}:{security['runAsGroup']}", "runAsNonRoot needs a numeric USER"


def test_every_container_runs_as_the_charts_user_on_a_read_only_root(cluster: ContainerCluster) -> None:
    for pod in cluster.workload_pods():
        sc = cluster.security(pod)
        ids = cluster.exec(pod, "id", "-u")
        assert ids.stdout.strip() == str(sc["runAsUser"]), (pod.name, ids.stderr)
        write = cluster.exec(pod, "python", "-c", "open('/opt/pocketmq/probe', 'w')")
        assert write.returncode != 0 and "Read-only file system" in write.stderr, (pod.name, write.stderr)
    for pod in brokers(cluster):  # the store is written through the data volume, as the chart's user
        store = pod.mounts["/data"]
        owners = {f.stat().st_uid for f in store.rglob("*")}
        assert owners == {cluster.security(pod)["runAsUser"]}, (pod.name, owners)


def test_brokers_take_their_identity_from_the_rendered_pod(cluster: ContainerCluster) -> None:
    for pod in brokers(cluster):
        status = client.status(pod.addr("grpc"))
        assert status.broker_id == pod.template.ordinal
        assert status.broker_role == ("SLAVE" if pod.template.ordinal else "ASYNC_MASTER")
        assert status.broker_addr == pod.addr("grpc"), "brokerIP1 must be the pod IP (downward API)"


@pytest.fixture(scope="module")
def sent(cluster: ContainerCluster) -> list[bytes]:
    """Messages produced from the host with the project's client, through the NameServer's route."""
    (ns,) = namesrvs(cluster)
    namesrv = ns.addr("grpc")
    with Admin(namesrv, credentials=client.CREDENTIALS) as admin:
        created = admin.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES)
        assert created and all(r.ok for r in created), created
    wait_for(lambda: client.route(namesrv, TOPIC).queue_datas, 20, f"{TOPIC} routed")
    bodies = [f"image-{i}".encode() for i in range(MESSAGES)]
    with Producer(namesrv, credentials=client.CREDENTIALS) as producer:
        statuses = {producer.send(Message(TOPIC, body)).status for body in bodies}
    assert statuses == {SendStatus.SEND_OK}
    return bodies


def test_messages_go_through_with_the_client(cluster: ContainerCluster, sent: list[bytes]) -> None:
    (ns,) = namesrvs(cluster)
    got: list[bytes] = []
    with Consumer("image-e2e", ns.addr("grpc"), consume_from="first", rebalance_interval=1.0,
                  credentials=client.CREDENTIALS) as consumer:
        consumer.subscribe(TOPIC)
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.receive(timeout=5)
            if msg is not None:
                got.append(msg.body)
    assert sorted(got) == sorted(sent)


def test_the_slave_replicates_its_master(cluster: ContainerCluster, sent: list[bytes]) -> None:
    m, s = master(cluster), slave(cluster)
    target = client.status(m.addr("grpc")).commit_log_max_offset
    assert target > 0
    wait_for(lambda: client.status(s.addr("grpc")).commit_log_max_offset >= target, 30,
             f"{s.name} caught up with {m.name}")
    with client.broker(m.addr("grpc")) as stub:
        ha = stub.GetHAStatus(bpb.GetHAStatusRequest(), timeout=10)
    assert [sl.ack_offset >= target for sl in ha.slaves] == [True], ha

    def on_slave() -> list[bytes]:
        return sorted(b for q in range(QUEUES) for b in client.pull_all(s.addr("grpc"), TOPIC, q))
    assert wait_for(lambda: on_slave() == sorted(sent), 30, f"every message readable on {s.name}")


def test_every_container_serves_metrics(cluster: ContainerCluster) -> None:
    expected = {"namesrv": b"pocketmq_namesrv_live_brokers", "broker": b"pocketmq_commitlog_max_offset"}
    for pod in cluster.workload_pods():
        with urllib.request.urlopen(f"http://{pod.addr('metrics')}/metrics", timeout=10) as reply:
            body = reply.read()
        assert expected[pod.component] in body, pod.name


def test_the_images_cli_passes_the_charts_helm_test(cluster: ContainerCluster) -> None:
    (pod,) = [p for p in cluster.pods if p.template.owner_kind == "Pod"]
    started = time.monotonic()
    assert cluster.run_to_completion(pod, timeout=180) == 0, pod.describe()
    FIGURES["helm_test_pod_s"] = f"{time.monotonic() - started:.1f}"
    assert "round trip OK" in pod.log_text()


def test_sigterm_stops_every_container_cleanly_within_its_grace_period(cluster: ContainerCluster) -> None:
    (ns,) = namesrvs(cluster)
    codes = cluster.stop(brokers(cluster))
    assert codes == {p.name: 0 for p in brokers(cluster)}, f"a broker did not exit 0 on SIGTERM: {codes}"
    for pod in brokers(cluster):
        assert cluster.stop_seconds[pod.name] < cluster.grace(pod), (pod.name, cluster.stop_seconds)
    assert dict(client.cluster_info(ns.addr("grpc")).broker_live_table) == {}, "brokers did not unregister"
    assert cluster.stop([ns]) == {ns.name: 0}
    assert cluster.stop_seconds[ns.name] < cluster.grace(ns)
    for name, seconds in cluster.stop_seconds.items():
        FIGURES[f"{name}_stop_s"] = f"{seconds:.2f}"

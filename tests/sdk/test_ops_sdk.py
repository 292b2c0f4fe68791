"""Operator commands with the official RocketMQ 5 Python SDK as the consumer (in .venv-sdk, in a
subprocess): ``consumer connections`` lists it with its language, SDK version and subscription,
and an offset reset moves the POP consumer back while it runs (it receives the messages again)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from pocketmq import Admin
from tests.integration.procs import ROOT, ProcessGroup
from tests.sdk.cluster import SDK_PYTHON, Cluster, start_cluster

SCRIPT = ROOT / "tests" / "sdk" / "python" / "reset_consume.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("ops-sdk-cluster")
    group = ProcessGroup(tmp / "logs")
    try:
        yield start_cluster(group, tmp, names=("broker-a",))
    finally:
        group.stop_all()


def read_event(proc: subprocess.Popen[str], event: str) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            doc: dict[str, object] = json.loads(line)
            if doc.get("event") == event:
                return doc
    proc.wait(10)
    raise AssertionError(f"SDK consumer ended without {event!r} (rc {proc.returncode}): "
                         f"{proc.stderr.read() if proc.stderr else ''}")


def test_reset_moves_a_running_sdk_pop_consumer_back_and_connections_list_it(cluster: Cluster) -> None:
    topic, group = "sdk-reset", "sdk-reset-g"
    cluster.create_topic(topic, queues=2)
    broker = cluster.broker("broker-a")
    bodies = [f"m-{i}" for i in range(10)]
    for body in bodies:
        broker.client.send(topic, body.encode())
    proc = subprocess.Popen(
        [str(SDK_PYTHON), str(SCRIPT), "--endpoint", cluster.namesrv, "--topic", topic, "--group", group,
         "--count", "10"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT)
    try:
        first = read_event(proc, "first")
        assert sorted(first["bodies"]) == sorted(bodies)  # type: ignore[arg-type]
        with Admin(cluster.namesrv) as admin:
            members, _ = admin.consumer_connections(group)
            assert len(members) == 1, members
            sdk = members[0]
            assert (sdk.protocol, sdk.client_type) == ("rocketmq-v2", "SIMPLE_CONSUMER")
            assert sdk.language and sdk.version and sdk.client_id
            assert [(s.topic, s.expression) for s in sdk.subscriptions] == [(topic, "*")]

            results = admin.reset_offsets(group, topic, earliest=True)
            changes = [c for r in results for c in r.value.queues]
            assert sum(c.old_offset - c.new_offset for c in changes) == 10, changes
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        second = read_event(proc, "second")
        assert sorted(second["bodies"]) == sorted(bodies)  # type: ignore[arg-type]
        read_event(proc, "done")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)

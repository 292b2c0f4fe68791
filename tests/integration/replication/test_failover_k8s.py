"""Automatic failover under controllerMode=kubernetes with real broker processes and a real
NameServer; the coordination service is tests/fake_apiserver.py (no Kubernetes cluster runs
here), which enforces resourceVersion conflicts like the real API server.  Three members of one
SYNC_MASTER group share the module; each member is "pod" ``pod-m<n>`` there and labels itself
with its role on every role change (what the chart's master Service selects)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pocketmq.wire.dcs import K8S_EPOCH, k8s_lease_name
from services.broker.k8s_labels import ROLE_LABEL
from tests.fake_apiserver import FakeApiServer
from tests.integration.procs import ProcessGroup, attach_logs
from tests.integration.replication.failover_support import (
    Member,
    Producers,
    check_all_acked_on,
    logs_equal,
    master_of,
    start_members,
    sync_state,
)
from tests.support import free_port, wait_until

pytestmark = pytest.mark.slow

NS = "mq"
CLUSTER = "k8s"
LEASE = k8s_lease_name(CLUSTER, "broker-a")


@dataclass
class Group:
    api: FakeApiServer
    members: list[Member]
    procs: ProcessGroup


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    tmp = tmp_path_factory.mktemp("k8s-failover")
    procs = ProcessGroup(tmp / "logs")
    api = FakeApiServer()
    try:
        port = free_port()
        namesrv = f"127.0.0.1:{port}"
        procs.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", "0"], namesrv,
                         name="namesrv", service="pocketmq.namesrv.v1.NameServer")
        for n in (1, 2, 3):
            api.add_pod(NS, f"pod-m{n}", {"app": "pocketmq"})
        members = start_members(
            procs, namesrv, tmp, CLUSTER,
            ("--controller-mode", "kubernetes", "--controller-k8s-api-server", api.url,
             "--controller-k8s-namespace", NS),
            env=lambda n: {"POD_NAME": f"pod-m{n}", "POD_NAMESPACE": NS})
        yield Group(api, members, procs)
    finally:
        procs.stop_all()
        api.close()


@pytest.fixture(autouse=True)
def _logs(request: pytest.FixtureRequest, group: Group) -> None:
    attach_logs(request.node, group.procs)


def epoch(api: FakeApiServer) -> int:
    lease = api.lease(NS, LEASE)
    assert lease is not None
    return int(lease["metadata"]["annotations"][K8S_EPOCH])


def labelled_masters(api: FakeApiServer) -> list[str]:
    return sorted(name for name in (f"pod-m{n}" for n in (1, 2, 3))
                  if api.pod_labels(NS, name).get(ROLE_LABEL) == "master")


def test_sigkill_the_master_under_producers_a_slave_takes_over_and_nothing_acknowledged_is_lost(
        group: Group) -> None:
    api, members = group.api, group.members
    master = master_of(members, timeout=20)
    wait_until(lambda: len(sync_state(master)) == 3, 20, message="both slaves in sync")
    wait_until(lambda: labelled_masters(api) == [f"pod-m{master.id}"], 10, message="the master's pod label")
    first_epoch = epoch(api)
    producers = Producers(members)
    try:
        wait_until(lambda: producers.count() > 300, 30, message="PUT_OK before the kill")
        killed_at = time.monotonic()
        master.proc.kill()
        first_ok = wait_until(lambda: producers.ok_since(killed_at, master.id), 15,
                              message="PUT_OK on a new master")
        new_master = master_of([m for m in members if m is not master])
        master.restart()  # rejoins as a slave of the new master
        wait_until(lambda: (s := master.status()) is not None and s.broker_role == "SLAVE" and s.connected,
                   20, message="the old master rejoined as a slave")
        resumed = time.monotonic()
        wait_until(lambda: producers.ok_since(resumed, -1), 10, message="writes go on")
    finally:
        producers.finish()
    failover_s = first_ok - killed_at
    # the < 5 s target is make bench-failover's; this bound proves a failover, not a restart
    assert failover_s < 2 * 5.0, f"failover took {failover_s:.2f} s"
    assert epoch(api) > first_epoch
    lease = api.lease(NS, LEASE)
    assert lease is not None and lease["spec"]["holderIdentity"] == f"member-{new_master.id}"
    # the restarted pod relabelled itself: the Service selects the new master only
    wait_until(lambda: labelled_masters(api) == [f"pod-m{new_master.id}"], 10, message="pod labels follow")
    top = logs_equal(members, new_master)  # the restarted old master too, byte for byte
    check_all_acked_on(producers, new_master, top)
    # what the dashboard's failover row shows, from the members' own /metrics
    shown = new_master.metrics()
    assert shown["pocketmq_controller_is_master"] == 1 and shown["pocketmq_controller_epoch"] == epoch(api)
    assert shown["pocketmq_controller_failovers_total"] >= 1
    assert shown["pocketmq_controller_last_failover_timestamp_seconds"] > time.time() - 120
    assert shown["pocketmq_controller_sync_state_set_size"] == 3
    assert 0 < shown["pocketmq_controller_lease_renew_latency_seconds"] < 1
    assert master.metrics()["pocketmq_controller_is_master"] == 0
    print(f"failover_s={failover_s:.2f} acked={len(producers.acked)} conflicts={api.conflicts} "
          f"requests={api.requests}")


def test_planned_switchover_moves_the_lease_to_the_named_slave(group: Group) -> None:
    api, members = group.api, group.members
    master = master_of(members)
    wait_until(lambda: len(sync_state(master)) == 3, 20, message="both slaves in sync")
    target = max(m.id for m in members if m is not master)
    producers = Producers(members)
    try:
        wait_until(lambda: producers.count() > 200, 30)
        out = subprocess.run(
            [sys.executable, "-m", "pocketmq.cli", "broker", "switchover", "broker-a", "--cluster", CLUSTER,
             "--kubernetes", "--kube-api", api.url, "--namespace", NS, "--to", str(target),
             "--output", "json"],
            capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        result = json.loads(out.stdout)
        assert (result["from"], result["to"]) == (master.id, target)
        assert result["epoch"] > result["from_epoch"]
        assert result["seconds"] < 2 * 5  # (a bound for a loaded machine, as above)
        switched = time.monotonic()
        wait_until(lambda: producers.ok_since(switched, master.id), 15, message="PUT_OK on the new master")
        wait_until(lambda: (s := master.status()) is not None and s.broker_role == "SLAVE" and s.connected,
                   20, message="the old master follows")
    finally:
        producers.finish()
    new_master = next(m for m in members if m.id == target)
    assert new_master.is_master()
    wait_until(lambda: labelled_masters(api) == [f"pod-m{target}"], 10, message="pod labels follow")
    top = logs_equal(members, new_master)
    check_all_acked_on(producers, new_master, top)

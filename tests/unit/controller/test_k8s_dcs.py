"""The Lease-backed DCS (controllerMode=kubernetes) with the real ``kubernetes`` client against a
fake API server that enforces resourceVersion conflicts (tests/fake_apiserver.py).  Lease expiry
is judged by the reader's clock: the tests drive that clock."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from pocketmq.wire.dcs import K8S_EPOCH, K8S_SYNC_STATE_SET, k8s_lease_name
from services.broker.config import BrokerConfig
from services.broker.controller.dcs import MemberRecord, SyncStateSet
from services.broker.controller.k8s_dcs import KubernetesDcs
from services.broker.controller.runner import open_dcs
from services.common.config import ConfigError
from tests.fake_apiserver import FakeApiServer

NS = "mq"
LEASE = "pocketmq-c1-broker-a"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.close()


def member(server: FakeApiServer, clock: Clock | None = None) -> KubernetesDcs:
    cfg = client.Configuration()
    cfg.host = server.url
    return KubernetesDcs(client.ApiClient(cfg), NS, LEASE, ttl_s=3.0, renew_s=0.5, timeout_s=2.0,
                         clock=clock or Clock())


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_first_candidate_takes_the_lease_then_renews_it(server: FakeApiServer) -> None:
    a, b = member(server), member(server)
    assert run(a.campaign(1, "a:1", "a:2")) == 1
    assert run(b.campaign(2, "b:1", "b:2")) is None  # held and alive
    leader = run(b.leader())
    assert leader is not None and (leader.broker_id, leader.epoch, leader.ready) == (1, 1, False)
    assert run(a.mark_ready(1, 1, "a:1", "a:2"))
    assert run(b.leader()).ready
    version = server.lease(NS, LEASE)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert run(a.renew())
    stored = server.lease(NS, LEASE)
    assert stored is not None and stored["metadata"]["resourceVersion"] != version
    assert stored["spec"]["holderIdentity"] == "member-1" and stored["spec"]["leaseDurationSeconds"] == 3


def test_a_lease_not_renewed_for_a_ttl_goes_to_another_member_with_a_higher_epoch(
        server: FakeApiServer) -> None:
    clock = Clock()
    a, b = member(server), member(server, clock)
    assert run(a.campaign(1, "a:1", "a:2")) == 1
    assert run(b.leader()) is not None  # b first sees the record now ...
    clock.now += 2.9
    assert run(b.campaign(2, "b:1", "b:2")) is None  # ... and not yet a TTL later
    assert run(a.renew())  # a renewal starts b's count again
    clock.now += 2.9
    assert run(b.leader()) is not None and run(b.campaign(2, "b:1", "b:2")) is None
    clock.now += 3.0
    assert run(b.leader()) is None
    assert run(b.campaign(2, "b:1", "b:2")) == 2
    assert not run(a.renew())  # a lost it: it must fence (the controller demotes it)
    stored = server.lease(NS, LEASE)
    assert stored is not None
    assert stored["spec"]["leaseTransitions"] == 1 and stored["metadata"]["annotations"][K8S_EPOCH] == "2"


def test_a_stale_write_fails_with_409_so_only_one_racer_wins(server: FakeApiServer) -> None:
    holder = member(server)
    assert run(holder.campaign(1, "a:1", "a:2")) == 1
    assert run(holder.resign()) is None  # the holder is gone: the Lease is free
    racers = [member(server) for _ in range(5)]
    barrier = threading.Barrier(len(racers))
    results: dict[int, int | None] = {}

    def race(i: int, dcs: KubernetesDcs) -> None:
        read = dcs._read

        def read_then_wait(name: str) -> Any:
            obj = read(name)
            barrier.wait()  # every racer holds the same resourceVersion before any writes
            return obj
        dcs._read = read_then_wait  # type: ignore[method-assign]
        results[i] = asyncio.run(dcs.campaign(10 + i, "x:1", "x:2"))

    threads = [threading.Thread(target=race, args=(i, d)) for i, d in enumerate(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    winners = [i for i, epoch in results.items() if epoch is not None]
    assert len(winners) == 1, results
    assert results[winners[0]] == 2
    assert server.conflicts == len(racers) - 1
    stored = server.lease(NS, LEASE)
    assert stored is not None and stored["spec"]["holderIdentity"] == f"member-{10 + winners[0]}"


def test_a_plain_stale_replace_is_refused(server: FakeApiServer) -> None:
    a = member(server)
    run(a.campaign(1, "a:1", "a:2"))
    stale = server.lease(NS, LEASE)
    assert stale is not None
    assert run(a.renew())
    api = client.CoordinationV1Api(a.api_client)
    with pytest.raises(client.ApiException) as err:
        api.replace_namespaced_lease(LEASE, NS, stale)
    assert err.value.status == 409


def test_the_sync_state_set_is_written_only_by_the_master_of_its_epoch(server: FakeApiServer) -> None:
    clock = Clock()
    a, b = member(server), member(server, clock)
    run(a.campaign(1, "a:1", "a:2"))
    assert run(a.publish_sync_state(SyncStateSet(1, 1, frozenset({1, 2, 3}))))
    assert run(b.sync_state()) == SyncStateSet(1, 1, frozenset({1, 2, 3}))
    assert not run(b.publish_sync_state(SyncStateSet(1, 2, frozenset({2}))))  # not the holder
    run(b.leader())
    clock.now += 3.5
    assert run(b.campaign(2, "b:1", "b:2")) == 2
    assert not run(a.publish_sync_state(SyncStateSet(1, 1, frozenset({1}))))  # deposed
    stored = server.lease(NS, LEASE)
    assert stored is not None
    assert json.loads(stored["metadata"]["annotations"][K8S_SYNC_STATE_SET])["members"] == [1, 2, 3]


def test_members_publish_offsets_and_drop_out_when_silent(server: FakeApiServer) -> None:
    clock = Clock()
    reader, m2, m3 = member(server, clock), member(server), member(server)
    run(m2.publish_member(2, 500, "b:1"))
    run(m3.publish_member(3, 700, "c:1"))
    assert run(reader.members()) == {2: MemberRecord(500, False), 3: MemberRecord(700, False)}
    run(m2.publish_member(2, 600, "b:1"))  # within renew_s of the last write: not written
    assert run(reader.members())[2] == MemberRecord(500, False)
    run(m3.publish_member(3, 720, "c:1", leaderless=True))  # ... unless it now saw no leader
    assert run(reader.members())[3] == MemberRecord(720, True)
    clock.now += 2.0
    m2._member_written -= 1.0
    run(m2.publish_member(2, 600, "b:1"))
    assert run(reader.members()) == {2: MemberRecord(600, False), 3: MemberRecord(720, True)}
    clock.now += 1.5  # m3 silent for 3.5 s > TTL, m2 wrote 1.5 s ago
    assert run(reader.members()) == {2: MemberRecord(600, False)}


def test_switchover_request_and_hand_over(server: FakeApiServer) -> None:
    a, b = member(server), member(server)
    run(a.campaign(1, "a:1", "a:2"))
    assert run(a.switchover()) is None
    run(b.hand_over(3))
    assert run(a.switchover()) == 3
    run(a.resign())
    assert run(b.leader()) is None  # resigned: free at once, no TTL to wait
    assert run(b.campaign(3, "c:1", "c:2")) == 2
    run(b.clear_switchover())
    assert run(a.switchover()) is None


def test_kubernetes_mode_config(tmp_path: Any) -> None:
    cfg = BrokerConfig(broker_id=1, controller_mode="kubernetes", controller_k8s_api_server="http://127.0.0.1:1",
                       controller_k8s_namespace="mq")
    dcs = open_dcs(cfg)
    assert isinstance(dcs, KubernetesDcs)
    assert dcs.lease_name == k8s_lease_name("DefaultCluster", "broker-a")
    assert dcs.lease_name == "pocketmq-defaultcluster-broker-a"
    assert dcs.members_name == "pocketmq-defaultcluster-broker-a-members"
    assert dcs.namespace == "mq"
    assert k8s_lease_name("My_Cluster", "Broker.A") == "pocketmq-my-cluster-broker-a"
    for key, kwargs in (
        ("controllerMode", {"controller_mode": "zookeeper"}),
        ("controllerK8sNamespace", {"controller_k8s_namespace": "Not_A_Namespace"}),
        ("controllerK8sLeaseName", {"controller_k8s_lease_name": "UPPER"}),
        ("controllerK8sApiServer", {"controller_k8s_api_server": "127.0.0.1:6443"}),
        ("controllerK8sKubeconfig", {"controller_k8s_kubeconfig": str(tmp_path / "missing")}),
    ):
        with pytest.raises(ConfigError) as err:
            BrokerConfig(broker_id=1, **{"controller_mode": "kubernetes", **kwargs})  # type: ignore[arg-type]
        assert err.value.key == key


def test_kubernetes_mode_outside_a_cluster_without_credentials_fails_naming_the_key(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        open_dcs(BrokerConfig(broker_id=1, controller_mode="kubernetes"))
    assert err.value.key == "controllerK8sApiServer"


def test_a_new_lease_never_takes_an_epoch_below_the_candidates_store(server: FakeApiServer) -> None:
    """A deleted Lease, or a group moved from etcd (epochs = etcd revisions): the epoch goes on
    from the newest one in the candidate's store, never back."""
    a, b = member(server), member(server)
    assert run(a.campaign(1, "a:1", "a:2", floor=1234)) == 1235
    run(a.resign())
    assert run(b.campaign(2, "b:1", "b:2", floor=7)) == 1236


def test_a_demoted_master_releases_only_a_lease_it_still_holds(server: FakeApiServer) -> None:
    old, new = member(server), member(server)
    assert run(old.campaign(1, "a:1", "a:2")) == 1
    assert run(old.release(1, 1)) == "released"
    stored = server.lease(NS, LEASE)
    assert stored is not None and stored["spec"]["holderIdentity"] == ""
    assert run(old.release(1, 1)) == "gone"
    assert run(new.leader()) is None
    assert run(new.campaign(2, "b:1", "b:2")) == 2  # at once: no Lease duration to wait out
    version = server.lease(NS, LEASE)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert run(old.release(1, 1)) == "other"  # a stale release: the Lease is the newer master's
    stored = server.lease(NS, LEASE)
    assert stored is not None and stored["spec"]["holderIdentity"] == "member-2"
    assert stored["metadata"]["resourceVersion"] == version, "not written at all"
    assert run(new.renew())

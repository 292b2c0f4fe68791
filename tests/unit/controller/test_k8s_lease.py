"""The Lease election step against a fake API server that enforces resourceVersion conflicts."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from services.broker.controller.k8s_lease import LeaseElection
from tests.unit.controller.fake_apiserver import FakeLeaseServer


@pytest.fixture
def server() -> Iterator[FakeLeaseServer]:
    s = FakeLeaseServer()
    yield s
    s.close()


def api(server: FakeLeaseServer) -> Any:
    cfg = client.Configuration()
    cfg.host = server.url
    return client.ApiClient(cfg)


def candidate(server: FakeLeaseServer, identity: str) -> LeaseElection:
    return LeaseElection(api(server), "ns", "broker-a-leader", identity, duration_s=3)


def test_first_candidate_takes_the_lease_and_renews_it(server: FakeLeaseServer) -> None:
    a, b = candidate(server, "m1"), candidate(server, "m2")
    assert a.try_acquire_or_renew() and a.epoch == 1
    assert not b.try_acquire_or_renew()  # held and not expired
    assert a.try_acquire_or_renew() and a.epoch == 1  # a renewal keeps the epoch
    state, _ = a.read()  # type: ignore[misc]
    assert state.holder == "m1" and state.transitions == 0


def test_an_expired_lease_goes_to_another_candidate_with_a_new_epoch(server: FakeLeaseServer) -> None:
    a, b = candidate(server, "m1"), candidate(server, "m2")
    assert a.try_acquire_or_renew()
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=4)
    assert b.try_acquire_or_renew(now=later) and b.epoch == 2
    assert not a.try_acquire_or_renew()  # m2 holds it now
    state, _ = b.read()  # type: ignore[misc]
    assert state.holder == "m2" and state.transitions == 1


def test_a_stale_update_fails_so_only_one_racer_wins(server: FakeLeaseServer) -> None:
    a = candidate(server, "m1")
    assert a.try_acquire_or_renew()
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=4)
    racers = [candidate(server, f"m{i}") for i in range(2, 7)]
    # every racer read the same expired Lease; all write with that resourceVersion
    barrier = threading.Barrier(len(racers))
    original_read = LeaseElection.read
    results: dict[str, bool] = {}

    def run(r: LeaseElection) -> None:
        snapshot = original_read(r)
        r.read = lambda: (barrier.wait(), snapshot)[1]  # type: ignore[method-assign]
        results[r.identity] = r.try_acquire_or_renew(now=later)

    threads = [threading.Thread(target=run, args=(r,)) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    winners = [name for name, won in results.items() if won]
    assert len(winners) == 1, results
    assert server.conflicts == len(racers) - 1
    state, _ = a.read()  # type: ignore[misc]
    assert state.holder == winners[0] and state.transitions == 1


def test_release_lets_the_next_candidate_in_at_once(server: FakeLeaseServer) -> None:
    a, b = candidate(server, "m1"), candidate(server, "m2")
    assert a.try_acquire_or_renew()
    assert not b.release()
    assert a.release()
    assert b.try_acquire_or_renew() and b.epoch == 2

"""Fixtures of the client suites: ``cluster`` (a fresh cluster per test, processes in the
``procs`` group) and ``shared_cluster`` (one NameServer and two master broker groups for the whole
session, for tests that only need distinct topics and groups)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.client.cluster import Cluster, running_cluster
from tests.integration.procs import ProcessGroup, attach_logs


@pytest.fixture
def cluster(procs: ProcessGroup, tmp_path: Path) -> Cluster:
    """An empty cluster: call ``start_namesrv()`` / ``start_broker(...)``."""
    return Cluster(procs, tmp_path / "cluster")


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """NameServer + masters broker-a and broker-b, shared by the client suites' tests (each uses
    its own topics and groups)."""
    with running_cluster(tmp_path_factory.mktemp("shared-cluster"),
                         [("broker-a", 0), ("broker-b", 0)]) as cluster:
        yield cluster


@pytest.fixture
def shared(shared_cluster: Cluster, request: pytest.FixtureRequest) -> Cluster:
    attach_logs(request.node, shared_cluster.group, "shared ")
    return shared_cluster


"""A module-scoped cluster (NameServer, master broker-a and its slave) for the timer and
transaction suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.client.cluster import Cluster, running_cluster
from tests.integration.procs import attach_logs
from tests.integration.timer.helpers import BROKER_FLAGS


@pytest.fixture(scope="module")
def timer_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("timer-cluster"), [("broker-a", 0), ("broker-a", 1)],
                         BROKER_FLAGS) as cluster:
        yield cluster


@pytest.fixture
def tc(timer_cluster: Cluster, request: pytest.FixtureRequest) -> Cluster:
    attach_logs(request.node, timer_cluster.group, "cluster ")
    return timer_cluster


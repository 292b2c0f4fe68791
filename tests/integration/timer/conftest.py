"""A module-scoped cluster (NameServer, master broker-a and its slave) for the timer and
transaction suites."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup
from tests.integration.timer.helpers import BROKER_FLAGS

_KEY = pytest.StashKey[Cluster]()


@pytest.fixture(scope="module")
def timer_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("timer-cluster")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a", 0, *BROKER_FLAGS)
        cluster.start_broker("broker-a", 1, *BROKER_FLAGS)
        yield cluster
    finally:
        group.stop_all()


@pytest.fixture
def tc(timer_cluster: Cluster, request: pytest.FixtureRequest) -> Cluster:
    request.node.stash[_KEY] = timer_cluster
    return timer_cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    cluster = item.stash.get(_KEY, None)
    if cluster is not None and report.failed:
        for title, text in cluster.group.report():
            report.sections.append((f"cluster {title} ({report.when})", text))
    return report

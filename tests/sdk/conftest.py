"""One real cluster (NameServer + two broker groups, autoCreateTopicEnable=false) shared by the
RocketMQ 5 SDK tests of this package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import procs, pytest_runtest_makereport  # noqa: F401 (shared fixtures)
from tests.integration.procs import ProcessGroup
from tests.sdk.cluster import NODE_DIR, SDK_PYTHON, Cluster, start_cluster

#: Short transaction checks for the tests.
TRANSACTION_FLAGS = ["--transaction-time-out", "1000", "--transaction-check-interval", "1000"]


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert SDK_PYTHON.exists(), "the Python SDK venv is missing: run `make setup`"
    assert (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").exists(), "run `make setup` (npm ci)"
    tmp = tmp_path_factory.mktemp("sdk-cluster")
    group = ProcessGroup(tmp / "logs")
    try:
        yield start_cluster(group, tmp, extra=["--auto-create-topic-enable", "false", *TRANSACTION_FLAGS])
    finally:
        group.stop_all()

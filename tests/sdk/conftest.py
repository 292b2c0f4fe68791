"""One real cluster (NameServer + two broker groups, autoCreateTopicEnable=false) shared by the
RocketMQ 5 SDK tests of this package."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from services.broker.config import BrokerConfig
from services.broker.storage import record
from services.common.config import config_key
from tests.integration.conftest import procs, pytest_runtest_makereport  # noqa: F401 (shared fixtures)
from tests.integration.procs import ProcessGroup
from tests.sdk.cluster import NODE_DIR, SDK_PYTHON, Cluster, start_cluster

#: The timer store and the transaction store (the other half of issue 14) are present.
HAS_TIMER = hasattr(record, "PROPERTY_TIMER_DELIVER_MS")
#: Flag of each BrokerConfig key (RocketMQ's key names).
_FLAGS = {config_key(f): "--" + f.name.replace("_", "-") for f in dataclasses.fields(BrokerConfig)}
HAS_TRANSACTIONS = "transactionCheckInterval" in _FLAGS
#: Short transaction checks for the tests.
TRANSACTION_FLAGS = (
    [_FLAGS["transactionTimeOut"], "1000", _FLAGS["transactionCheckInterval"], "1000"]
    if HAS_TRANSACTIONS
    else []
)


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

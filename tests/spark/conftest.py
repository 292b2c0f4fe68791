"""Fixtures of the Spark suite: ONE SparkSession for the whole suite (local[2]; starting one takes
~10 s) and one shared cluster of real processes (a NameServer and master broker groups
``broker-a`` / ``broker-b``) for the tests that only need their own topics. Tests that kill or
age brokers start their own (see test_data_loss.py, test_slave_fallback.py).

Spark's Python workers run ``PYSPARK_PYTHON``: set here to this interpreter when unset (the
Makefile sets it too), because the default ``python3`` on PATH lacks pyarrow and pocketmq.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup

_GROUPS_KEY = pytest.StashKey[list[ProcessGroup]]()

#: Small enough that a few hundred messages take several pulls per queue.
BROKER_FLAGS = ("--max-transfer-count-on-message-in-memory", "64")


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and Path(home, "bin", "java").exists()))


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    if not _java_available():
        pytest.fail("Spark needs a Java runtime (java on PATH or JAVA_HOME): `make setup` installs "
                    "the Debian package openjdk-17-jre-headless", pytrace=False)
    from pyspark.sql import SparkSession

    import pocketmq.spark

    session = (SparkSession.builder.master("local[2]").appName("pocketmq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pocketmq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("spark-cluster")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a", 0, *BROKER_FLAGS)
        cluster.start_broker("broker-b", 0, *BROKER_FLAGS)
        yield cluster
    finally:
        group.stop_all()


def attach_logs(request: pytest.FixtureRequest, group: ProcessGroup) -> None:
    """Attach ``group``'s process logs to the report if the test fails."""
    request.node.stash.setdefault(_GROUPS_KEY, []).append(group)


@pytest.fixture
def shared(shared_cluster: Cluster, request: pytest.FixtureRequest) -> Cluster:
    attach_logs(request, shared_cluster.group)
    return shared_cluster


@pytest.fixture
def own_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster for one test (NameServer started; brokers are up to the test)."""
    group = ProcessGroup(tmp_path / "logs")
    attach_logs(request, group)
    cluster = Cluster(group, tmp_path / "cluster")
    try:
        cluster.start_namesrv()
        yield cluster
    finally:
        group.stop_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for group in item.stash.get(_GROUPS_KEY, []):
            for title, text in group.report():
                report.sections.append((f"{title} ({report.when})", text))
    return report

"""tests/helm: attach the local pods' logs and rewrites to the report of a failed test; the
``prometheus`` fixture of the suites that run the chart (each defines its own ``cluster``)."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.helm.localpods import LocalCluster
from tests.helm.prom import Prometheus


@pytest.fixture(scope="module")
def prometheus(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus configured from ``cluster``'s rendered ServiceMonitor/PrometheusRule."""
    prom = Prometheus(cluster, tmp_path_factory.mktemp("prometheus"))
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        cluster = funcargs.get("cluster")
        if cluster is not None:
            report.sections.append(("local pods", cluster.report()))
        prom = funcargs.get("prometheus")
        if prom is not None:
            report.sections.append(("prometheus log", prom.log_tail()))
    return report

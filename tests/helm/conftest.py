"""tests/helm: attach the local pods' logs and rewrites to the report of a failed test."""

from __future__ import annotations

from collections.abc import Generator

import pytest


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

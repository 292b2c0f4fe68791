"""tests/image: the measured figures at the end of the run; the containers' logs on failure."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.image.containers import FIGURES


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        cluster = getattr(item, "funcargs", {}).get("cluster")
        if cluster is not None:
            report.sections.append(("containers", cluster.report()))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("container image")
        terminalreporter.write_line(" ".join(f"{key}={value}" for key, value in FIGURES.items()))

"""Hooks for the whole suite.

Under ``CI=true`` (any of true/1/yes/on) a skipped test or module is a failure whose message is
the skip reason: ``make setup`` installs everything the tests run (Java, Prometheus, promtool,
Redis...), so a skip there can only mean something is missing or was renamed, and must not let
the run go green. Expected failures (``xfail``) are not skips and are left alone.

Hypothesis runs without its per-example deadline: the suite shares two cores with real brokers,
and speed is measured by the benchmarks, not by tests.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("pocketmq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pocketmq")

CI_VALUES = frozenset({"1", "true", "yes", "on"})
_TURNED = pytest.StashKey[list[str]]()


def strict_skips() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def _skip_reason(longrepr: object) -> tuple[str, str]:
    """(where, reason) of a skip report's ``longrepr``."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, reason = longrepr
        return f"{path}:{lineno}", str(reason)
    return "", str(longrepr)


def _as_failure(report: pytest.TestReport | pytest.CollectReport, config: pytest.Config) -> None:
    where, reason = _skip_reason(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true, which counts as a failure: {reason}"
                       + (f" ({where})" if where else "")
                       + "\n`make setup` installs every tool and package the tests need.")
    config.stash.setdefault(_TURNED, []).append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and strict_skips():
        _as_failure(report, item.config)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped and strict_skips():
        _as_failure(report, collector.config)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    turned = config.stash.get(_TURNED, [])
    if turned:
        terminalreporter.section("skips counted as failures (CI=true)", red=True)
        for line in turned:
            terminalreporter.line(line)

"""Fixtures shared by the integration suites: real processes on loopback (see procs.py)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ProcessGroup
from tests.support import free_port

_GROUP_KEY = pytest.StashKey[ProcessGroup]()


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessGroup]:
    """Processes started by one test: logs in ``tmp_path/logs/<name>.log``, attached to the report
    when the test fails; everything still running is stopped (SIGTERM, then SIGKILL)."""
    group = ProcessGroup(tmp_path / "logs")
    request.node.stash[_GROUP_KEY] = group
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def namesrv(procs: ProcessGroup) -> str:
    """A NameServer (real process) on a free loopback port; its address."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    procs.start_grpc("services.namesrv", ["--listen", addr, "--metrics-port", "0"], addr, name="namesrv",
                     service="pocketmq.namesrv.v1.NameServer")
    return addr


@pytest.fixture
def port() -> Callable[[], int]:
    """A factory of free 127.0.0.1 ports: ``port()``."""
    return free_port


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    group = item.stash.get(_GROUP_KEY, None)
    if group is not None and report.failed:
        for title, text in group.report():
            report.sections.append((f"{title} ({report.when})", text))
    return report

"""Helpers for tests that run real service processes on loopback.

* :class:`ProcessGroup` - starts ``sys.executable -m <module> <args>`` with the repository as the
  working directory, output captured to ``<log_dir>/<name>.log``; stops everything with SIGTERM,
  then SIGKILL after a timeout. The ``procs`` fixture (tests/integration/conftest.py) gives each
  test a group and attaches the processes' logs to the report of a failed test.
* :func:`attach_logs` / :func:`add_log_sections` - a group's process logs in the report of a
  failed test (the suites' ``pytest_runtest_makereport`` hooks call the latter).
* :meth:`ManagedProcess.wait_healthy` - poll grpc.health.v1 until SERVING (fails at once, with the
  log tail, if the process exits).

Ports and polling come from :mod:`tests.support` (re-exported here for older imports).

Nothing here knows about PocketMQ services; other suites reuse it as is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pocketmq.wire.tls import ClientTls, sync_channel
from tests.support import ROOT, async_wait_until, free_port, wait_until

__all__ = ["ROOT", "ManagedProcess", "ProcessFailedError", "ProcessGroup", "async_wait_until", "free_port",
           "wait_until"]

_all_processes: list[ManagedProcess] = []


@atexit.register
def _kill_leftovers() -> None:
    """Last resort if the test run dies without its fixtures' teardown: no orphan services."""
    for proc in _all_processes:
        if proc.alive:
            with contextlib.suppress(OSError):
                proc.popen.kill()


class ProcessFailedError(AssertionError):
    """A managed process exited or never became healthy; the message carries its log tail."""


class ManagedProcess:
    """One child process started by a :class:`ProcessGroup`."""

    def __init__(self, name: str, argv: list[str], log_path: Path, popen: subprocess.Popen[bytes],
                 log_file: IO[bytes]) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.popen = popen
        self._log_file = log_file

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def describe(self, lines: int = 80) -> str:
        state = "running" if self.alive else f"exited with {self.returncode}"
        return (f"process {self.name} (pid {self.pid}, {state})\n$ {' '.join(self.argv)}\n"
                f"log {self.log_path}, last {lines} lines:\n{self.log_tail(lines)}")

    def wait(self, timeout: float) -> int:
        """Wait for exit; ProcessFailedError if still running after ``timeout`` seconds."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ProcessFailedError(f"still running after {timeout:g}s\n{self.describe()}") from None

    def send_signal(self, sig: int) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)

    def kill(self) -> int:
        """SIGKILL and reap: the process gets no chance to clean up."""
        self.send_signal(signal.SIGKILL)
        return self.popen.wait(10)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM; SIGKILL if it has not exited within ``timeout`` seconds. Returns the exit code."""
        if self.alive:
            self.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log_file.close()
        return self.popen.wait()

    def wait_healthy(self, address: str, service: str = "", timeout: float = 20.0,
                     tls: ClientTls | None = None) -> None:
        """Poll grpc.health.v1 Check at ``address`` (over TLS with ``tls``) until ``service`` is SERVING."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        with sync_channel(address, [], tls) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if not self.alive:
                    raise ProcessFailedError(f"exited before becoming healthy\n{self.describe()}")
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                    last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
                except grpc.RpcError as exc:
                    last = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
                if time.monotonic() >= deadline:
                    raise ProcessFailedError(
                        f"not healthy at {address} within {timeout:g}s (last: {last})\n{self.describe()}"
                    )
                time.sleep(0.05)

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait until ``text`` appears in the log; return the first line containing it."""
        def find() -> str:
            return next((line for line in self.log_text().splitlines() if text in line), "")

        try:
            return wait_until(find, timeout, message=f"{text!r} in the log of {self.name}")
        except TimeoutError as exc:
            raise ProcessFailedError(f"{exc}\n{self.describe()}") from None


class ProcessGroup:
    """Processes started for one test; :meth:`stop_all` ends them (the fixture calls it)."""

    def __init__(self, log_dir: Path, env: Mapping[str, str] | None = None, clean_env: bool = True) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[ManagedProcess] = []
        base = dict(os.environ)
        if clean_env:
            # A developer's POCKETMQ_* settings must not change what the test starts.
            base = {k: v for k, v in base.items()
                    if not k.startswith("POCKETMQ_") or k.startswith("POCKETMQ_LOG_")}
        base["PYTHONUNBUFFERED"] = "1"
        base.update(env or {})
        self.env = base

    def start(
        self,
        module: str,
        args: Iterable[str] = (),
        name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        """Start ``sys.executable -m module *args`` from the repository root."""
        base = name or module.rsplit(".", 1)[-1]
        name = base
        taken = {p.name for p in self.processes}
        n = 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        argv = [sys.executable, "-m", module, *args]
        log_path = self.log_dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed by ManagedProcess.terminate
        popen = subprocess.Popen(
            argv, cwd=ROOT, env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
        proc = ManagedProcess(name, argv, log_path, popen, log_file)
        self.processes.append(proc)
        _all_processes.append(proc)
        return proc

    def start_grpc(
        self,
        module: str,
        args: Iterable[str],
        address: str,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        service: str = "",
        timeout: float = 20.0,
        tls: ClientTls | None = None,
    ) -> ManagedProcess:
        """Start a gRPC service process and wait until ``address`` reports SERVING."""
        proc = self.start(module, args, name=name, env=env)
        proc.wait_healthy(address, service=service, timeout=timeout, tls=tls)
        return proc

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every running process (newest first), SIGKILL the ones that do not exit."""
        for proc in reversed(self.processes):
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in reversed(self.processes):
            proc.terminate(max(0.1, deadline - time.monotonic()))

    def report(self, lines: int = 200) -> list[tuple[str, str]]:
        """(title, text) per process, for a failed test's report."""
        return [(f"process log: {p.name}", p.describe(lines)) for p in self.processes]


_LOGS_KEY = pytest.StashKey[list[tuple[str, ProcessGroup]]]()


def attach_logs(node: pytest.Item, group: ProcessGroup, label: str = "") -> None:
    """Attach ``group``'s process logs (section titles prefixed with ``label``) to ``node``'s report
    if the test fails."""
    node.stash.setdefault(_LOGS_KEY, []).append((label, group))


def add_log_sections(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add the logs attached to ``item`` to its report, if the report is a failure."""
    if report.failed:
        for label, group in item.stash.get(_LOGS_KEY, []):
            for title, text in group.report():
                report.sections.append((f"{label}{title} ({report.when})", text))

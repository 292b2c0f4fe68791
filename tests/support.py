"""The helpers every test suite shares: free loopback ports, polling with a hard time limit, and
finding the Debian tools the tests run for real (``make setup`` installs them; a missing one is a
test failure naming the package, never a skip).

* :func:`free_port` / :func:`ports_free` - loopback ports nothing listens on.
* :func:`wait_until` / :func:`async_wait_until` - poll a predicate until it returns something
  truthy (and return that), ``TimeoutError`` naming what was awaited otherwise.
* :func:`metric_value` - one sample from a service's Prometheus endpoint.
* :func:`require_executable` - the path of a tool on ``PATH``, or a failure naming its package.
* :func:`now_ms` - wall-clock milliseconds, the unit of every timestamp on the wire.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import shutil
import socket
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from pocketmq.wire.auth import Credentials, Signer

#: The repository root (the working directory of every process the tests start).
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now. The port is released before returning, so
    another process may still take it; ports handed out before are never repeated."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def ports_free(ports: Iterable[int], *hosts: str, reuse: bool = False) -> bool:
    """Whether every one of ``ports`` can be bound on every one of ``hosts`` (default
    127.0.0.1) right now; ``reuse`` binds as the services do (SO_REUSEADDR: a port whose last
    connections linger in TIME_WAIT is free for them)."""
    for port in ports:
        for host in hosts or ("127.0.0.1",):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
                try:
                    s.bind((host, port))
                except OSError:
                    return False
    return True


def _timed_out(timeout: float, message: str, predicate: object,
               last_error: BaseException | None) -> TimeoutError:
    detail = f" (last error: {last_error!r})" if last_error else ""
    return TimeoutError(f"not true within {timeout:g}s: {message or predicate!r}{detail}")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    message: str = "",
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` until it returns something truthy and return that; raise TimeoutError
    after ``timeout`` seconds. Exceptions of the ``ignore`` types count as "not yet"."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message, predicate, last_error)
        time.sleep(interval)


#: The name the client and CLI suites use for :func:`wait_until`.
wait_for = wait_until


async def async_wait_until(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float,  # noqa: ASYNC109 - a polling deadline, not a cancellation scope
    message: str = "",
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`wait_until` for event-loop code; ``predicate`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
        except ignore as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message, predicate, last_error)
        await asyncio.sleep(interval)


def metric_value(port: int, name: str) -> float:
    """The value of the first sample of ``name`` on the Prometheus endpoint at 127.0.0.1:port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported on port {port}")


def require_executable(name: str, package: str) -> str:
    """The path of ``name`` on PATH; a test failure naming the Debian ``package`` otherwise."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: install the Debian package {package!r} "
                    f"(`make setup` does, through scripts/ensure-apt.sh)", pytrace=False)
    return path


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata",
                                                           "credentials", "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):  # type: ignore[misc]
    pass


class SyncSigner(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
                 grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Signs every call of a blocking channel with the headers the client's aio interceptors add
    (access control): ``grpc.intercept_channel(channel, SyncSigner(credentials))``."""

    def __init__(self, credentials: Credentials) -> None:
        self.signer = Signer(credentials)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or ()), *self.signer.metadata()]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            details.wait_for_ready, getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), requests)


def signed_channel(addr: str, credentials: Credentials | None) -> grpc.Channel:
    """A blocking channel to ``addr``, signing every call when ``credentials`` are given."""
    channel = grpc.insecure_channel(addr)
    return grpc.intercept_channel(channel, SyncSigner(credentials)) if credentials is not None else channel

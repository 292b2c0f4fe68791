"""A service whose port is taken says so in one line (``cannot listen on HOST:PORT: address
already in use``) and exits non-zero; the traceback appears only at DEBUG level."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ProcessGroup, free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def held() -> Iterator[socket.socket]:
    """A listening socket on a free loopback port, as another program would hold it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def _args(service: str, listener: str, port: int, tmp_path: Path) -> list[str]:
    if service == "services.namesrv":
        if listener == "console":
            return ["--listen", f"127.0.0.1:{free_port()}", "--metrics-port", "0",
                    "--console-port", str(port)]
        grpc_port, metrics_port = (port, 0) if listener == "gRPC" else (free_port(), port)
        return ["--listen", f"127.0.0.1:{grpc_port}", "--metrics-port", str(metrics_port)]
    grpc_port = port if listener == "gRPC" else free_port()
    ha_port = port if listener == "HA" else free_port()
    return ["--broker-role", "ASYNC_MASTER", "--namesrv-addr", "", "--listen-host", "127.0.0.1",
            "--broker-ip1", "127.0.0.1", "--listen-port", str(grpc_port), "--ha-listen-port", str(ha_port),
            "--metrics-port", "0", "--store-path-root-dir", str(tmp_path / "store")]


@pytest.mark.parametrize(("service", "listener", "level"), [
    ("services.namesrv", "gRPC", "INFO"),
    ("services.namesrv", "metrics", "DEBUG"),
    ("services.namesrv", "console", "INFO"),
    ("services.broker", "gRPC", "INFO"),
    ("services.broker", "HA", "INFO"),
])
def test_taken_port_is_one_clear_line(procs: ProcessGroup, held: socket.socket, tmp_path: Path,
                                      service: str, listener: str, level: str) -> None:
    port = held.getsockname()[1]
    proc = procs.start(service, _args(service, listener, port, tmp_path),
                       env={"POCKETMQ_LOG_LEVEL": level, "POCKETMQ_LOG_FORMAT": "logfmt"})
    code = proc.wait(timeout=30)
    log = proc.log_text()
    assert code != 0, proc.describe()
    errors = [line for line in log.splitlines() if "level=error" in line]
    assert len(errors) == 1, proc.describe()
    assert f'msg="cannot listen on 127.0.0.1:{port}: address already in use"' in errors[0]
    assert f"listener={listener}" in errors[0]
    assert "fatal error" not in log
    if level == "DEBUG":
        assert "exc=" in errors[0] and "Traceback" in errors[0]
    else:
        assert "Traceback" not in log and "exc=" not in log, proc.describe()

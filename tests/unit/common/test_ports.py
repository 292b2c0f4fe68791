"""services.common.ports: bind check, the reason text, and who holds a port (real sockets)."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from services.common.ports import ListenError, bind_error, join_host_port, port_holder, reason_of


def test_a_listening_port_is_busy_and_its_holder_is_this_process() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        exc = bind_error("127.0.0.1", port)
        assert exc is not None and exc.errno == errno.EADDRINUSE
        assert reason_of(exc) == "address already in use"
        holder = port_holder(port)  # Linux /proc, which is where the tests run
        assert holder is not None and holder.pid == os.getpid()
        assert str(holder).startswith(f"pid {os.getpid()} (") and "\n" not in str(holder)
    assert bind_error("127.0.0.1", port) is None
    assert port_holder(port) is None


def test_an_address_not_on_this_host_has_its_own_reason() -> None:
    exc = bind_error("192.0.2.1", 0)  # TEST-NET-1: never a local address
    assert exc is not None
    assert reason_of(exc) == "address not available on this host"


@pytest.mark.parametrize(("host", "text"), [("127.0.0.1", "127.0.0.1:80"), ("::1", "[::1]:80")])
def test_listen_error_names_the_address(host: str, text: str) -> None:
    err = ListenError(join_host_port(host, 80), "permission denied", "gRPC")
    assert str(err) == f"cannot listen on {text}: permission denied"
    assert err.listener == "gRPC"

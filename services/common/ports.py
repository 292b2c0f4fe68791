"""Listening ports: the one error a service reports for a port it cannot bind, a free-port
check, and who holds a TCP port (Linux ``/proc``; ``None`` elsewhere or when not visible)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import socket
from pathlib import Path

_REASONS = {
    errno.EADDRINUSE: "address already in use",
    errno.EACCES: "permission denied",
    errno.EADDRNOTAVAIL: "address not available on this host",
}


class ListenError(RuntimeError):
    """A listener could not be opened: ``cannot listen on HOST:PORT: REASON``."""

    def __init__(self, address: str, reason: str, listener: str = "") -> None:
        super().__init__(f"cannot listen on {address}: {reason}")
        self.address = address
        self.reason = reason
        #: What the port was for (``gRPC``, ``HA``, ``metrics``).
        self.listener = listener


def reason_of(exc: OSError) -> str:
    """A short lower-case reason for a failed bind."""
    if exc.errno in _REASONS:
        return _REASONS[exc.errno]
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror})"
    return (exc.strerror or str(exc)).lower()


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_error(host: str, port: int) -> OSError | None:
    """Why binding ``host:port`` fails right now (with SO_REUSEADDR, as the services bind), or
    ``None`` when it would succeed. The test socket is closed at once."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return exc
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            return exc
    return None


@dataclasses.dataclass(frozen=True)
class PortHolder:
    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


_LISTEN = "0A"


def _socket_inodes(port: int) -> list[int]:
    """Inodes of the TCP sockets bound to ``port``, listening ones first."""
    listening: list[int] = []
    other: list[int] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            inode = int(fields[9])
            if inode:
                (listening if fields[3] == _LISTEN else other).append(inode)
    return listening + other


def port_holder(port: int) -> PortHolder | None:
    """The process holding a TCP socket bound to ``port``, if ``/proc`` shows it (Linux, and
    only processes whose file descriptors this user may read)."""
    inodes = _socket_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]": rank for rank, inode in enumerate(inodes)}
    best: tuple[int, int] | None = None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    rank = wanted.get(os.readlink(fd.path))
                    if rank is not None and (best is None or rank < best[0]):
                        best = (rank, int(entry.name))
        if best is not None and best[0] == 0:
            break
    if best is None:
        return None
    return PortHolder(best[1], _command(best[1]))


def _command(pid: int, limit: int = 60) -> str:
    """``argv[0]``'s base name and the arguments, shortened; the kernel's ``comm`` otherwise."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        text = " ".join([os.path.basename(argv[0].decode(errors="replace")),
                         *(a.decode(errors="replace") for a in argv[1:])])
        text = " ".join(text.split())  # one line, whatever the arguments hold
        if text:
            return text if len(text) <= limit else text[:limit - 3] + "..."
    except OSError:
        pass
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "?"

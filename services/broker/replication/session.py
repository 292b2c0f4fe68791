"""A slave session's state, why sessions end, and the socket helpers both receive paths use
(:mod:`.slave` runs the sessions)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass

__all__ = ["NO_CHALLENGE_HINT", "REJECTED", "AuthFailedError", "MasterAheadError", "OriginalMasterError",
           "SessionEndError", "SessionState", "StaleMasterError", "recv_exactly", "send_nowait"]


class SessionEndError(Exception):
    """Why a session ended (logged by the run loop)."""


class AuthFailedError(SessionEndError):
    """The authentication handshake failed (a configuration problem: logged at ERROR)."""


NO_CHALLENGE_HINT = "master does not authenticate; check haAuthSecret on both sides"
REJECTED = ("the master closed the connection right after the authentication answer: is haAuthSecret "
             "the same on the master and this slave?")


class OriginalMasterError(SessionEndError):
    """The master did not answer the hello: an original (RocketMQ or older PocketMQ) master."""


class StaleMasterError(SessionEndError):
    """The master's epoch is older than this slave's: never append from it."""


class MasterAheadError(SessionEndError):
    """The master's first word was a heartbeat below our max offset: our log is ahead."""

    def __init__(self, master_offset: int, slave_offset: int) -> None:
        super().__init__(f"the master's commit log ends at {master_offset}, before this slave's "
                         f"({slave_offset}): the slave's log diverged")
        self.master_offset = master_offset
        self.slave_offset = slave_offset


async def recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes, or None when the peer closed first."""
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


@dataclass
class SessionState:
    last_read: float
    last_ack: float = 0.0
    received: int = 0
    #: The handshake was answered (a close before any byte then means a rejected answer).
    authenticated: bool = False
    anything_read: bool = False


async def send_nowait(loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes) -> None:
    """``sock.sendall(data)`` for a blocking socket, on the event loop without blocking it
    (``MSG_DONTWAIT``; waits for the socket to be writable when the send buffer is full)."""
    view = memoryview(data)
    while view:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            view = view[sock.send(view, socket.MSG_DONTWAIT):]
        if view:
            writable = asyncio.Event()
            fd = sock.fileno()
            loop.add_writer(fd, writable.set)
            try:
                await writable.wait()
            finally:
                loop.remove_writer(fd)

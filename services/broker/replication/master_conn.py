"""One slave on a master's HA port (:class:`SlaveConnection`): the optional haAuthSecret
challenge, the hello (identity and epochs), a reader for the slave's acks (through
:class:`~services.broker.replication.protocol.MasterConnectionProtocol`) and a writer that streams
the commit log with zero-copy ``sendmsg`` rounds.  The port itself, the table of connections and
the SYNC_MASTER waits are :mod:`services.broker.replication.master`'s.  Design and error handling:
``docs/replication.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import Final, Protocol

from services.broker.replication.auth import MasterAuthenticator
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.errors import (
    AuthenticationError,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
)
from services.broker.replication.framing import AUTH_MAC_SIZE, encode_heartbeat, encode_transfer_header
from services.broker.replication.hello import (
    HELLO_HEAD_SIZE,
    MasterHello,
    SlaveHello,
    decode_hello_head,
    decode_slave_hello,
    encode_master_hello,
)
from services.broker.replication.master_settings import MasterSettings, SlaveInfo
from services.broker.replication.protocol import MasterConnectionProtocol
from services.broker.storage.segment import SegmentSlice
from services.broker.storage.store import MessageStore

__all__ = ["ROUND_MAX_BYTES", "ROUND_MAX_FRAMES", "ConnectionOwner", "SlaveConnection"]

log = logging.getLogger(__name__)

#: Bytes of commit log one writer round hands to ``sendmsg`` at most (then it waits until the
#: kernel took them all before planning more).
ROUND_MAX_BYTES: Final = 4 * 1024 * 1024
#: Frames per round at most (two iovecs each; Linux allows 1024 per call).
ROUND_MAX_FRAMES: Final = 256
_RECV_SIZE: Final = 64 * 1024


class ConnectionOwner(Protocol):
    """What a connection uses of the HA port that accepted it
    (:class:`~services.broker.replication.master.HAMaster`)."""

    settings: MasterSettings
    store: MessageStore
    loop: asyncio.AbstractEventLoop
    epochs: EpochFile | None
    #: Connections whose writer sleeps until the log grows.
    idle: set[SlaveConnection]

    def identified(self, conn: SlaveConnection) -> None: ...
    def note_newer_epoch(self, epoch: int) -> None: ...
    def on_ack(self, slave: str, offset: int, master_max_offset: int) -> None: ...
    def note_progress(self, max_offset: int) -> None: ...


class SlaveConnection:
    """One slave on the HA port (see the module doc)."""

    def __init__(self, master: ConnectionOwner, sock: socket.socket, peer: str) -> None:
        self.master = master
        self.sock = sock
        self.peer = peer
        self.proto = MasterConnectionProtocol(
            batch_size=master.settings.batch_size, segment_size=master.settings.segment_size,
            sync_from_earliest=master.settings.sync_from_earliest)
        loop = master.loop
        self.connected_since_ms = int(time.time() * 1000)
        self.transferred_bytes = 0
        self.last_ack_ms = 0
        self.last_read = loop.time()
        self.last_write = loop.time()
        self.wake = asyncio.Event()
        self.close_reason = ""
        self._loop = loop
        self._announced = False
        #: The slave's hello (None: an original slave, or not received yet).
        self.identity: SlaveHello | None = None
        #: Monotonic time of the last ack that reached the master's max offset (0: never).
        self.caught_up_at = 0.0

    def info(self) -> SlaveInfo:
        request = self.proto.request_offset
        ack = self.proto.ack_offset
        ident = self.identity
        return SlaveInfo(self.peer, request if request is not None else -1, ack if ack is not None else -1,
                         self.connected_since_ms, self.transferred_bytes, self.last_ack_ms,
                         ident.broker_id if ident is not None else -1,
                         ident.broker_addr if ident is not None else "",
                         ident.epoch if ident is not None else 0)

    def _log_extra(self) -> dict[str, object]:
        ident = self.identity
        if ident is None:
            return {"slave": self.peer}
        return {"slave": self.peer, "slave_broker_id": ident.broker_id,
                "slave_broker_addr": ident.broker_addr}

    # -- lifecycle ------------------------------------------------------------------------------

    async def authenticate(self, secret: bytes, nonce: bytes, timeout_s: float) -> bool:
        """The handshake (see the module doc): True once the peer answered the challenge
        correctly; otherwise logs a WARNING naming the peer and returns False (the caller
        closes).  Reads exactly the answer, so the request offset behind it stays in the socket
        for the read loop, and sends nothing but the challenge."""
        auth = MasterAuthenticator(secret, nonce)
        loop = self._loop
        view = memoryview(bytearray(AUTH_MAC_SIZE))
        try:
            async with asyncio.timeout(timeout_s):
                await loop.sock_sendall(self.sock, auth.challenge)
                while not auth.authenticated:
                    n = await loop.sock_recv_into(self.sock, view[:auth.remaining])
                    if n == 0:
                        raise auth.incomplete_error("the peer closed the connection")
                    auth.receive_data(view[:n])
        except TimeoutError:
            error: Exception = auth.incomplete_error(f"no answer within {timeout_s:g}s")
        except AuthenticationError as exc:
            error = exc
        except OSError as exc:
            error = exc
        else:
            self.connected_since_ms = int(time.time() * 1000)
            self.last_read = self.last_write = loop.time()  # housekeeping counts from here
            return True
        self.close_reason = f"authentication failed: {error}"
        log.warning("HA authentication failed; connection closed", extra={
            **self._log_extra(), "reason": str(error) or type(error).__name__})
        return False

    async def run(self) -> None:
        """Serve the connection until either task ends or nothing was read for
        ``haHousekeepingInterval`` (checked here, so a writer blocked on a peer that stopped
        reading cannot keep the connection, and its segment slices, forever)."""
        reader = asyncio.create_task(self._read_loop(), name=f"ha-read-{self.peer}")
        writer = asyncio.create_task(self._write_loop(), name=f"ha-write-{self.peer}")
        housekeeping_s = self.master.settings.housekeeping_interval_s
        loop = self._loop
        try:
            while True:
                remaining = self.last_read + housekeeping_s - loop.time()
                if remaining < 0:
                    self.close_reason = f"nothing read for {housekeeping_s:g}s (haHousekeepingInterval)"
                    log.warning("replication connection expired", extra={
                        **self._log_extra(), "silent_s": round(loop.time() - self.last_read, 3)})
                    break
                done, _ = await asyncio.wait({reader, writer}, timeout=remaining + 0.001,
                                             return_when=asyncio.FIRST_COMPLETED)
                if done:
                    for task in done:
                        exc = task.exception()
                        if exc is not None:
                            self._note_error(exc)
                    break
        finally:
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.sock.close()

    def _note_error(self, exc: BaseException) -> None:
        if isinstance(exc, ProtocolError):
            self.close_reason = f"protocol error: {exc}"
            if not isinstance(exc, (RequestBeyondMaxOffsetError, RequestOffsetUnavailableError)):
                log.warning("replication connection closed: protocol error", extra={
                    **self._log_extra(), "error": str(exc), "kind": type(exc).__name__})
        elif isinstance(exc, OSError):
            self.close_reason = f"socket error: {exc}"
        else:
            self.close_reason = f"internal error: {exc!r}"
            log.error("replication connection failed", extra={**self._log_extra(), "error": repr(exc)},
                      exc_info=exc)

    # -- reading acks ---------------------------------------------------------------------------

    async def _recv_at_least(self, data: bytearray, size: int) -> bool:
        """Read into ``data`` until it holds ``size`` bytes (it may get more); False when the peer
        closed first."""
        while len(data) < size:
            chunk = await self._loop.sock_recv(self.sock, _RECV_SIZE)
            if not chunk:
                return False
            data += chunk
            self.last_read = self._loop.time()
        return True

    async def _greet(self) -> bytes | None:
        """Read the slave's first 8 bytes: a hello (answered with the master's; returns what
        followed it) or an original slave's request offset (returns everything read, for the
        protocol).  None: the peer closed."""
        data = bytearray()
        if not await self._recv_at_least(data, HELLO_HEAD_SIZE):
            return None
        size = decode_hello_head(data[:HELLO_HEAD_SIZE])
        if size is None:
            return bytes(data)
        if not await self._recv_at_least(data, HELLO_HEAD_SIZE + size):
            return None
        body = data[HELLO_HEAD_SIZE:HELLO_HEAD_SIZE + size]
        rest = bytes(data[HELLO_HEAD_SIZE + size:])
        if len(rest) > _RECV_SIZE:
            raise ProtocolError("the slave sent more than one read's worth of bytes before the "
                                "master's hello")
        hello = decode_slave_hello(body)
        self.identity = hello
        master = self.master
        entries = master.epochs.entries if master.epochs is not None else ()
        my_epoch = entries[-1].epoch if entries else 0
        # (the answer goes out in every case: the slave decides, and refuses an older epoch)
        await self._loop.sock_sendall(self.sock, encode_master_hello(MasterHello(
            master.settings.broker_name, master.settings.broker_id, master.store.max_offset, entries)))
        if hello.epoch > my_epoch:
            log.error("a slave knows a newer epoch than this master: this master is stale and does not "
                      "serve it", extra={**self._log_extra(), "slave_epoch": hello.epoch, "epoch": my_epoch})
            master.note_newer_epoch(hello.epoch)
            raise ProtocolError(f"the slave knows epoch {hello.epoch}, newer than this master's {my_epoch}")
        master.identified(self)
        return rest

    async def _read_loop(self) -> None:
        loop = self._loop
        master = self.master
        store = master.store
        buf = bytearray(_RECV_SIZE)
        view = memoryview(buf)
        first = await self._greet()
        while True:
            if first is None:
                n = 0
            elif first:
                n = len(first)
                buf[:n] = first
                first = b""
            else:
                n = await loop.sock_recv_into(self.sock, buf)
            if n == 0:
                self.close_reason = self.close_reason or "closed by the slave"
                return
            self.last_read = loop.time()
            max_offset = store.max_offset
            try:
                events = self.proto.receive_data(view[:n], max_offset)
            except RequestBeyondMaxOffsetError as exc:
                log.warning("slave's commit log is ahead of the master's (diverged); telling it the "
                            "master's max offset and closing", extra={
                                **self._log_extra(), "request_offset": exc.ack_offset,
                                "master_max_offset": exc.master_max_offset})
                self._send_final_heartbeat(exc.master_max_offset)
                raise
            if not events:
                continue
            offset = events[-1].offset
            if not self._announced:
                self._announced = True
                log.info("slave connected", extra={**self._log_extra(), "request_offset": events[0].offset,
                                                  "master_max_offset": max_offset})
                self.wake.set()
            self.last_ack_ms = int(time.time() * 1000)
            if offset >= max_offset:
                self.caught_up_at = loop.time()
            master.on_ack(self.peer, offset, max_offset)

    def _send_final_heartbeat(self, offset: int) -> None:
        """Best effort: one heartbeat telling the slave where the master's log is, then the
        connection closes (nothing else was written on it yet)."""
        with contextlib.suppress(OSError):
            self.sock.send(encode_heartbeat(offset))

    # -- writing the commit log -----------------------------------------------------------------

    async def _write_loop(self) -> None:
        master = self.master
        settings = master.settings
        loop = self._loop
        store = master.store
        proto = self.proto
        heartbeat_s = settings.heartbeat_interval_s
        while True:
            sent = 0
            if proto.request_offset is not None:
                try:
                    sent = await self._send_round(store)
                except RequestOffsetUnavailableError as exc:
                    log.warning("slave asked for data the master no longer retains; the slave must be "
                                "rebuilt", extra={**self._log_extra(), "request_offset": exc.request_offset,
                                                  "master_min_offset": exc.min_offset})
                    self._send_final_heartbeat(exc.min_offset)
                    raise
            if sent:
                continue
            now = loop.time()
            if proto.request_offset is not None and now - self.last_write >= heartbeat_s:
                frame = proto.heartbeat_frame()
                if frame is not None:
                    await self._send_vectors([frame])
                    self.last_write = loop.time()
                    continue
            deadline = self.last_write + heartbeat_s
            # Register as idle before the last look at the log: an append from another thread
            # either is visible here or finds us in ``idle`` and wakes us.
            master.idle.add(self)
            self.wake.clear()
            next_offset = proto.next_transfer_offset
            if next_offset is not None and store.max_offset > next_offset:
                master.idle.discard(self)
                continue  # appended while we were sending
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, deadline - loop.time()) + 0.001):
                        await self.wake.wait()
            finally:
                master.idle.discard(self)

    async def _send_round(self, store: MessageStore) -> int:
        """Plan and send every frame available now (up to the round limits); returns the body
        bytes sent."""
        proto = self.proto
        max_offset = store.max_offset
        min_offset = store.min_offset
        vectors: list[bytes | memoryview] = []
        slices: list[SegmentSlice] = []
        total = 0
        try:
            while len(slices) < ROUND_MAX_FRAMES and total < ROUND_MAX_BYTES:
                plan = proto.next_transfer(max_offset, min_offset)
                if plan is None:
                    break
                data = store.get_data(plan.offset, plan.size)
                if data is None:
                    raise RequestOffsetUnavailableError(plan.offset, store.min_offset)
                slices.append(data)
                size = data.size
                proto.advance(size)  # before the write: an ack may come back at once
                vectors.append(encode_transfer_header(plan.offset, size))
                vectors.append(data.data)
                total += size
            if not vectors:
                return 0
            await self._send_vectors(vectors, frames=True)
        finally:
            vectors.clear()  # drop every view of the segments before releasing them
            for data in slices:
                data.release()
        self.last_write = self._loop.time()
        self.master.note_progress(max_offset)
        return total

    async def _send_vectors(self, vectors: list[bytes | memoryview], frames: bool = False) -> None:
        """Hand every buffer to the kernel (``sendmsg``), waiting for writability as needed;
        ``frames``: the vectors are header, body, header, body, ...: each body counts in
        :attr:`transferred_bytes` once the kernel has taken it (a catch-up round of 1 MiB frames
        may be more than the socket buffers hold)."""
        sock = self.sock
        loop = self._loop
        start = 0
        count = len(vectors)
        bodies = vectors[1::2] if frames else []
        while True:
            try:
                sent = sock.sendmsg(vectors[start:start + 2 * ROUND_MAX_FRAMES + 2])
            except (BlockingIOError, InterruptedError):
                sent = 0
            while sent:
                head = vectors[start]
                size = len(head)
                if sent >= size:
                    sent -= size
                    if frames and start % 2:
                        self.transferred_bytes += len(bodies[start // 2])
                    start += 1
                else:
                    vectors[start] = memoryview(head)[sent:]
                    sent = 0
            if start >= count:
                return
            await _writable(loop, sock)


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)

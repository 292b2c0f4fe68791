"""Master side of commit-log replication: the HA port, one connection per slave.

:class:`HAMaster` accepts slaves on ``haListenPort``; each :class:`SlaveConnection` runs a reader
(the slave's acks, through :class:`~services.broker.replication.protocol.MasterConnectionProtocol`,
into the shared :class:`~services.broker.replication.waiter.SlaveAckTracker`) and a writer that
streams the commit log with zero-copy ``sendmsg`` rounds.  With ``haAuthSecret`` every connection
is challenged first.  Design, error handling and threat model: ``docs/replication.md`` and
``docs/ha-authentication.md``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from services.broker.config import BrokerConfig
from services.broker.replication.auth import MasterAuthenticator, handshake_timeout_s
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.errors import (
    AuthenticationError,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
)
from services.broker.replication.framing import (
    AUTH_MAC_SIZE,
    AUTH_NONCE_SIZE,
    encode_heartbeat,
    encode_transfer_header,
)
from services.broker.replication.hello import (
    HELLO_HEAD_SIZE,
    MasterHello,
    SlaveHello,
    decode_hello_head,
    decode_slave_hello,
    encode_master_hello,
)
from services.broker.replication.protocol import MasterConnectionProtocol
from services.broker.replication.tls import HaTls, accept_tls, ha_tls
from services.broker.replication.waiter import ReplicationWaiter, SlaveAckTracker, WaiterClosedError
from services.broker.storage.config import StoreConfig
from services.broker.storage.segment import SegmentSlice
from services.broker.storage.status import PutMessageStatus
from services.broker.storage.store import MessageStore
from services.common.ports import ListenError, join_host_port, reason_of

__all__ = ["MAX_CONNECTIONS", "ROUND_MAX_BYTES", "HAMaster", "MasterSettings", "SlaveConnection", "SlaveInfo"]

log = logging.getLogger(__name__)

#: Bytes of commit log one writer round hands to ``sendmsg`` at most (then it waits until the
#: kernel took them all before planning more).
ROUND_MAX_BYTES: Final = 4 * 1024 * 1024
#: Frames per round at most (two iovecs each; Linux allows 1024 per call).
ROUND_MAX_FRAMES: Final = 256
#: Simultaneous HA connections served; more are refused (closed at once).
MAX_CONNECTIONS: Final = 64
_RECV_SIZE: Final = 64 * 1024
#: Progress history used for the lag in seconds: one point per millisecond at most.
_HISTORY_RESOLUTION_S: Final = 0.001
_HISTORY_MAX: Final = 65_536


#: The built-in configuration: the one owner of every default below.
_BROKER: Final = BrokerConfig()
_STORE: Final = StoreConfig()


@dataclass(frozen=True)
class MasterSettings:
    """What :class:`HAMaster` needs from the broker's configuration (:meth:`from_config`); the
    defaults are those of the built-in :class:`~services.broker.config.BrokerConfig` and
    :class:`~services.broker.storage.config.StoreConfig`."""

    host: str = _BROKER.listen_host
    port: int = _BROKER.effective_ha_port
    batch_size: int = _BROKER.ha_transfer_batch_size
    segment_size: int = _STORE.mapped_file_size_commit_log
    sync_from_earliest: bool = _BROKER.ha_sync_from_earliest
    heartbeat_interval_s: float = _BROKER.ha_send_heartbeat_interval / 1000
    housekeeping_interval_s: float = _BROKER.ha_housekeeping_interval / 1000
    fall_behind_max: int = _BROKER.ha_slave_fallbehind_max
    #: haAuthSecret (UTF-8); empty = no authentication.  Never shown by repr().
    auth_secret: bytes = dataclasses.field(default=_BROKER.ha_auth_secret.encode(), repr=False)
    #: How long a peer has to answer the challenge.
    auth_timeout_s: float = handshake_timeout_s(_BROKER.ha_housekeeping_interval / 1000)
    #: brokerName and brokerId this master gives in its hello.
    broker_name: str = _BROKER.broker_name
    broker_id: int = 0
    #: haTlsEnable: TLS with a client certificate of the CA required (None = plaintext).
    tls: HaTls | None = None

    @classmethod
    def from_config(cls, cfg: BrokerConfig, store: StoreConfig) -> MasterSettings:
        housekeeping_s = cfg.ha_housekeeping_interval / 1000
        return cls(host=cfg.listen_host, port=cfg.effective_ha_port, batch_size=cfg.ha_transfer_batch_size,
                   segment_size=store.mapped_file_size_commit_log,
                   sync_from_earliest=cfg.ha_sync_from_earliest,
                   heartbeat_interval_s=cfg.ha_send_heartbeat_interval / 1000,
                   housekeeping_interval_s=housekeeping_s, fall_behind_max=cfg.ha_slave_fallbehind_max,
                   auth_secret=cfg.ha_auth_secret.encode(),
                   auth_timeout_s=handshake_timeout_s(housekeeping_s), broker_name=cfg.broker_name,
                   broker_id=cfg.broker_id, tls=ha_tls(cfg))


@dataclass(frozen=True)
class SlaveInfo:
    """A snapshot of one connection, for status replies and metrics."""

    slave: str
    request_offset: int
    ack_offset: int
    connected_since_ms: int
    transferred_bytes: int
    last_ack_ms: int
    #: From the slave's hello: its brokerId (-1: an original slave that sent none), gRPC address
    #: and newest epoch.
    broker_id: int = -1
    broker_addr: str = ""
    epoch: int = 0

    @property
    def label(self) -> str:
        """The slave's name in metrics and status: its brokerId, or its connection address for
        a slave that did not say who it is."""
        return str(self.broker_id) if self.broker_id >= 0 else self.slave


class _ProgressHistory:
    """When the master's log reached which offset (for the lag in seconds): points (offset,
    wall-clock seconds), at most one per :data:`_HISTORY_RESOLUTION_S`, bounded."""

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._times: list[float] = []

    def note(self, offset: int, now: float) -> None:
        offsets = self._offsets
        if offsets and offset <= offsets[-1]:
            return
        if offsets and now - self._times[-1] < _HISTORY_RESOLUTION_S:
            offsets[-1] = offset  # the same millisecond: the bytes look at most 1 ms older
            return
        offsets.append(offset)
        self._times.append(now)
        if len(offsets) > 2 * _HISTORY_MAX:
            del offsets[:_HISTORY_MAX]
            del self._times[:_HISTORY_MAX]

    def arrival_time(self, offset: int) -> float | None:
        """The time by which the byte at ``offset`` had been written (None if unknown)."""
        i = bisect.bisect_right(self._offsets, offset)
        if i >= len(self._offsets):
            return None
        return self._times[i]

    @property
    def floor(self) -> int:
        """The lowest offset the history knows (0 when empty)."""
        return self._offsets[0] if self._offsets else 0


class SlaveConnection:
    """One slave on the HA port (see the module doc)."""

    def __init__(self, master: HAMaster, sock: socket.socket, peer: str) -> None:
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
            await self._send_vectors(vectors)
        finally:
            vectors.clear()  # drop every view of the segments before releasing them
            for data in slices:
                data.release()
        self.transferred_bytes += total
        self.last_write = self._loop.time()
        self.master.note_progress(max_offset)
        return total

    async def _send_vectors(self, vectors: list[bytes | memoryview]) -> None:
        """Hand every buffer to the kernel (``sendmsg``), waiting for writability as needed."""
        sock = self.sock
        loop = self._loop
        start = 0
        count = len(vectors)
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


class HAMaster:
    """The HA port of a master (see the module doc)."""

    def __init__(self, store: MessageStore, settings: MasterSettings, *,
                 on_connections_changed: Callable[[], None] | None = None,
                 epochs: EpochFile | None = None) -> None:
        self.store = store
        self.settings = settings
        #: The store's epoch list, given to every slave in the hello (None: no epochs).
        self.epochs = epochs
        #: The newest epoch a slave reported beyond this master's own (0: none): this master is
        #: stale (a newer master exists).
        self.newer_epoch_seen = 0
        #: brokerIds whose acks count for SYNC_MASTER (the SyncStateSet); None: every slave's.
        self.counted: frozenset[int] | None = None
        self.tracker = SlaveAckTracker()
        self.waiter: ReplicationWaiter
        self.loop: asyncio.AbstractEventLoop
        self.idle: set[SlaveConnection] = set()
        self.connections: dict[str, SlaveConnection] = {}
        self.history = _ProgressHistory()
        self._on_connections_changed = on_connections_changed
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._loop_thread = 0
        self._stopping = False
        self._handshakes = 0
        #: Connections closed because the peer failed the haAuthSecret challenge.
        self.auth_failures = 0
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiter = ReplicationWaiter(loop=self.loop)
        self._loop_thread = threading.get_ident()
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
            sock.listen(64)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ListenError(join_host_port(self.settings.host, self.settings.port),
                              reason_of(exc), "HA") from exc
        self._listener = sock
        self.port = sock.getsockname()[1]
        self.store.add_append_listener(self._on_append)
        self._accept_task = asyncio.create_task(self._accept_loop(), name="ha-accept")
        log.info("HA port listening", extra={"host": self.settings.host, "port": self.port,
                                             "authentication": bool(self.settings.auth_secret),
                                             "tls": self.settings.tls is not None})

    async def stop(self) -> None:
        self._stopping = True
        self.store.remove_append_listener(self._on_append)
        if self._accept_task is not None:
            self._accept_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accept_task
        if self._listener is not None:
            self._listener.close()
        for task in list(self._conn_tasks):
            task.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if hasattr(self, "waiter"):
            self.waiter.close("the broker is stopping")

    async def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, addr = await self.loop.sock_accept(self._listener)
            except OSError as exc:
                log.warning("HA accept failed", extra={"error": str(exc)})
                await asyncio.sleep(0.1)
                continue
            peer = _format_addr(addr)
            if len(self.connections) + self._handshakes >= MAX_CONNECTIONS or self._stopping:
                log.warning("HA connection refused: too many connections", extra={
                    "slave": peer, "limit": MAX_CONNECTIONS})
                sock.close()
                continue
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._serve_socket(sock, peer), name=f"ha-conn-{peer}")
            self._conn_tasks.add(task)
            task.add_done_callback(self._conn_tasks.discard)

    async def _serve_socket(self, sock: socket.socket, peer: str) -> None:
        tls = self.settings.tls
        if tls is not None:
            self._handshakes += 1
            try:
                sock = await accept_tls(sock, tls, self.settings.auth_timeout_s)
            except (OSError, TimeoutError) as exc:
                self.auth_failures += 1
                sock.close()
                log.warning("HA TLS handshake failed",
                            extra={"slave": peer, "error": str(exc) or type(exc).__name__})
                return
            finally:
                self._handshakes -= 1
        await self._serve(SlaveConnection(self, sock, peer))

    async def _serve(self, conn: SlaveConnection) -> None:
        secret = self.settings.auth_secret
        if secret:
            self._handshakes += 1
            authenticated = False
            try:
                authenticated = await conn.authenticate(
                    secret, secrets.token_bytes(AUTH_NONCE_SIZE), self.settings.auth_timeout_s)
                if not authenticated:
                    self.auth_failures += 1  # counted before the peer can see the close
            finally:
                self._handshakes -= 1
                if not authenticated:
                    conn.sock.close()
            if not authenticated:
                return
        self.connections[conn.peer] = conn
        log.info("HA connection accepted", extra={"slave": conn.peer, "authenticated": bool(secret)})
        self._changed()
        try:
            await conn.run()
        finally:
            self.connections.pop(conn.peer, None)
            self.tracker.remove(conn.peer)
            self.idle.discard(conn)
            self._changed()
            log.info("slave disconnected", extra={
                **conn._log_extra(), "reason": conn.close_reason or "master stopping",
                "ack_offset": conn.proto.ack_offset if conn.proto.ack_offset is not None else -1,
                "transferred_bytes": conn.transferred_bytes})

    def _changed(self) -> None:
        if self._on_connections_changed is not None:
            self._on_connections_changed()

    def identified(self, conn: SlaveConnection) -> None:
        """``conn``'s slave said who it is: an older connection of the same broker is a leftover
        of a reconnect (its peer went away unseen) and is closed now."""
        ident = conn.identity
        assert ident is not None
        for other in list(self.connections.values()):
            same = other.identity is not None and (other.identity.broker_id, other.identity.broker_name) \
                == (ident.broker_id, ident.broker_name)
            if other is not conn and same:
                log.info("slave reconnected; closing its previous connection", extra={
                    "slave": other.peer, "slave_broker_id": ident.broker_id, "new_connection": conn.peer})
                other.close_reason = "replaced by a new connection of the same slave"
                with contextlib.suppress(OSError):
                    other.sock.shutdown(socket.SHUT_RDWR)

    def note_newer_epoch(self, epoch: int) -> None:
        self.newer_epoch_seen = max(self.newer_epoch_seen, epoch)

    # -- events ---------------------------------------------------------------------------------

    def _on_append(self, _max_offset: int) -> None:
        """Store append listener (hot path): wake the writers that sleep, from any thread."""
        if self.idle:
            if threading.get_ident() == self._loop_thread:
                self._wake_idle()
            else:
                self.loop.call_soon_threadsafe(self._wake_idle)

    def _wake_idle(self) -> None:
        for conn in self.idle:
            conn.wake.set()

    def on_ack(self, slave: str, offset: int, master_max_offset: int) -> None:
        if self.tracker.update(slave, offset, master_max_offset) and self.counted is None:
            self.waiter.on_ack(self.tracker.push2slave_max_offset)
        elif self.counted is not None:
            self.waiter.on_ack(self.counted_ack())

    def counted_ack(self) -> int:
        """The highest offset acknowledged by a slave whose acks count (see :attr:`counted`)."""
        if self.counted is None:
            return self.tracker.push2slave_max_offset
        best = 0
        for conn in self.connections.values():
            ident = conn.identity
            ack = conn.proto.ack_offset
            if ident is not None and ack is not None and ident.broker_id in self.counted:
                best = max(best, ack)
        return best

    def set_counted(self, broker_ids: frozenset[int] | None) -> None:
        """Only acks of these brokerIds count for SYNC_MASTER from now on (None: every slave)."""
        self.counted = broker_ids
        if hasattr(self, "waiter"):
            self.waiter.on_ack(self.counted_ack())

    def in_sync(self, within_s: float) -> list[SlaveInfo]:
        """Identified slaves whose ack reached the master's max offset within ``within_s``."""
        now = self.loop.time()
        return [conn.info() for conn in self.connections.values()
                if conn.identity is not None and conn.caught_up_at and now - conn.caught_up_at <= within_s]

    def note_progress(self, max_offset: int) -> None:
        self.history.note(max_offset, time.time())

    # -- SYNC_MASTER ----------------------------------------------------------------------------

    def slave_available(self, end_offset: int) -> bool:
        return self.tracker.slave_available(end_offset, self.settings.fall_behind_max)

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> PutMessageStatus:
        """PUT_OK once a slave acknowledged ``end_offset``; SLAVE_NOT_AVAILABLE if no connected
        slave is within ``haSlaveFallbehindMax`` of it; FLUSH_SLAVE_TIMEOUT after ``timeout_s``."""
        if end_offset <= self.counted_ack():
            return PutMessageStatus.PUT_OK
        if not self.slave_available(end_offset):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if self.counted is not None and not self.counted:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE  # no in-sync slave: nobody's ack counts
        try:
            ok = await self.waiter.wait(end_offset, timeout_s)
        except WaiterClosedError:
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    # -- status ---------------------------------------------------------------------------------

    def slaves(self) -> list[SlaveInfo]:
        return [conn.info() for conn in self.connections.values()]

    def lag_seconds(self, ack_offset: int, max_offset: int, now: float | None = None) -> float:
        """Age of the oldest byte the slave has not acknowledged (0 when caught up).

        From the progress history the writers keep (when the log reached which offset, 1 ms
        resolution); for an ack older than the history, the store timestamp of the record at the
        ack offset when it is a record boundary (else the oldest history point, a lower bound)."""
        if ack_offset >= max_offset:
            return 0.0
        now = time.time() if now is None else now
        self.history.note(max_offset, now)
        arrived = self.history.arrival_time(ack_offset)
        if arrived is None:
            return 0.0
        if ack_offset < self.history.floor:
            record = self.store.read_message(ack_offset)
            if record is not None and record.store_timestamp > 0:
                arrived = min(arrived, record.store_timestamp / 1000)
        return max(0.0, now - arrived)


def _format_addr(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)

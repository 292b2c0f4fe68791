"""Master side of commit-log replication: the HA port.

:class:`HAMaster` listens on ``haListenPort``, serves each slave through a
:class:`~services.broker.replication.master_conn.SlaveConnection`, keeps the table of connected
slaves (their acks in the shared :class:`~services.broker.replication.waiter.SlaveAckTracker`,
which of them count for SYNC_MASTER, the SyncStateSet candidates) and answers SYNC_MASTER waits
and status.  With ``haAuthSecret`` every connection is challenged first, with ``haTlsEnable`` it
is TLS.  Design, error handling and threat model: ``docs/replication.md`` and
``docs/ha-authentication.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Final

from services.broker.replication.epochfile import EpochFile
from services.broker.replication.framing import AUTH_NONCE_SIZE
from services.broker.replication.master_conn import SlaveConnection
from services.broker.replication.master_settings import MasterSettings, SlaveInfo
from services.broker.replication.progress import ProgressHistory
from services.broker.replication.tls import accept_tls
from services.broker.replication.waiter import ReplicationWaiter, SlaveAckTracker, WaiterClosedError
from services.broker.storage.status import PutMessageStatus
from services.broker.storage.store import MessageStore
from services.common.ports import ListenError, join_host_port, reason_of

__all__ = ["MAX_CONNECTIONS", "HAMaster"]

log = logging.getLogger(__name__)

#: Simultaneous HA connections served; more are refused (closed at once).
MAX_CONNECTIONS: Final = 64


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
        #: SYNC_MASTER writes waiting for their acks (bound to the event loop at start()).
        self.waiter = ReplicationWaiter()
        self.loop: asyncio.AbstractEventLoop
        self.idle: set[SlaveConnection] = set()
        self.connections: dict[str, SlaveConnection] = {}
        self.history = ProgressHistory()
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
        self.waiter.bind(self.loop)
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
        """The offset up to which the slaves whose acks count (see :attr:`counted`) hold the log:
        the highest of their acks, or with allAckInSyncStateSet the lowest (a counted slave
        that is not connected holds nothing)."""
        if self.counted is None:
            return self.tracker.push2slave_max_offset
        acks = dict.fromkeys(self.counted, 0)
        for conn in self.connections.values():
            ident = conn.identity
            ack = conn.proto.ack_offset
            if ident is not None and ack is not None and ident.broker_id in acks:
                acks[ident.broker_id] = max(acks[ident.broker_id], ack)
        if not acks:
            return 0
        return min(acks.values()) if self.settings.all_ack else max(acks.values())

    @property
    def acknowledged_offset(self) -> int:
        """The end of what a SYNC_MASTER may have acknowledged (PUT_OK) so far: a slave that
        joins the counted ones under allAckInSyncStateSet must hold the log up to here."""
        return max(self.waiter.acked_offset, self.counted_ack())

    def set_counted(self, broker_ids: frozenset[int] | None) -> None:
        """Only acks of these brokerIds count for SYNC_MASTER from now on (None: every slave)."""
        self.counted = broker_ids
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

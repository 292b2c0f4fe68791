"""Slave side of commit-log replication (RocketMQ's HAClient).

:class:`HASlave` keeps one connection to the master's HA port (from the NameServer, or
``haMasterAddress``), answers the ``haAuthSecret`` challenge if configured, appends what it
receives to the commit log with :meth:`MessageStore.append_data
<services.broker.storage.store.MessageStore.append_data>` and acks the new max offset.  It
reconnects with backoff and repairs a log that is ahead of the master's.  Design:
``docs/replication.md``; authentication: ``docs/ha-authentication.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Final

from services.broker.config import BrokerConfig
from services.broker.replication.auth import SlaveAuthenticator, handshake_timeout_s
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.epochs import last_common_offset
from services.broker.replication.errors import (
    AuthenticationError,
    ContinuityError,
    ProtocolError,
)
from services.broker.replication.framing import (
    DEFAULT_MAX_BODY_SIZE,
    HEADER,
    TRANSFER_HEADER_SIZE,
    encode_ack,
)
from services.broker.replication.hello import (
    MasterHello,
    SlaveHello,
    decode_master_hello,
    decode_reply_head,
    encode_slave_hello,
)
from services.broker.replication.protocol import SlaveConnectionProtocol
from services.broker.replication.receive import SessionReceive
from services.broker.replication.repair import DivergenceRepair, is_record_boundary
from services.broker.replication.session import (
    NO_CHALLENGE_HINT,
    REJECTED,
    AuthFailedError,
    MasterAheadError,
    OriginalMasterError,
    SessionEndError,
    SessionState,
    StaleMasterError,
    recv_exactly,
    send_nowait,
)
from services.broker.replication.tls import HaTls, connect_tls, ha_tls
from services.broker.storage.config import StoreConfig
from services.broker.storage.logerrors import CommitLogError
from services.broker.storage.store import MessageStore
from services.common.config import ConfigError, parse_address

__all__ = ["BACKOFF_MAX_S", "BACKOFF_MIN_S", "HASlave", "SlaveSettings", "is_record_boundary"]

log = logging.getLogger(__name__)

BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 5.0
CONNECT_TIMEOUT_S: Final = 3.0

#: The built-in configuration: the one owner of every default below.
_BROKER: Final = BrokerConfig()
_STORE: Final = StoreConfig()


def _max_body_size(cfg: BrokerConfig) -> int:
    # The decoder must understand this broker's own haTransferBatchSize, and at least the
    # protocol's default limit (the master's batch size may be larger than ours).
    return max(DEFAULT_MAX_BODY_SIZE, cfg.ha_transfer_batch_size)


@dataclass(frozen=True)
class SlaveSettings:
    """What :class:`HASlave` needs from the broker's configuration (:meth:`from_config`); the
    defaults are those of the built-in :class:`~services.broker.config.BrokerConfig` and
    :class:`~services.broker.storage.config.StoreConfig`."""

    master_address_override: str = _BROKER.ha_master_address
    heartbeat_interval_s: float = _BROKER.ha_send_heartbeat_interval / 1000
    housekeeping_interval_s: float = _BROKER.ha_housekeeping_interval / 1000
    segment_size: int = _STORE.mapped_file_size_commit_log
    #: Largest frame body accepted (the master's haTransferBatchSize must not exceed it).
    max_body_size: int = _max_body_size(_BROKER)
    #: Divergence repair drops at most this many bytes (haSlaveFallbehindMax).
    max_truncate: int = _BROKER.ha_slave_fallbehind_max
    #: Where divergence repair saves the bytes it drops ("" = do not save).
    diverged_dir: str = ""
    backoff_min_s: float = BACKOFF_MIN_S
    backoff_max_s: float = BACKOFF_MAX_S
    #: haAuthSecret (UTF-8); empty = no authentication.  Never shown by repr().
    auth_secret: bytes = dataclasses.field(default=_BROKER.ha_auth_secret.encode(), repr=False)
    #: How long to wait for the master's challenge (and its hello).
    auth_timeout_s: float = handshake_timeout_s(_BROKER.ha_housekeeping_interval / 1000)
    #: Who this slave is, said in its hello (brokerId -1: send no hello, as RocketMQ's slave).
    cluster: str = _BROKER.broker_cluster_name
    broker_name: str = _BROKER.broker_name
    broker_id: int = -1
    broker_addr: str = ""
    #: haTlsEnable: TLS, the master's certificate checked against the CA (None = plaintext).
    tls: HaTls | None = None
    #: Plaintext frames are read on a receive thread, catch-up bodies straight into the
    #: dispatch ring (:mod:`.direct`); False: on the event loop, as through the TLS relay.
    receive_thread: bool = True

    @classmethod
    def from_config(cls, cfg: BrokerConfig, store: StoreConfig) -> SlaveSettings:
        housekeeping_s = cfg.ha_housekeeping_interval / 1000
        return cls(master_address_override=cfg.ha_master_address,
                   heartbeat_interval_s=cfg.ha_send_heartbeat_interval / 1000,
                   housekeeping_interval_s=housekeeping_s, segment_size=store.mapped_file_size_commit_log,
                   max_body_size=_max_body_size(cfg), max_truncate=cfg.ha_slave_fallbehind_max,
                   diverged_dir=os.path.join(store.store_path_root_dir, "ha-diverged"),
                   auth_secret=cfg.ha_auth_secret.encode(),
                   auth_timeout_s=handshake_timeout_s(housekeeping_s), cluster=cfg.broker_cluster_name,
                   broker_name=cfg.broker_name, broker_id=cfg.broker_id, broker_addr=cfg.broker_addr,
                   tls=ha_tls(cfg))


class HASlave(SessionReceive):
    """Follows the master's commit log (see the module doc)."""

    def __init__(self, store: MessageStore, settings: SlaveSettings, *,
                 epochs: EpochFile | None = None) -> None:
        self.store = store
        self.settings = settings
        #: The store's epoch list (None: no hello, no epochs).
        self.epochs = epochs
        #: HA addresses of masters that did not answer the hello (replicated from without one).
        self._original_masters: set[str] = set()
        #: The master's hello on the current connection (None before, or from an original master).
        self.master_hello: MasterHello | None = None
        self.repairer = DivergenceRepair(store, max_truncate=settings.max_truncate,
                                         diverged_dir=settings.diverged_dir,
                                         segment_size=settings.segment_size,
                                         epochs=epochs)
        #: Why this slave refuses to replicate from its master ("" when it does not refuse).
        self.problem = ""
        self.master_addr = settings.master_address_override
        #: Connection attempts after the first (each reconnect after a failure or a close).
        self.reconnects = 0
        self.connected = False
        #: Wall-clock ms of the last data frame received (0 = never).
        self.last_data_ms = 0
        #: Wall-clock ms of the last bytes received, heartbeats included (0 = never).
        self.last_read_ms = 0
        self.received_bytes = 0
        self.repairs = 0
        self._addr_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: asyncio.Task[bool] | None = None
        self._session_addr = ""
        self._stopping = False
        self._ack_lock = asyncio.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha-client")
        if self.settings.master_address_override:
            log.info("replicating from the configured master", extra={
                "master_ha_addr": self.settings.master_address_override})

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def set_master(self, master_ha_addr: str) -> None:
        """The NameServer names (another) master; ignored when haMasterAddress is set."""
        if self.settings.master_address_override:
            if master_ha_addr and master_ha_addr != self.settings.master_address_override:
                log.info("NameServer names another master HA address; haMasterAddress wins", extra={
                    "namesrv_master_ha_addr": master_ha_addr,
                    "master_ha_addr": self.settings.master_address_override})
            return
        if not master_ha_addr or master_ha_addr == self.master_addr:
            return
        log.info("master HA address changed", extra={"master_ha_addr": master_ha_addr,
                                                     "previous": self.master_addr or "-"})
        self.master_addr = master_ha_addr
        self._addr_changed.set()
        if self._session is not None and self._session_addr != master_ha_addr:
            self._session.cancel()

    def retry_now(self) -> None:
        """A new master (a new epoch) at the same HA address: end the reconnect backoff now."""
        if self._session is None:
            self._addr_changed.set()

    @property
    def max_offset(self) -> int:
        return self.store.max_offset

    # -- run loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.settings.backoff_min_s
        attempts = 0
        while not self._stopping:
            addr = self.master_addr
            if not addr:
                self._addr_changed.clear()
                await self._addr_changed.wait()
                continue
            if attempts:
                self.reconnects += 1
            attempts += 1
            self._addr_changed.clear()
            healthy = False
            self._session_addr = addr
            self._session = asyncio.create_task(self._connect_and_follow(addr), name="ha-client-session")
            try:
                healthy = await self._session
            except asyncio.CancelledError:
                if self._stopping or (self._task is not None and self._task.cancelling()):
                    raise
                log.info("replication session closed: master address changed", extra={"master_ha_addr": addr})
                backoff = self.settings.backoff_min_s
                continue
            except MasterAheadError as exc:
                if await self._repair(exc):
                    backoff = self.settings.backoff_min_s
                    continue
            except OriginalMasterError as exc:
                log.warning("the master does not speak the identity handshake (an older broker); "
                            "replicating without identity and epochs", extra={
                                "master_ha_addr": addr, "reason": str(exc)})
                self._original_masters.add(addr)
                backoff = self.settings.backoff_min_s
                continue
            except StaleMasterError as exc:
                self.problem = f"refusing master {addr}: {exc}"
                log.error("NOT replicating from a master of an older epoch (a deposed master?)", extra={
                    "master_ha_addr": addr, "reason": str(exc)})
            except (AuthFailedError, AuthenticationError) as exc:
                log.error("replication authentication failed", extra={
                    "master_ha_addr": addr, "reason": str(exc), "retry_in_s": round(
                        min(backoff * 2, self.settings.backoff_max_s), 3)})
            except (SessionEndError, OSError, ProtocolError, CommitLogError) as exc:
                log.warning("replication session ended", extra={
                    "master_ha_addr": addr, "reason": str(exc) or type(exc).__name__,
                    "kind": type(exc).__name__, "max_offset": self.store.max_offset})
            except Exception as exc:
                log.error("replication session failed", extra={"master_ha_addr": addr, "error": repr(exc)},
                          exc_info=exc)
            finally:
                self._session = None
                self.connected = False
            backoff = (self.settings.backoff_min_s if healthy
                       else min(backoff * 2, self.settings.backoff_max_s))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._addr_changed.wait()  # a new master address skips the wait

    async def _connect_and_follow(self, addr: str) -> bool:
        """One session; returns True if data was received (the backoff resets), raises why it
        ended otherwise."""
        try:
            host, port = parse_address(addr, "master HA address", default_host="127.0.0.1")
        except ConfigError as exc:
            raise SessionEndError(str(exc)) from None
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, sockaddr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        tls_owns_socket = False
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await loop.sock_connect(sock, sockaddr)
            except TimeoutError:
                raise SessionEndError(f"connect to {addr} timed out after {CONNECT_TIMEOUT_S:g}s") from None
            if self.settings.tls is None:
                return await self._follow(sock, addr, direct=self.settings.receive_thread)
            try:
                stream = await connect_tls(sock, self.settings.tls, CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                why = str(exc) or type(exc).__name__
                raise SessionEndError(f"TLS handshake with {addr} failed: {why}") from None
            tls_owns_socket = True  # the TLS relay closes the TCP socket after the stream
            try:
                return await self._follow(stream, addr)
            finally:
                stream.close()
        finally:
            if not tls_owns_socket:
                sock.close()

    async def _follow(self, sock: socket.socket, addr: str, *, direct: bool = False) -> bool:
        """The handshakes, then the frames: in plaintext (``direct``) on a receive thread while
        catching up, on the event loop otherwise and through the TLS relay."""
        loop = asyncio.get_running_loop()
        store = self.store
        answer = await self._authenticate(sock, loop) if self.settings.auth_secret else b""
        authenticated = bool(answer)
        greeted = False
        self.master_hello = None
        if self.settings.broker_id >= 0 and self.epochs is not None and addr not in self._original_masters:
            await self._hello(sock, loop, answer)
            answer = b""  # (sent with the hello)
            greeted = True
        start_offset = store.max_offset
        proto = SlaveConnectionProtocol(start_offset, max_body_size=self.settings.max_body_size)
        # (after a hello the master has accepted the answer already: a close is no rejection)
        state = SessionState(loop.time(), authenticated=authenticated, anything_read=greeted)
        self.connected = True
        log.info("connected to master", extra={"master_ha_addr": addr, "request_offset": start_offset,
                                               "authenticated": authenticated})
        await self._send_ack(sock, start_offset, state, loop, prefix=answer)
        receiver = asyncio.create_task(self._receive_switching(sock, proto, state, loop) if direct
                                       else self._receive(sock, proto, state, loop))
        keeper = asyncio.create_task(self._keep_alive(sock, state, loop))
        try:
            done, _ = await asyncio.wait({receiver, keeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (receiver, keeper):
                task.cancel()
            for task in (receiver, keeper):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for task in done:
            exc = task.exception()
            if exc is not None:
                if state.received and not isinstance(exc, MasterAheadError):
                    log.warning("replication session ended", extra={
                        "master_ha_addr": addr, "reason": str(exc) or type(exc).__name__,
                        "kind": type(exc).__name__, "max_offset": store.max_offset,
                        "received_bytes": state.received})
                    return True
                raise exc
        return state.received > 0

    async def _authenticate(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> bytes:
        """Read the master's challenge and return the answer to send before the request offset;
        raises :class:`AuthFailedError` or :class:`AuthenticationError` (see the module doc)."""
        auth = SlaveAuthenticator(self.settings.auth_secret)
        timeout_s = self.settings.auth_timeout_s
        view = memoryview(bytearray(auth.remaining))
        answer: bytes | None = None
        try:
            async with asyncio.timeout(timeout_s):
                while answer is None:
                    # never more than the challenge: the master sends nothing else before the answer
                    n = await loop.sock_recv_into(sock, view[:auth.remaining])
                    if not n:
                        raise AuthFailedError(
                            f"the master closed the connection without sending an authentication "
                            f"challenge: {NO_CHALLENGE_HINT}")
                    answer = auth.receive_data(view[:n])
        except TimeoutError:
            raise AuthFailedError(f"no authentication challenge from the master within {timeout_s:g}s: "
                                   f"{NO_CHALLENGE_HINT}") from None
        return answer

    async def _hello(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, prefix: bytes) -> None:
        """Say who this slave is, read the master's epochs and max offset, and decide: go on, cut
        this log back to the last common point first (:class:`MasterAheadError`), or refuse a
        master of an older epoch (:class:`StaleMasterError`)."""
        settings = self.settings
        epochs = self.epochs
        assert epochs is not None
        hello = SlaveHello(settings.cluster, settings.broker_name, settings.broker_id, settings.broker_addr,
                           epochs.entries)
        await loop.sock_sendall(sock, prefix + encode_slave_hello(hello))
        timeout_s = settings.auth_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    head = await recv_exactly(loop, sock, TRANSFER_HEADER_SIZE)
                except ConnectionResetError:
                    if prefix:  # (closed with our answer and hello unread)
                        raise AuthFailedError(REJECTED) from None
                    raise
                if head is None:
                    if prefix:
                        raise AuthFailedError(REJECTED)
                    raise SessionEndError("the master closed the connection after the hello")
                offset, size = HEADER.unpack(head)
                body_size = decode_reply_head(offset, size)
                if body_size is None:
                    raise OriginalMasterError(f"its first frame is an ordinary frame at offset {offset}")
                body = await recv_exactly(loop, sock, body_size)
        except TimeoutError:
            raise SessionEndError(f"no hello from the master within {timeout_s:g}s") from None
        if body is None:
            raise SessionEndError("the master closed the connection during its hello")
        master = decode_master_hello(body)
        mine = epochs.entries
        my_epoch = epochs.epoch
        if master.epoch < my_epoch:
            raise StaleMasterError(f"the master's epoch {master.epoch} is older than this slave's "
                                    f"{my_epoch}")
        my_max = self.store.max_offset
        point = last_common_offset(mine, my_max, master.epochs, master.max_offset)
        if point is not None and point < my_max:
            log.warning("this slave's log goes beyond the last point it shares with the master's epochs",
                        extra={"last_common_offset": point, "slave_max_offset": my_max,
                               "slave_epoch": my_epoch, "master_epoch": master.epoch})
            raise MasterAheadError(point, my_max)
        self.master_hello = master
        self.problem = ""
        if master.epochs:
            await asyncio.to_thread(epochs.replace, master.epochs)

    async def _send_ack(self, sock: socket.socket, offset: int, state: SessionState,
                        loop: asyncio.AbstractEventLoop, prefix: bytes = b"") -> None:
        data = prefix + encode_ack(offset) if prefix else encode_ack(offset)
        async with self._ack_lock:  # heartbeats and acks never interleave on the wire
            # (without waiting also while the socket blocks: the receive thread reads it)
            await send_nowait(loop, sock, data)
        state.last_ack = loop.time()

    def _continuity_failed(self, exc: ContinuityError, state: SessionState) -> None:
        if exc.heartbeat and exc.received < exc.expected and not state.received:
            raise MasterAheadError(exc.received, exc.expected) from None
        log.warning("continuity error: the master's stream does not continue this slave's log",
                    extra={"expected": exc.expected, "received": exc.received, "heartbeat": exc.heartbeat})
        if exc.heartbeat and exc.received > exc.expected and not state.received:
            log.error("the master no longer retains this slave's next offset; the slave must be "
                      "rebuilt (empty its store and restart it)", extra={
                          "slave_max_offset": exc.expected, "master_min_offset": exc.received})

    def _count(self, size: int, state: SessionState) -> None:
        if size:
            state.received += size
            self.received_bytes += size
            self.last_data_ms = int(time.time() * 1000)

    async def _keep_alive(self, sock: socket.socket, state: SessionState,
                          loop: asyncio.AbstractEventLoop) -> None:
        heartbeat_s = self.settings.heartbeat_interval_s
        housekeeping_s = self.settings.housekeeping_interval_s
        while True:
            now = loop.time()
            if now - state.last_read > housekeeping_s:
                raise SessionEndError(f"nothing read from the master for {housekeeping_s:g}s "
                                       "(haHousekeepingInterval)")
            if now - state.last_ack >= heartbeat_s and not self._ack_lock.locked():
                # (an ack stuck on a master that stopped reading must not stop this loop)
                await self._send_ack(sock, self.store.max_offset, state, loop)
                continue
            due = min(state.last_ack + heartbeat_s, state.last_read + housekeeping_s)
            await asyncio.sleep(max(0.01, due - now))

    async def _repair(self, exc: MasterAheadError) -> bool:
        """Cut the log back to the master's point if that is safe (see :mod:`.repair`)."""
        ok = await self.repairer.repair(exc.master_offset)
        if ok:
            self.repairs += 1
        return ok

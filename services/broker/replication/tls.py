"""TLS of the HA stream (``haTlsEnable``): the master and its slaves prove to each other that
they hold a certificate signed by the cluster's CA, and the commit log travels encrypted.

The replication code reads and writes plain non-blocking sockets with the event loop's
``sock_*`` calls, which TLS sockets do not support. So a TLS connection is terminated here and
the decrypted stream is handed over as one end of a ``socketpair``: the handshake, framing and
flow control of the replication code stay exactly as they are over plaintext. The relay costs a
copy per chunk (``make bench-ha`` reports catch-up with and without TLS). See docs/tls.md."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.broker.config import BrokerConfig

log = logging.getLogger(__name__)

#: Bytes moved per relay read.
CHUNK = 1 << 20
_relays: set[asyncio.Task[None]] = set()


@dataclasses.dataclass(frozen=True)
class HaTls:
    """Certificate, key and CA of the HA stream. Peers are checked against the CA only (HA
    addresses are pod IPs no certificate names); the files are read again for each connection,
    so rotated ones apply to the next one."""

    cert_path: str
    key_path: str
    ca_path: str

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_path, self.key_path)
        ctx.load_verify_locations(self.ca_path)
        ctx.verify_mode = ssl.CERT_REQUIRED  # a slave must show a certificate of the CA
        return ctx

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(self.ca_path)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx


async def accept_tls(raw: socket.socket, tls: HaTls, timeout_s: float) -> socket.socket:
    """TLS handshake (server side) on an accepted connection; the returned socket carries the
    decrypted stream. Raises OSError (ssl.SSLError) or TimeoutError when the peer fails it."""
    return await _terminate(raw, tls.server_context(), True, timeout_s)


async def connect_tls(raw: socket.socket, tls: HaTls, timeout_s: float) -> socket.socket:
    """TLS handshake (client side) on a connected socket; see :func:`accept_tls`."""
    return await _terminate(raw, tls.client_context(), False, timeout_s)


async def _terminate(raw: socket.socket, ctx: ssl.SSLContext, server_side: bool,
                     timeout_s: float) -> socket.socket:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK)
    protocol = asyncio.StreamReaderProtocol(reader)
    if server_side:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock=raw, ssl=ctx, ssl_handshake_timeout=timeout_s)
    else:
        transport, _ = await loop.create_connection(
            lambda: protocol, sock=raw, ssl=ctx, server_hostname="", ssl_handshake_timeout=timeout_s)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    inner, outer = socket.socketpair()
    inner.setblocking(False)
    outer.setblocking(False)
    for s in (inner, outer):
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * CHUNK)
    task = asyncio.create_task(_relay(reader, writer, outer), name="ha-tls-relay")
    _relays.add(task)
    task.add_done_callback(_relays.discard)
    return inner


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, plain: socket.socket) -> None:
    loop = asyncio.get_running_loop()

    async def inbound() -> None:  # TLS -> replication code
        while data := await reader.read(CHUNK):
            await loop.sock_sendall(plain, data)
        with contextlib.suppress(OSError):
            plain.shutdown(socket.SHUT_WR)

    async def outbound() -> None:  # replication code -> TLS
        while data := await loop.sock_recv(plain, CHUNK):
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.create_task(inbound()), asyncio.create_task(outbound())]
    try:
        # Either side closing ends the connection (the replication code closes its end when a
        # session ends; the peer's close ends the replication session).
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        plain.close()
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


def ha_tls(cfg: BrokerConfig) -> HaTls | None:
    """The HA stream's TLS from the broker's keys (haTlsEnable and the tls* files)."""
    if not cfg.ha_tls_enable:
        return None
    cert, key = cfg.tls_client_cert_path, cfg.tls_client_key_path
    if not cert:
        cert, key = cfg.tls_server_cert_path, cfg.tls_server_key_path
    return HaTls(cert, key, cfg.tls_server_trust_cert_path or cfg.tls_client_trust_cert_path)

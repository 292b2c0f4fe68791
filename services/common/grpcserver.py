"""gRPC server plumbing shared by the NameServer and brokers: grpc.aio server with the
standard health service (grpc.health.v1) and server reflection, TLS, and graceful stop."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from pocketmq.wire.address import AddressError, parse_host_port
from services.common.ports import ListenError, bind_error, reason_of
from services.common.tls import ServerTls

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


class GrpcServer:
    """A started grpc.aio server plus its health servicer."""

    def __init__(self, server: grpc.aio.Server, health: HealthServicer, port: int, services: Sequence[str],
                 health_server: grpc.aio.Server | None = None):
        self.server = server
        self.health = health
        self.port = port
        self.services = list(services)
        #: The plaintext health-only listener (healthListenPort), if any.
        self.health_server = health_server

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING, stop accepting new RPCs, let in-flight ones finish within ``grace``."""
        for name in ["", *self.services]:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)
        if self.health_server is not None:
            await self.health_server.stop(0)


class _GenericHandlersOnly:
    """The server as service registration sees it: without "registered methods".

    The generated ``add_<Service>Servicer_to_server`` functions register every service twice: a
    generic handler (which serves each of its methods) and each method as a registered method.
    grpc.aio's accept loop keeps one pending call request per registered method and waits on all
    of them (``asyncio.wait``) for every call it accepts, so with a broker's ~65 methods each RPC
    pays a scan of ~65 futures (tens of microseconds, more than the rest of a small send). With the
    generic handlers alone there is one pending request, whatever the number of methods."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_registered_method_handlers(self, service_name: str, method_handlers: object) -> None:
        """Left out: the service's generic handler, added alongside, serves these methods."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def _bind(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None,
          what: str) -> int:
    """Add a listening port; :class:`ListenError` (naming the address and why) when it cannot be bound."""
    try:
        host, port_number = parse_host_port(address, default_host="", allow_port_zero=True)
    except AddressError:  # not ours to judge: gRPC reports what it cannot bind
        host, port_number = "", 0
    # gRPC's own bind error says neither why nor which port: find out first, with a plain socket.
    # Only a taken or forbidden port fails here; anything else gRPC may still handle (``[::]``
    # falls back to IPv4 where IPv6 is off), and its failure then carries what the socket met.
    failed = bind_error(host, port_number) if port_number > 0 else None
    if failed is not None and failed.errno in (errno.EADDRINUSE, errno.EACCES):
        raise ListenError(address, reason_of(failed), what) from failed
    reason = reason_of(failed) if failed is not None else "address in use or invalid"
    try:
        port: int = (server.add_insecure_port(address) if credentials is None
                else server.add_secure_port(address, credentials))
    except RuntimeError as exc:
        raise ListenError(address, reason, what) from exc
    if port == 0:
        raise ListenError(address, reason, what)
    return port


async def start_grpc_server(
    address: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    tls: ServerTls | None = None,
    tls_address: str | None = None,
    health_address: str | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> GrpcServer:
    """Create, register, bind and start a server. ``address`` is ``host:port`` (port 0 = any).
    With ``tls`` the port at ``address`` speaks TLS only, unless ``tls_address`` is given: then
    ``address`` stays plaintext and a second listener there serves the same services over TLS
    (tlsServerMode=permissive). Certificates are reloaded when their files change.
    ``health_address``: a plaintext listener serving grpc.health.v1 only (healthListenPort: for
    probes that cannot speak TLS, such as the kubelet's native gRPC probes). ``interceptors``
    (access control) see every call of the main and TLS listeners, not the health-only one.

    Raises :class:`ListenError` (naming the address and why) when a port cannot be bound.
    """
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=list(interceptors) or None)
    registering = cast(grpc.aio.Server, _GenericHandlersOnly(server))
    register(registering)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, registering)
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        registering,
    )
    main_tls = tls is not None and tls_address is None
    port = _bind(server, address, tls.grpc_credentials() if tls is not None and main_tls else None,
                 "gRPC TLS" if main_tls else "gRPC")
    if tls is not None and tls_address is not None:
        tls_port = _bind(server, tls_address, tls.grpc_credentials(), "gRPC TLS")
        log.info("grpc TLS listener", extra={"address": tls_address, "port": tls_port})
    health_server = None
    if health_address is not None:
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health, health_server)
        health_port = _bind(health_server, health_address, None, "gRPC health")
        log.info("grpc health-only listener", extra={"address": health_address, "port": health_port})
    await server.start()
    if health_server is not None:
        await health_server.start()
    for name in ["", *service_names]:
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("grpc server listening", extra={"address": address, "port": port, "tls": main_tls})
    return GrpcServer(server, health, port, service_names, health_server)

"""gRPC server plumbing shared by the NameServer and brokers: grpc.aio server with the
standard health service (grpc.health.v1) and server reflection, and graceful stop."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from pocketmq.wire.address import AddressError, parse_host_port
from services.common.ports import ListenError, bind_error, reason_of

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

    def __init__(self, server: grpc.aio.Server, health: HealthServicer, port: int, services: Sequence[str]):
        self.server = server
        self.health = health
        self.port = port
        self.services = list(services)

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING, stop accepting new RPCs, let in-flight ones finish within ``grace``."""
        for name in ["", *self.services]:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)


async def start_grpc_server(
    address: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    tls: tuple[str, bytes, bytes] | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> GrpcServer:
    """Create, register, bind and start a server. ``address`` is ``host:port`` (port 0 = any).
    ``tls``: (address, private key PEM, certificate chain PEM) of an extra TLS listener serving
    the same services.

    Raises :class:`ListenError` (naming the address and why) when the port cannot be bound.
    """
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=list(interceptors) or None)
    register(server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )
    try:
        host, port_number = parse_host_port(address, default_host="", allow_port_zero=True)
    except AddressError:  # not ours to judge: gRPC reports what it cannot bind
        host, port_number = "", 0
    # gRPC's own bind error says neither why nor which port: find out first, with a plain socket.
    # Only a taken or forbidden port fails here; anything else gRPC may still handle (``[::]``
    # falls back to IPv4 where IPv6 is off), and its failure then carries what the socket met.
    failed = bind_error(host, port_number) if port_number > 0 else None
    if failed is not None and failed.errno in (errno.EADDRINUSE, errno.EACCES):
        raise ListenError(address, reason_of(failed), "gRPC") from failed
    reason = reason_of(failed) if failed is not None else "address in use or invalid"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ListenError(address, reason, "gRPC") from exc
    if port == 0:
        raise ListenError(address, reason, "gRPC")
    if tls is not None:
        tls_address, key, chain = tls
        tls_host, _, tls_port_text = tls_address.rpartition(":")
        failed = bind_error(tls_host.strip("[]"), int(tls_port_text)) if tls_port_text.isdigit() else None
        tls_reason = reason_of(failed) if failed is not None else "address in use or invalid"
        credentials = grpc.ssl_server_credentials([(key, chain)])
        try:
            tls_port = server.add_secure_port(tls_address, credentials)
        except RuntimeError as exc:
            raise ListenError(tls_address, tls_reason, "gRPC TLS") from exc
        if tls_port == 0:
            raise ListenError(tls_address, tls_reason, "gRPC TLS")
        log.info("grpc TLS listener", extra={"address": tls_address, "port": tls_port})
    await server.start()
    for name in ["", *service_names]:
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("grpc server listening", extra={"address": address, "port": port})
    return GrpcServer(server, health, port, service_names)

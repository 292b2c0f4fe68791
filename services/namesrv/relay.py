"""The broker relay behind ``RelayBrokerCall``: forwards one unary broker API call, as opaque
bytes, to a broker registered in the route table and hands back the reply.

Operators in Kubernetes reach the cluster through one ``kubectl port-forward`` to a NameServer;
broker pod addresses are not reachable from their machine. The relay lets the CLI's admin calls
(status, HA status, topic admin on every master, consumer progress) travel through the
NameServer, which reaches every broker anyway.

Safety: only addresses of live brokers (the route table's ``broker_live_table``) and only unary
methods of the ``pocketmq.broker.v1`` services are relayed, so the relay is not a generic proxy.
Channels are kept per broker address and closed when the broker leaves the table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

import grpc

from pocketmq.broker.v1 import broker_pb2
from pocketmq.wire.tls import ClientTls, aio_channel
from services.common.errors import InvalidArgumentError, NotFoundError, ServiceError
from services.common.grpcserver import CHANNEL_OPTIONS

log = logging.getLogger(__name__)


def relayable_methods() -> frozenset[str]:
    """``/pocketmq.broker.v1.<Service>/<Method>`` of every unary broker API method."""
    return frozenset(
        f"/{service.full_name}/{method.name}"
        for service in broker_pb2.DESCRIPTOR.services_by_name.values()
        for method in service.methods
        if not method.client_streaming and not method.server_streaming
    )


class RelayedCallError(ServiceError):
    """The broker answered the relayed call with a non-OK status: passed back with its code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class BrokerRelay:
    """Forwards calls to registered brokers. ``live_addrs`` returns the current broker addresses
    (the route table's live table); it is consulted on every call."""

    def __init__(self, live_addrs: Callable[[], Iterable[str]], tls: ClientTls | None = None) -> None:
        """``tls``: the brokers' gRPC ports speak TLS (None = plaintext)."""
        self._live_addrs = live_addrs
        self._tls = tls
        self._methods = relayable_methods()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._callables: dict[tuple[str, str], grpc.aio.UnaryUnaryMultiCallable] = {}

    def _callable(self, addr: str, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
        key = (addr, method)
        call = self._callables.get(key)
        if call is None:
            channel = self._channels.get(addr)
            if channel is None:
                channel = self._channels[addr] = aio_channel(addr, CHANNEL_OPTIONS, self._tls)
            # No (de)serializers: the request and reply travel as the bytes they are.
            call = self._callables[key] = channel.unary_unary(method)
        return call

    async def _prune(self, live: set[str]) -> None:
        for addr in [a for a in self._channels if a not in live]:
            channel = self._channels.pop(addr)
            for key in [k for k in self._callables if k[0] == addr]:
                del self._callables[key]
            with contextlib.suppress(Exception):
                await channel.close(grace=None)

    async def call(self, broker_addr: str, method: str, request: bytes, timeout_s: float) -> bytes:
        """Forward one call. Raises NotFoundError (unknown broker), InvalidArgumentError (not a
        relayable method) or RelayedCallError (the broker's own status)."""
        if method not in self._methods:
            raise InvalidArgumentError(
                f"method {method!r} cannot be relayed (only unary pocketmq.broker.v1 methods, "
                "e.g. /pocketmq.broker.v1.Broker/GetBrokerStatus)")
        live = set(self._live_addrs())
        await self._prune(live)
        if broker_addr not in live:
            raise NotFoundError(f"broker {broker_addr!r} is not registered with this NameServer")
        try:
            reply: bytes = await self._callable(broker_addr, method)(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            details = exc.details() or exc.code().name
            raise RelayedCallError(exc.code(), f"broker {broker_addr}: {details}") from None
        return reply

    async def close(self) -> None:
        await self._prune(set())

"""gRPC plumbing of the client: channels pooled per address, NameServer calls with fail-over
between NameServers, broker calls made directly or relayed by a NameServer, errors mapped to
:mod:`pocketmq.errors`.

Everything here runs on one asyncio event loop (grpc.aio channels belong to the loop that
created them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.errors import (
    ClientClosedError,
    ConnectionFailedError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    PermissionDeniedError,
    RequestTimeoutError,
    RpcError,
    UnimplementedError,
    from_rpc_error,
)
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.address import DEFAULT_NAMESRV, AddressError, parse_address_list
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import signing_interceptors
from pocketmq.wire.protoscan import Span, split_field
from pocketmq.wire.tls import ClientTls, aio_channel

log = logging.getLogger("pocketmq.client")

M = TypeVar("M", bound=ProtoMessage)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    # Reconnect quickly when a broker comes back (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.min_reconnect_backoff_ms", 200),
]

BROKER_SERVICE = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
#: PullMessageResponse.records, read in place (see PullStream.read).
_RECORDS_FIELD = broker_pb2.PullMessageResponse.DESCRIPTOR.fields_by_name["records"].number
#: Unary methods of the broker API, ``"Method"`` (service Broker) or ``"Service/Method"``
#: (e.g. ``"BrokerMetadata/GetAllConsumerOffsets"``) -> method descriptor.
BROKER_UNARY_METHODS: dict[str, Any] = {
    (m.name if service.name == "Broker" else f"{service.name}/{m.name}"): m
    for service in broker_pb2.DESCRIPTOR.services_by_name.values()
    for m in service.methods
    if not m.client_streaming and not m.server_streaming
}

RelayMode = Literal["direct", "relay", "auto"]

#: ``mode="auto"``: how long a broker's direct channel may take to connect before its calls
#: stay relayed (see :class:`BrokerCaller`).
DIRECT_PROBE_S = 2.0


def parse_addresses(value: str | Iterable[str] | None, what: str = "namesrv") -> list[str]:
    """``"h1:9876;h2:9876"`` (also ``,``-separated) or a list -> ``["h1:9876", "h2:9876"]``."""
    if value is None:
        return [DEFAULT_NAMESRV]
    try:
        return parse_address_list(value, what)
    except AddressError as exc:
        raise InvalidArgumentError(str(exc)) from None


class ChannelPool:
    """One grpc.aio channel per address, created on first use, closed together."""

    def __init__(self, tls: ClientTls | None = None, credentials: Credentials | None = None) -> None:
        """``tls``: every channel speaks TLS (the cluster's gRPC ports are TLS only);
        ``credentials``: every call on the pool's channels is signed (access control)."""
        self.tls = tls
        self.credentials = credentials
        self._interceptors = signing_interceptors(credentials)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self._closed = False

    def channel(self, address: str) -> grpc.aio.Channel:
        if self._closed:
            raise ClientClosedError("client is closed")
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = aio_channel(
                address, CHANNEL_OPTIONS, self.tls, self._interceptors)
        return channel

    def broker_stub(self, address: str, service: str = "Broker") -> Any:
        """The generated stub of a pocketmq.broker.v1 service (Broker, BrokerMetadata) at ``address``."""
        key = (address, service)
        stub = self._stubs.get(key)
        if stub is None:
            stub = self._stubs[key] = getattr(broker_pb2_grpc, f"{service}Stub")(self.channel(address))
        return stub

    @property
    def closed(self) -> bool:
        return self._closed

    async def discard(self, address: str) -> None:
        """Close the channel to ``address`` (if any); the next use opens a new one."""
        channel = self._channels.pop(address, None)
        for key in [k for k in self._stubs if k[0] == address]:
            del self._stubs[key]
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close(grace=None)

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            with contextlib.suppress(Exception):
                await channel.close(grace=None)


async def unary(
    stub_method: Callable[..., Any], request: ProtoMessage, timeout: float, address: str, what: str  # noqa: ASYNC109
) -> Any:
    """Await one unary call, mapping gRPC failures to :class:`~pocketmq.errors.RpcError`."""
    try:
        return await stub_method(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc, address, what) from None
    except grpc.aio.UsageError as exc:  # the channel was closed under the call
        raise ClientClosedError(f"{what}: {exc}", address=address) from None


class NamesrvClient:
    """Calls to the NameServer(s): tries them in turn (starting at a random one) until one
    answers; a NameServer that cannot be reached is tried last next time."""

    def __init__(self, addresses: Sequence[str], pool: ChannelPool, timeout: float = 3.0) -> None:
        self.addresses = list(addresses)
        if not self.addresses:
            raise InvalidArgumentError("at least one NameServer address is required")
        self.pool = pool
        self.timeout = timeout
        self._first = random.randrange(len(self.addresses))
        self._stubs: dict[str, namesrv_pb2_grpc.NameServerStub] = {}

    def _stub(self, address: str) -> namesrv_pb2_grpc.NameServerStub:
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = namesrv_pb2_grpc.NameServerStub(self.pool.channel(address))
        return stub

    async def call(self, method: str, request: ProtoMessage, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Call ``method`` on the first NameServer that answers. Only connection failures and
        timeouts move on to the next one; any other error is the answer."""
        n = len(self.addresses)
        last: RpcError | None = None
        for i in range(n):
            index = (self._first + i) % n
            address = self.addresses[index]
            try:
                reply = await unary(getattr(self._stub(address), method), request,
                                    timeout or self.timeout, address, method)
            except (ConnectionFailedError, RequestTimeoutError) as exc:
                last = exc
                log.debug("namesrv call failed", extra={"namesrv": address, "method": method,
                                                        "error": str(exc)})
                continue
            self._first = index
            return reply
        assert last is not None
        if n > 1:
            raise type(last)(f"no NameServer answered ({', '.join(self.addresses)}): {last.message}",
                             address=last.address) from None
        raise last

    async def route(self, topic: str) -> namesrv_pb2.TopicRouteData:
        reply: namesrv_pb2.TopicRouteData = await self.call(
            "GetRouteInfoByTopic", namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic))
        return reply

    async def cluster_info(self) -> namesrv_pb2.ClusterInfo:
        reply: namesrv_pb2.ClusterInfo = await self.call(
            "GetBrokerClusterInfo", namesrv_pb2.GetBrokerClusterInfoRequest())
        return reply

    async def all_topics(self) -> list[str]:
        reply = await self.call("GetAllTopicList", namesrv_pb2.GetAllTopicListRequest())
        return list(reply.topics)

    async def topics_of_cluster(self, cluster: str) -> list[str]:
        reply = await self.call("GetTopicsByCluster", namesrv_pb2.GetTopicsByClusterRequest(cluster=cluster))
        return list(reply.topics)

    async def relay(self, broker_addr: str, method: str, request: bytes, timeout: float) -> bytes:  # noqa: ASYNC109
        """Have a NameServer forward one unary broker call (``method`` as in
        :data:`BROKER_UNARY_METHODS`) to ``broker_addr`` (a broker registered there) and return the
        serialized reply."""
        desc = BROKER_UNARY_METHODS[method]
        req = namesrv_pb2.RelayBrokerCallRequest(
            broker_addr=broker_addr, method=f"/{desc.containing_service.full_name}/{desc.name}",
            request=request, timeout_ms=max(1, int(timeout * 1000)))
        reply = await self.call("RelayBrokerCall", req, timeout=timeout + 1.0)
        return bytes(reply.response)


class BrokerCaller:
    """Unary calls to brokers, either over a direct channel to the broker's address or relayed
    by a NameServer (``mode="relay"``: the client only ever connects to NameServers, as with a
    single ``kubectl port-forward``). ``mode="auto"`` relays and falls back to direct calls when
    the NameServer has no relay (UNIMPLEMENTED); and after the first relayed call to a broker it
    tries, in the background, to connect to the broker's address: once that connects (within
    :data:`DIRECT_PROBE_S`), the calls to that broker go direct, one hop and one NameServer
    call fewer each (a loop of admin calls costs about half). A broker that cannot be reached
    from here (pod addresses behind a port-forward) stays relayed and the first call never
    waits for the attempt. A direct call that fails with UNAVAILABLE, or is refused
    (PERMISSION_DENIED: access control may allow the NameServer's address and not this one),
    puts the broker back on the relay for the client's life; a refused call is relayed again
    at once (it did not run)."""

    def __init__(self, pool: ChannelPool, namesrv: NamesrvClient | None, mode: RelayMode = "direct") -> None:
        if mode != "direct" and namesrv is None:
            raise InvalidArgumentError("relayed broker calls need a NameServer")
        self.pool = pool
        self.namesrv = namesrv
        self.mode: RelayMode = mode
        #: ``mode="auto"``: brokers whose address connected (called direct) ...
        self._direct: set[str] = set()
        #: ... and every broker address tried, with the attempt while it runs.
        self._probes: dict[str, asyncio.Task[None] | None] = {}

    @property
    def direct_addresses(self) -> frozenset[str]:
        """``mode="auto"``: the brokers called directly (their address connected)."""
        return frozenset(self._direct)

    async def wait_probes(self) -> None:
        """Wait until the connection attempts under way are done (``mode="auto"``)."""
        tasks = [t for t in self._probes.values() if t is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop the connection attempts under way (before the pool closes)."""
        tasks = [t for t in self._probes.values() if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _probe_later(self, address: str) -> None:
        if address not in self._probes and not self.pool.closed:
            self._probes[address] = asyncio.get_running_loop().create_task(self._probe(address))

    async def _probe(self, address: str) -> None:
        try:
            channel = self.pool.channel(address)
            await asyncio.wait_for(channel.channel_ready(), DIRECT_PROBE_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (a timeout, a closed pool, a bad address)
            log.debug("broker not reachable directly; calls stay relayed",
                      extra={"broker": address, "error": repr(exc)})
            if not self.pool.closed:
                await self.pool.discard(address)  # (stops its reconnect attempts)
        else:
            if self.mode == "auto":
                self._direct.add(address)
                log.debug("broker reachable directly; calls go direct", extra={"broker": address})
        finally:
            self._probes[address] = None

    @property
    def relayed(self) -> bool:
        return self.mode != "direct"

    def stream(self, address: str, method: str, request: ProtoMessage, raw_replies: bool = False) -> Any:
        """Start the server-streaming call ``method(request)`` of the Broker service at ``address``
        (direct connections only: the NameServer relays unary calls). Returns the
        ``grpc.aio.UnaryStreamCall``; read it with ``await call.read()`` and cancel it when
        done; its replies are the serialized messages when ``raw_replies``. Errors surface as
        ``grpc.aio.AioRpcError`` (see :func:`pocketmq.errors.from_rpc_error`)."""
        if self.mode != "direct":
            raise UnimplementedError(f"{method}: streaming calls are not relayed by the NameServer",
                                     address=address)
        if raw_replies:
            return self.pool.channel(address).unary_stream(
                f"/{BROKER_SERVICE.full_name}/{method}", request_serializer=type(request).SerializeToString,
                response_deserializer=None)(request)
        return getattr(self.pool.broker_stub(address, "Broker"), method)(request)

    async def call(self, address: str, method: str, request: ProtoMessage, timeout: float) -> Any:  # noqa: ASYNC109
        """``method(request)`` at ``address`` (``"GetBrokerStatus"`` = Broker.GetBrokerStatus,
        ``"BrokerMetadata/GetAllConsumerOffsets"`` for the other service); returns the reply."""
        desc = BROKER_UNARY_METHODS.get(method)
        if desc is None:
            raise InvalidArgumentError(f"{method!r} is not a unary method of the broker API")
        if self.mode == "direct":
            stub = self.pool.broker_stub(address, desc.containing_service.name)
            return await unary(getattr(stub, desc.name), request, timeout, address, method)
        if address in self._direct:
            stub = self.pool.broker_stub(address, desc.containing_service.name)
            try:
                return await unary(getattr(stub, desc.name), request, timeout, address, method)
            except (ConnectionFailedError, PermissionDeniedError) as exc:
                self._direct.discard(address)  # relayed from now on (never probed again)
                log.info("direct call to a broker failed; its calls go through the NameServer again",
                         extra={"broker": address, "method": method, "error": exc.message})
                if isinstance(exc, ConnectionFailedError):
                    raise  # (it may have run: not repeated)
        assert self.namesrv is not None
        try:
            data = await self.namesrv.relay(address, method, request.SerializeToString(), timeout)
        except (UnimplementedError, FailedPreconditionError) as exc:
            no_relay = isinstance(exc, UnimplementedError) or "relayEnable" in exc.message
            if not no_relay:
                raise
            if self.mode != "auto":
                raise type(exc)(
                    f"{method}: the NameServer does not relay broker calls ({exc.message}); "
                    "reach brokers directly (--access direct, or --broker host:port)",
                    address=exc.address) from None
            log.info("namesrv does not relay broker calls; calling brokers directly")
            self.mode = "direct"
            return await self.call(address, method, request, timeout)
        except RpcError as exc:
            if not exc.address or exc.address in self.namesrv.addresses:
                exc.address = f"{address} via NameServer {exc.address}".strip()
            raise
        if self.mode == "auto":
            self._probe_later(address)
        response_cls: type[ProtoMessage] = getattr(broker_pb2, desc.output_type.name)
        try:
            return response_cls.FromString(data)
        except DecodeError as exc:
            raise InternalError(f"{method}: undecodable relayed reply: {exc}", address=address) from None

    # -- typed calls ------------------------------------------------------------------------------

    async def send_message(self, address: str, request: broker_pb2.SendMessageRequest,
                           timeout: float) -> broker_pb2.SendMessageResponse:  # noqa: ASYNC109
        reply: broker_pb2.SendMessageResponse = await self.call(address, "SendMessage", request, timeout)
        return reply

    async def send_batch(self, address: str, request: broker_pb2.SendMessageBatchRequest,
                         timeout: float) -> broker_pb2.SendMessageBatchResponse:  # noqa: ASYNC109
        reply: broker_pb2.SendMessageBatchResponse = await self.call(
            address, "SendMessageBatch", request, timeout)
        return reply

    async def pull(self, address: str, request: broker_pb2.PullMessageRequest,
                   timeout: float) -> broker_pb2.PullMessageResponse:  # noqa: ASYNC109
        reply: broker_pb2.PullMessageResponse = await self.call(address, "PullMessage", request, timeout)
        return reply

    def pull_stream(self, address: str, request: broker_pb2.PullMessageRequest) -> PullStream:
        """Start a PullMessageStream at ``address`` (direct connections only). Its replies come
        as gRPC delivered them and are parsed by :meth:`PullStream.read`."""
        return PullStream(self.stream(address, "PullMessageStream", request, True), address)

    async def queue_offset(self, address: str, which: Literal["min", "max"], topic: str, queue_id: int,
                           timeout: float) -> int:  # noqa: ASYNC109
        """The min or max offset of a queue."""
        reply: broker_pb2.OffsetResponse = await self.call(
            address, "GetMinOffset" if which == "min" else "GetMaxOffset",
            broker_pb2.QueueRequest(topic=topic, queue_id=queue_id), timeout)
        return int(reply.offset)

    async def search_offset(self, address: str, topic: str, queue_id: int, timestamp_ms: int,
                            timeout: float) -> int:  # noqa: ASYNC109
        """The offset of the first message stored at or after ``timestamp_ms``."""
        request = broker_pb2.SearchOffsetRequest(topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms)
        reply: broker_pb2.OffsetResponse = await self.call(address, "SearchOffset", request, timeout)
        return int(reply.offset)

    async def query_consumer_offset(self, address: str, group: str, topic: str, queue_id: int,
                                    timeout: float) -> int:  # noqa: ASYNC109
        """A group's committed offset of a queue (NotFoundError when it has none)."""
        reply: broker_pb2.OffsetResponse = await self.call(
            address, "QueryConsumerOffset", broker_pb2.QueryConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=queue_id), timeout)
        return int(reply.offset)

    async def update_consumer_offset(self, address: str, group: str, topic: str, queue_id: int,
                                     offset: int, timeout: float,  # noqa: ASYNC109
                                     reset_generation: int | None = None) -> None:
        """``reset_generation``: the group's offset-reset generation this client applied (the
        broker ignores the commit when it is older than its own)."""
        await self.call(address, "UpdateConsumerOffset", broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, offset=offset,
            reset_generation=reset_generation), timeout)

    async def consumer_heartbeat(self, address: str, request: broker_pb2.ConsumerHeartbeatRequest,
                                 timeout: float) -> broker_pb2.ConsumerHeartbeatResponse:  # noqa: ASYNC109
        reply: broker_pb2.ConsumerHeartbeatResponse = await self.call(address, "ConsumerHeartbeat", request,
                                                                      timeout)
        return reply

    async def unregister_consumer(self, address: str, group: str, client_id: str,
                                  timeout: float) -> None:  # noqa: ASYNC109
        await self.call(address, "UnregisterConsumer", broker_pb2.UnregisterConsumerRequest(
            consumer_group=group, client_id=client_id), timeout)

    async def consumer_list(self, address: str, group: str, timeout: float) -> list[str]:  # noqa: ASYNC109
        """The client ids of a group's members the broker knows."""
        reply: broker_pb2.GetConsumerListResponse = await self.call(
            address, "GetConsumerList", broker_pb2.GetConsumerListRequest(consumer_group=group), timeout)
        return list(reply.client_ids)

    async def broker_status(self, address: str, timeout: float) -> broker_pb2.BrokerStatus:  # noqa: ASYNC109
        reply: broker_pb2.BrokerStatus = await self.call(
            address, "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest(), timeout)
        return reply


class PullStream:
    """A started PullMessageStream: :meth:`read` the replies one by one (None at the end of the
    stream); :meth:`cancel` it when done. gRPC failures surface as
    :class:`~pocketmq.errors.RpcError` s."""

    __slots__ = ("_call", "address", "records")

    def __init__(self, call: Any, address: str) -> None:
        self._call = call
        self.address = address
        #: The records of the reply :meth:`read` returned last, where they are in the bytes gRPC
        #: delivered (that reply's ``records`` field is then empty); None: they are in its field.
        self.records: Span | None = None

    async def read(self) -> broker_pb2.PullMessageResponse | None:
        try:
            raw = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc, self.address, "PullMessageStream") from None
        except grpc.aio.UsageError as exc:  # the channel was closed under the call
            raise ClientClosedError(f"PullMessageStream: {exc}", address=self.address) from None
        if raw is grpc.aio.EOF:
            self.records = None
            return None
        # The records stay where they are (parsed whole, the protobuf runtime would copy them
        # into the message and reading them would copy them again); the rest is parsed.
        split = split_field(raw, _RECORDS_FIELD)
        try:
            if split is None:
                self.records = None
                return broker_pb2.PullMessageResponse.FromString(raw)
            rest, self.records = split
            return broker_pb2.PullMessageResponse.FromString(rest)
        except DecodeError as exc:
            raise InternalError(f"PullMessageStream: undecodable reply ({exc})",
                                address=self.address) from None

    def cancel(self) -> None:
        self._call.cancel()

# ruff: noqa: N802  (method names are the RPC names)
"""``apache.rocketmq.v2.MessagingService`` on the broker's gRPC port.

Every handler answers with a v2 ``Status`` inside its response (a refused request never ends
the call with a transport error or a trace); the metrics count each call by RPC and code.
Consuming is POP (ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryAssignment,
ForwardMessageToDeadLetterQueue) on the broker's POP service; the pull/offset RPCs that no SDK
calls answer NOT_IMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import grpc

from apache.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.grpcauth import signing_interceptors
from pocketmq.wire.tls import aio_channel
from services.broker import validation as v
from services.broker.api import peer_host
from services.broker.v2 import route as r
from services.broker.v2.clients import ClientRegistry
from services.broker.v2.consume import Consumer
from services.broker.v2.metrics import V2Metrics
from services.broker.v2.produce import Producer
from services.broker.v2.resources import RequestMeta, group_name, topic_name
from services.broker.v2.status import Code, V2Error, ok, response_class
from services.broker.v2.telemetry import Telemetry
from services.broker.v2.transaction import Transactions
from services.common.grpcserver import CHANNEL_OPTIONS

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)

Ctx: TypeAlias = grpc.aio.ServicerContext
Metadata: TypeAlias = tuple[tuple[str, str | bytes], ...]
R = TypeVar("R")
ROUTE_TIMEOUT_S = 3.0
EXPIRE_INTERVAL_S = 10.0
POP_MISSING = "pull-mode consumption is not served; use ReceiveMessage (POP)"


#: The request headers of the call being served, as gRPC's handler lookup converted them (see
#: :class:`_KeepMetadata`); set in the call's own task, so never seen by another call.
_CALL_METADATA: contextvars.ContextVar[Metadata | None] = contextvars.ContextVar("v2_call_metadata",
                                                                                 default=None)


def meta_of(context: Ctx) -> RequestMeta:
    metadata = _CALL_METADATA.get()
    return RequestMeta.from_metadata(context.invocation_metadata() if metadata is None else metadata)


class _KeepMetadata(grpc.GenericRpcHandler):  # type: ignore[misc]
    """MessagingService's generic handler, keeping each call's request headers.

    gRPC converts a call's headers to Python to find its handler, and again at each
    ``context.invocation_metadata()`` (~4 us with the 8 headers the SDKs send on every call). The
    lookup runs in the call's own task just before the handler, so a context variable set here is
    that call's alone."""

    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self._inner = inner

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is not None:
            _CALL_METADATA.set(handler_call_details.invocation_metadata)
        return handler


class _KeepingServer:
    """A server as the generated registration function sees it: generic handlers wrapped."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers([_KeepMetadata(h) for h in handlers])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def is_tls(context: Ctx) -> bool:
    """Whether the call came over the TLS listener."""
    try:
        auth = context.auth_context()
    except Exception:  # some transports have no auth context
        return False
    return bool(auth.get("transport_security_type") == [b"ssl"])


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, app: BrokerApp, *, tls_address_map: r.AddressMap | None = None) -> None:
        """``tls_address_map``: rewrites broker addresses in the routes answered on a TLS
        connection (to the brokers' TLS ports)."""
        self.app = app
        self.tls_address_map = tls_address_map
        cfg = app.broker_config
        self.clients = ClientRegistry(cfg.consumer_channel_expired_time / 1000)
        self.metrics = V2Metrics(app.metrics.registry, [
            ("cluster", cfg.broker_cluster_name), ("broker", cfg.broker_name),
            ("broker_id", str(cfg.broker_id))])
        self.metrics.add_clients(self.clients.counts_by_type, self.clients.stream_count)
        self.producer = Producer(app, self._published)
        self.telemetry = Telemetry(app, self.clients)
        self.transactions = Transactions(app, self.clients)
        self.consumer = Consumer(app, app.pop, self.clients)
        app.pop.connected = self.consumer.client_connected
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._expire_task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.app.transactions.register_checker(self.transactions.check)
        self._expire_task = asyncio.create_task(self._expire_loop(), name="v2-client-expiry")

    async def stop(self) -> None:
        if self._expire_task is not None:
            self._expire_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expire_task
        self.clients.close()
        for channel in self._channels.values():
            await channel.close()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_INTERVAL_S)
            self.clients.expire()

    def _published(self, client_id: str, topic: str) -> None:
        client = self.clients.touch(client_id)
        if client is not None and client.is_producer:
            client.topics.add(topic)

    # -- plumbing ---------------------------------------------------------------------------

    async def _answer(self, rpc: str, call: Awaitable[R]) -> R:
        """``call``'s response, or the response of ``rpc`` carrying the error ``call`` raised."""
        started = time.perf_counter()
        try:
            response = await call
        except V2Error as exc:
            log.debug("v2 request refused", extra={"rpc": rpc, "code": exc.code, "reason": exc.message})
            response = cast(R, response_class(rpc)(status=exc.status()))
        except Exception as exc:
            log.exception("unhandled error in %s", rpc)
            response = cast(R, response_class(rpc)(status=definition_pb2.Status(
                code=Code.INTERNAL_SERVER_ERROR, message=f"{type(exc).__name__}: {exc}")))
        self.metrics.request(rpc, cast(Any, response).status.code)
        if time.perf_counter() - started > 1.0:
            log.info("slow v2 request",
                     extra={"rpc": rpc, "seconds": round(time.perf_counter() - started, 3)})
        return response

    # -- routes ------------------------------------------------------------------------------

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NameServerStub:
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = aio_channel(
                addr, CHANNEL_OPTIONS, self.app.client_tls,
                signing_interceptors(self.app.broker_config.inner_credentials))
        return namesrv_pb2_grpc.NameServerStub(channel)

    async def _route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        """The topic's route from the first NameServer that answers (None: no such topic); without
        NameServers, this broker's own topic table."""
        addrs = self.app.broker_config.namesrv_addrs
        errors = []
        for addr in addrs:
            try:
                reply: namesrv_pb2.TopicRouteData = await self._stub(addr).GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=ROUTE_TIMEOUT_S)
                return reply
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                errors.append(f"{addr}: {exc.code().name}")
        if addrs:
            raise V2Error(Code.INTERNAL_SERVER_ERROR, f"no NameServer answered ({', '.join(errors)})")
        tc = self.app.topics.get(topic)
        if tc is None:
            return None
        cfg = self.app.broker_config
        return namesrv_pb2.TopicRouteData(
            queue_datas=[namesrv_pb2.QueueData(
                broker_name=cfg.broker_name, read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums, perm=tc.perm, message_type=tc.message_type)],
            broker_datas=[namesrv_pb2.BrokerData(cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                                                 broker_addrs={cfg.broker_id: cfg.broker_addr})])

    async def QueryRoute(self, request: service_pb2.QueryRouteRequest,
                         context: Ctx) -> service_pb2.QueryRouteResponse:
        async def handle() -> service_pb2.QueryRouteResponse:
            meta = meta_of(context)
            topic = topic_name(request.topic, meta)
            queues: list[definition_pb2.MessageQueue] = []
            address_map = self.tls_address_map if is_tls(context) else None
            route = await self._route(topic)
            if route is not None:
                queues = r.message_queues(request.topic, route, address_map)
            else:
                template = await self._route(v.AUTO_CREATE_TOPIC_KEY)
                if template is not None:
                    queues = r.message_queues(request.topic, template, address_map,
                                              queue_nums=self.app.broker_config.default_topic_queue_nums)
            if not queues:
                raise V2Error(Code.TOPIC_NOT_FOUND,
                              f"topic {topic!r} does not exist and no broker creates topics automatically "
                              "(autoCreateTopicEnable=false); create it first")
            return service_pb2.QueryRouteResponse(status=ok(), message_queues=queues)

        return await self._answer("QueryRoute", handle())

    # -- clients -----------------------------------------------------------------------------

    async def Heartbeat(self, request: service_pb2.HeartbeatRequest,
                        context: Ctx) -> service_pb2.HeartbeatResponse:
        async def handle() -> service_pb2.HeartbeatResponse:
            meta = meta_of(context)
            client_id = meta.require_client_id()
            if request.HasField("group"):
                group_name(request.group, meta)
            if self.clients.touch(client_id) is None:
                raise V2Error(Code.UNRECOGNIZED_CLIENT_TYPE,
                              f"client {client_id!r} sent no Settings yet: open a Telemetry stream to this "
                              "broker and send the client's Settings before heartbeats")
            return service_pb2.HeartbeatResponse(status=ok())

        return await self._answer("Heartbeat", handle())

    async def NotifyClientTermination(
        self, request: service_pb2.NotifyClientTerminationRequest, context: Ctx
    ) -> service_pb2.NotifyClientTerminationResponse:
        async def handle() -> service_pb2.NotifyClientTerminationResponse:
            meta = meta_of(context)
            client_id = meta.require_client_id()
            if request.HasField("group"):
                group_name(request.group, meta)
            self.clients.remove(client_id)
            return service_pb2.NotifyClientTerminationResponse(status=ok())

        return await self._answer("NotifyClientTermination", handle())

    async def Telemetry(self, request_iterator: AsyncIterator[service_pb2.TelemetryCommand],
                        context: Ctx) -> AsyncIterator[service_pb2.TelemetryCommand]:
        meta = meta_of(context)
        self.metrics.request("Telemetry", Code.OK if meta.client_id else Code.CLIENT_ID_REQUIRED)
        async for command in self.telemetry.serve(request_iterator, meta):
            yield command

    # -- producing ---------------------------------------------------------------------------

    async def SendMessage(self, request: service_pb2.SendMessageRequest,
                          context: Ctx) -> service_pb2.SendMessageResponse:
        return await self._answer(
            "SendMessage", self.producer.send(request, meta_of(context), lambda: peer_host(context)))

    async def EndTransaction(self, request: service_pb2.EndTransactionRequest,
                             context: Ctx) -> service_pb2.EndTransactionResponse:
        return await self._answer("EndTransaction", self.transactions.end(request, meta_of(context)))

    # -- consuming (next: POP) -----------------------------------------------------------------

    def _not_implemented(self, rpc: str) -> Any:
        return response_class(rpc)(status=definition_pb2.Status(
            code=Code.NOT_IMPLEMENTED, message=f"{rpc}: {POP_MISSING}"))

    async def _consumer_call(self, rpc: str, request: Any, context: Ctx) -> Any:
        async def handle() -> Any:
            meta = meta_of(context)
            if request.HasField("group"):
                group_name(request.group, meta)
            if hasattr(request, "topic") and request.HasField("topic"):
                topic_name(request.topic, meta)
            return self._not_implemented(rpc)

        return await self._answer(rpc, handle())

    async def QueryAssignment(self, request: service_pb2.QueryAssignmentRequest,
                              context: Ctx) -> service_pb2.QueryAssignmentResponse:
        async def handle() -> service_pb2.QueryAssignmentResponse:
            meta = meta_of(context)
            route = await self._route(topic_name(request.topic, meta))
            return self.consumer.assignments(request, meta, route)

        return await self._answer("QueryAssignment", handle())

    async def AckMessage(self, request: service_pb2.AckMessageRequest,
                         context: Ctx) -> service_pb2.AckMessageResponse:
        async def handle() -> service_pb2.AckMessageResponse:
            return self.consumer.ack(request, meta_of(context))

        return await self._answer("AckMessage", handle())

    async def ForwardMessageToDeadLetterQueue(
        self, request: service_pb2.ForwardMessageToDeadLetterQueueRequest, context: Ctx
    ) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
        async def handle() -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
            return self.consumer.forward_to_dlq(request, meta_of(context))

        return await self._answer("ForwardMessageToDeadLetterQueue", handle())

    async def ChangeInvisibleDuration(
        self, request: service_pb2.ChangeInvisibleDurationRequest, context: Ctx
    ) -> service_pb2.ChangeInvisibleDurationResponse:
        async def handle() -> service_pb2.ChangeInvisibleDurationResponse:
            return self.consumer.change_invisible(request, meta_of(context))

        return await self._answer("ChangeInvisibleDuration", handle())

    async def UpdateOffset(self, request: Any, context: Ctx) -> Any:
        return await self._consumer_call("UpdateOffset", request, context)

    async def GetOffset(self, request: Any, context: Ctx) -> Any:
        return await self._consumer_call("GetOffset", request, context)

    async def QueryOffset(self, request: Any, context: Ctx) -> Any:
        return await self._answer("QueryOffset", self._value(self._not_implemented("QueryOffset")))

    async def RecallMessage(self, request: Any, context: Ctx) -> Any:
        return await self._answer("RecallMessage", self._value(response_class("RecallMessage")(
            status=definition_pb2.Status(
                code=Code.NOT_IMPLEMENTED,
                message="RecallMessage: recalling delayed messages is not supported"))))

    async def SyncLiteSubscription(self, request: Any, context: Ctx) -> Any:
        return await self._answer("SyncLiteSubscription", self._value(response_class("SyncLiteSubscription")(
            status=definition_pb2.Status(code=Code.NOT_IMPLEMENTED,
                                         message="SyncLiteSubscription: lite topics are not supported"))))

    async def ReceiveMessage(self, request: service_pb2.ReceiveMessageRequest,
                             context: Ctx) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        started = time.perf_counter()
        try:
            responses = await self.consumer.receive(request, meta_of(context), self.app.stopping)
        except V2Error as exc:
            responses = [service_pb2.ReceiveMessageResponse(status=exc.status())]
        except Exception as exc:
            log.exception("unhandled error in ReceiveMessage")
            responses = [service_pb2.ReceiveMessageResponse(status=definition_pb2.Status(
                code=Code.INTERNAL_SERVER_ERROR, message=f"{type(exc).__name__}: {exc}"))]
        self.metrics.request("ReceiveMessage", responses[0].status.code)
        log.debug("receive", extra={"messages": len(responses) - 1,
                                    "seconds": round(time.perf_counter() - started, 3)})
        for response in responses:
            yield response

    async def PullMessage(self, request: Any, context: Ctx) -> AsyncIterator[Any]:
        yield await self._consumer_call("PullMessage", request, context)

    @staticmethod
    async def _value(value: Any) -> Any:
        return value


def add_messaging_service(servicer: MessagingServicer, server: grpc.aio.Server) -> None:
    """Register ``MessagingService`` on ``server`` (its handlers keep each call's headers)."""
    service_pb2_grpc.add_MessagingServiceServicer_to_server(
        servicer, cast(grpc.aio.Server, _KeepingServer(server)))

# ruff: noqa: N802  (method names are the RPC names)
"""``apache.rocketmq.v2.MessagingService`` on the NameServer's port, so ``namesrv:9876`` works
as the access point of the RocketMQ 5 SDKs the way a RocketMQ proxy address does.

The NameServer answers QueryRoute from its route table (the queues point at the brokers, which
serve everything else); any other call gets ILLEGAL_ACCESS_POINT naming the broker endpoints
to use instead.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from apache.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc
from services.broker import validation as v
from services.broker.v2 import route as r
from services.broker.v2.metrics import V2Metrics
from services.broker.v2.resources import RequestMeta, topic_name
from services.broker.v2.status import Code, V2Error, is_streaming, method_names, ok, response_class
from services.namesrv.api import NameServerServicer

log = logging.getLogger(__name__)

Ctx: TypeAlias = grpc.aio.ServicerContext


class NamesrvMessagingServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, names: NameServerServicer) -> None:
        self.names = names
        self.metrics = V2Metrics(names.metrics.registry)

    def _brokers(self) -> str:
        masters = sorted(f"{g.broker_name}={g.broker_addrs[0]}"
                         for g in self.names.table.broker_addr_table.values() if 0 in g.broker_addrs)
        return ", ".join(masters) or "none registered yet"

    def refusal(self, rpc: str) -> definition_pb2.Status:
        return definition_pb2.Status(
            code=Code.ILLEGAL_ACCESS_POINT,
            message=f"{rpc} goes to a broker, not to the NameServer (which answers QueryRoute only); "
                    f"use the broker endpoints of the topic's route: {self._brokers()}")

    async def QueryRoute(self, request: service_pb2.QueryRouteRequest,
                         context: Ctx) -> service_pb2.QueryRouteResponse:
        try:
            topic = topic_name(request.topic, RequestMeta.from_metadata(context.invocation_metadata()))
            route = self.names.route_data(topic)
            if route is None:
                route = self.names.route_data(v.AUTO_CREATE_TOPIC_KEY)
            queues = r.message_queues(request.topic, route) if route is not None else []
            if not queues:
                raise V2Error(Code.TOPIC_NOT_FOUND,
                              f"topic {topic!r} does not exist and no broker creates topics automatically "
                              "(autoCreateTopicEnable=false); create it first")
            response = service_pb2.QueryRouteResponse(status=ok(), message_queues=queues)
        except V2Error as exc:
            response = service_pb2.QueryRouteResponse(status=exc.status())
        self.metrics.request("QueryRoute", response.status.code)
        return response


def _refuse_unary(rpc: str) -> Any:
    async def handler(self: NamesrvMessagingServicer, request: Any, context: Ctx) -> Any:
        status = self.refusal(rpc)
        self.metrics.request(rpc, status.code)
        return response_class(rpc)(status=status)

    handler.__name__ = rpc
    return handler


def _refuse_stream(rpc: str) -> Any:
    async def handler(self: NamesrvMessagingServicer, request: Any, context: Ctx) -> AsyncIterator[Any]:
        status = self.refusal(rpc)
        self.metrics.request(rpc, status.code)
        if rpc == "Telemetry":
            yield service_pb2.TelemetryCommand(status=status)
        else:
            yield response_class(rpc)(status=status)

    handler.__name__ = rpc
    return handler


for _rpc in method_names():
    if _rpc != "QueryRoute":
        setattr(NamesrvMessagingServicer, _rpc,
                _refuse_stream(_rpc) if is_streaming(_rpc) else _refuse_unary(_rpc))

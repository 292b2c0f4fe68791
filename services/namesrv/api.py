"""gRPC servicer for ``pocketmq.namesrv.v1.NameServer``: validation, protobuf <-> route table,
metrics and logs. All state lives in a :class:`~services.namesrv.routeinfo.RouteTable` and a
:class:`~services.namesrv.kvconfig.KVConfig`, touched only from the server's event loop (grpc.aio
runs every handler there and no handler awaits between reading and writing the tables)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from pocketmq.wire.auth import AUTHORIZATION, DATE_TIME
from services.common.acl.model import AclDocument, User
from services.common.acl.protoconv import document_from_proto
from services.common.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ServiceError,
    grpc_method,
)
from services.namesrv import kvconfig, validation
from services.namesrv.config import NamesrvConfig
from services.namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfig
from services.namesrv.metrics import NamesrvMetrics
from services.namesrv.relay import BrokerRelay
from services.namesrv.routeinfo import (
    BrokerData,
    BrokerLiveInfo,
    DataVersion,
    Registration,
    RouteConflictError,
    RouteTable,
)

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["NameServer"].full_name

R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def observed(func: Handler[R]) -> Handler[R]:
    """Count the call by method and status code and record its latency (outermost decorator)."""
    method = func.__name__

    @functools.wraps(func)
    async def wrapper(self: NameServerServicer, request: Any, context: grpc.aio.ServicerContext) -> R:
        start = time.perf_counter()
        try:
            return await func(self, request, context)
        finally:
            code = context.code()
            self.metrics.observe_request(method, code.name if code is not None else "OK",
                                         time.perf_counter() - start)

    return wrapper


def _broker_data_pb(group: BrokerData) -> pb.BrokerData:
    return pb.BrokerData(
        cluster=group.cluster, broker_name=group.broker_name, broker_addrs=group.broker_addrs
    )


def _live_pb(info: BrokerLiveInfo) -> pb.BrokerLiveInfo:
    return pb.BrokerLiveInfo(
        broker_addr=info.broker_addr,
        ha_server_addr=info.ha_server_addr,
        last_update_timestamp=info.last_update_timestamp,
        data_version=common_pb2.DataVersion(
            timestamp=info.data_version.timestamp, counter=info.data_version.counter
        ),
        metrics_addr=info.metrics_addr,
        broker_role=info.broker_role,
        cluster_name=info.cluster_name,
        broker_name=info.broker_name,
        broker_id=info.broker_id,
    )


class NameServerServicer(namesrv_pb2_grpc.NameServerServicer):  # type: ignore[misc]
    def __init__(
        self,
        config: NamesrvConfig,
        table: RouteTable | None = None,
        kv: KVConfig | None = None,
        metrics: NamesrvMetrics | None = None,
    ) -> None:
        self.config = config
        self.table = table if table is not None else RouteTable()
        self.kv = kv if kv is not None else KVConfig()
        self.metrics = metrics if metrics is not None else NamesrvMetrics()
        self._seen_generation = -1
        #: Serialised-once answers of GetRouteInfoByTopic, valid while the table's generation is
        #: unchanged (heartbeats do not change it) and the ORDER_TOPIC_CONFIG namespace too.
        self._route_cache: dict[str, pb.TopicRouteData] = {}
        #: Forwards RelayBrokerCall to registered brokers only.
        self.relay = BrokerRelay(lambda: self.table.broker_live_table.keys(), config.client_tls())
        #: ACL tables registered by brokers (broker address -> version, users); see acl_document.
        self._acl_tables: dict[str, tuple[tuple[int, int], AclDocument]] = {}
        #: Called when the registered ACL tables changed (the NameServer's ACL store re-reads).
        self.on_acl_change: Callable[[], None] | None = None
        self._after_change()

    # ------------------------------------------------------------ housekeeping

    def _after_change(self) -> None:
        """Refresh the gauges derived from the tables when membership or routes changed."""
        if self.table.generation != self._seen_generation:
            self._seen_generation = self.table.generation
            self._route_cache.clear()
            self.metrics.set_live_brokers(self.table.live_brokers_per_cluster())
            self.metrics.topics.set(len(self.table.topic_queue_table))

    def _register_acl(self, broker_addr: str, table: common_pb2.AclTable) -> None:
        version = (table.data_version.timestamp, table.data_version.counter)
        known = self._acl_tables.get(broker_addr)
        if known is not None and known[0] == version:
            return
        try:
            doc = document_from_proto(table)
        except ServiceError as exc:
            log.error("ACL table of a broker not applied",
                      extra={"broker_addr": broker_addr, "error": str(exc)})
            return
        self._acl_tables[broker_addr] = (version, doc)
        log.info("ACL table registered", extra={"broker_addr": broker_addr, "users": len(doc.users)})
        if self.on_acl_change is not None:
            self.on_acl_change()

    def acl_document(self) -> AclDocument:
        """The users of the ACL tables registered by live brokers (the NameServer's table)."""
        live = self.table.broker_live_table
        users: dict[str, User] = {}
        for addr, (_, doc) in self._acl_tables.items():
            if addr in live:
                users.update(doc.users)
        return AclDocument(users)

    def expire_brokers(self) -> list[BrokerLiveInfo]:
        """Remove brokers silent for longer than brokerChannelExpiredTime (the periodic scan)."""
        expired = self.table.scan_not_active(self.config.broker_channel_expired_time)
        now = self.table.wall_clock_ms()
        for info in expired:
            self.metrics.expirations.inc()
            log.warning(
                "broker expired",
                extra={
                    "cluster": info.cluster_name, "broker": info.broker_name, "broker_id": info.broker_id,
                    "broker_addr": info.broker_addr, "silent_ms": now - info.last_update_timestamp,
                    "expiry_ms": self.config.broker_channel_expired_time,
                },
            )
        self._after_change()
        return expired

    def _kv_changed(self, namespace: str) -> None:
        if namespace == ORDER_TOPIC_CONFIG:
            self._route_cache.clear()
        if self.config.kv_config_path:
            kvconfig.save(self.config.kv_config_path, self.kv)

    # ------------------------------------------------------------ registration

    @observed
    @grpc_method
    async def RegisterBroker(  # noqa: N802
        self, request: pb.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterBrokerResponse:
        validation.validate_register(request, self.config.max_topics_per_registration)
        version = request.topic_config_version
        reg = Registration(
            cluster_name=request.cluster_name,
            broker_name=request.broker_name,
            broker_id=request.broker_id,
            broker_addr=request.broker_addr,
            ha_server_addr=request.ha_server_addr,
            data_version=DataVersion(version.timestamp, version.counter),
            topic_configs=request.topic_configs,
            metrics_addr=request.metrics_addr,
            broker_role=request.broker_role,
            delta_base=(DataVersion(request.topic_delta_base.timestamp, request.topic_delta_base.counter)
                        if request.HasField("topic_delta_base") else None),
            deleted_topics=request.deleted_topics,
        )
        try:
            result = self.table.register(reg)
        except RouteConflictError as exc:
            raise FailedPreconditionError(str(exc)) from None
        self.metrics.registrations.labels("new" if result.new_broker else "heartbeat").inc()
        fields = {
            "cluster": reg.cluster_name, "broker": reg.broker_name, "broker_id": reg.broker_id,
            "broker_addr": reg.broker_addr,
        }
        if result.new_broker:
            log.info("broker registered", extra={**fields, "ha_addr": reg.ha_server_addr,
                                                 "role": reg.broker_role or "-"})
        else:
            log.debug("broker heartbeat", extra=fields)
        if result.displaced:
            log.info("broker entry replaced", extra={**fields, "replaced": ",".join(result.displaced)})
        if result.topics_updated:
            self.metrics.topic_updates.inc()
            log.info("topic config updated", extra={
                **fields, "topics": len(request.topic_configs),
                "deleted": len(request.deleted_topics), "incremental": reg.delta_base is not None,
                "data_version": f"{version.timestamp}/{version.counter}",
            })
        if request.HasField("acl_table"):
            self._register_acl(request.broker_addr, request.acl_table)
        self._after_change()
        return pb.RegisterBrokerResponse(
            master_addr=result.master_addr,
            ha_server_addr=result.master_ha_addr,
            order_topic_config=self.kv.namespace(ORDER_TOPIC_CONFIG),
            topic_delta_supported=True,
            topic_full_needed=result.topic_full_needed,
        )

    @observed
    @grpc_method
    async def UnregisterBroker(  # noqa: N802
        self, request: pb.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnregisterBrokerResponse:
        validation.validate_unregister(request)
        removed = self.table.unregister(
            request.cluster_name, request.broker_name, request.broker_id, request.broker_addr
        )
        fields = {
            "cluster": request.cluster_name, "broker": request.broker_name,
            "broker_id": request.broker_id, "broker_addr": request.broker_addr,
        }
        if removed:
            self.metrics.unregistrations.inc()
            log.info("broker unregistered", extra=fields)
        else:
            log.info("unregister of unknown broker ignored", extra=fields)
        self._after_change()
        return pb.UnregisterBrokerResponse(removed=removed)

    # ------------------------------------------------------------ queries

    @observed
    @grpc_method
    async def GetRouteInfoByTopic(  # noqa: N802
        self, request: pb.GetRouteInfoByTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicRouteData:
        validation.check_topic("topic", request.topic)
        reply = self.route_data(request.topic)
        if reply is None:
            self.metrics.routes_not_found.inc()
            raise NotFoundError(f"no route for topic '{request.topic}': no live broker serves it")
        self.metrics.routes_found.inc()
        return reply

    def route_data(self, topic: str) -> pb.TopicRouteData | None:
        """The topic's route (cached until the table changes), None when no live broker serves it.
        ``topic`` is validated by the caller."""
        self._after_change()  # drops cached routes if the table changed outside a handler
        cached = self._route_cache.get(topic)
        if cached is not None:
            return cached
        route = self.table.route(topic)
        if route is None:
            return None
        reply = self._route_cache[topic] = pb.TopicRouteData(
            queue_datas=[
                pb.QueueData(
                    broker_name=q.broker_name, read_queue_nums=q.read_queue_nums,
                    write_queue_nums=q.write_queue_nums, perm=q.perm, topic_sys_flag=q.topic_sys_flag,
                    message_type=q.message_type,
                )
                for q in route.queue_datas
            ],
            broker_datas=[_broker_data_pb(g) for g in route.broker_datas],
            order_topic_conf=self.kv.get(ORDER_TOPIC_CONFIG, topic) or "",
        )
        return reply

    @observed
    @grpc_method
    async def GetBrokerClusterInfo(  # noqa: N802
        self, request: pb.GetBrokerClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterInfo:
        t = self.table
        return pb.ClusterInfo(
            broker_addr_table={name: _broker_data_pb(g) for name, g in t.broker_addr_table.items()},
            cluster_addr_table={
                cluster: pb.ClusterBrokerNames(broker_names=sorted(names))
                for cluster, names in t.cluster_addr_table.items()
            },
            broker_live_table={addr: _live_pb(info) for addr, info in t.broker_live_table.items()},
        )

    @observed
    @grpc_method
    async def GetTopicsByCluster(  # noqa: N802
        self, request: pb.GetTopicsByClusterRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicList:
        validation.check_name("cluster", request.cluster)
        topics = self.table.topics_of_cluster(request.cluster)
        if topics is None:
            raise NotFoundError(f"cluster '{request.cluster}' has no live broker")
        return pb.TopicList(topics=topics)

    @observed
    @grpc_method
    async def GetAllTopicList(  # noqa: N802
        self, request: pb.GetAllTopicListRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicList:
        return pb.TopicList(topics=self.table.all_topics())

    # ------------------------------------------------------------ permissions

    @observed
    @grpc_method
    async def WipeWritePermOfBroker(  # noqa: N802
        self, request: pb.WipeWritePermOfBrokerRequest, context: grpc.aio.ServicerContext
    ) -> pb.WipeWritePermOfBrokerResponse:
        validation.check_name("broker_name", request.broker_name)
        count = self.table.wipe_write_perm(request.broker_name)
        self._after_change()
        log.info("write permission wiped", extra={"broker": request.broker_name, "topics": count})
        return pb.WipeWritePermOfBrokerResponse(wipe_topic_count=count)

    @observed
    @grpc_method
    async def AddWritePermOfBroker(  # noqa: N802
        self, request: pb.AddWritePermOfBrokerRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddWritePermOfBrokerResponse:
        validation.check_name("broker_name", request.broker_name)
        count = self.table.add_write_perm(request.broker_name)
        self._after_change()
        log.info("write permission added", extra={"broker": request.broker_name, "topics": count})
        return pb.AddWritePermOfBrokerResponse(add_topic_count=count)

    # ------------------------------------------------------------ KV config

    @observed
    @grpc_method
    async def PutKVConfig(  # noqa: N802
        self, request: pb.PutKVConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutKVConfigResponse:
        validation.check_kv_part("namespace", request.namespace)
        validation.check_kv_part("key", request.key)
        validation.check_kv_value(request.value)
        if self.kv.put(request.namespace, request.key, request.value):
            self._kv_changed(request.namespace)
            log.info("kv config put", extra={"namespace": request.namespace, "key": request.key})
        return pb.PutKVConfigResponse()

    @observed
    @grpc_method
    async def GetKVConfig(  # noqa: N802
        self, request: pb.GetKVConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetKVConfigResponse:
        validation.check_kv_part("namespace", request.namespace)
        validation.check_kv_part("key", request.key)
        value = self.kv.get(request.namespace, request.key)
        if value is None:
            raise NotFoundError(f"no KV config '{request.key}' in namespace '{request.namespace}'")
        return pb.GetKVConfigResponse(value=value)

    @observed
    @grpc_method
    async def DeleteKVConfig(  # noqa: N802
        self, request: pb.DeleteKVConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteKVConfigResponse:
        validation.check_kv_part("namespace", request.namespace)
        validation.check_kv_part("key", request.key)
        if self.kv.delete(request.namespace, request.key):
            self._kv_changed(request.namespace)
            log.info("kv config deleted", extra={"namespace": request.namespace, "key": request.key})
        return pb.DeleteKVConfigResponse()

    @observed
    @grpc_method
    async def GetKVListByNamespace(  # noqa: N802
        self, request: pb.GetKVListByNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetKVListByNamespaceResponse:
        validation.check_kv_part("namespace", request.namespace)
        table = self.kv.namespace(request.namespace)
        if not table:
            raise NotFoundError(f"KV namespace '{request.namespace}' is empty")
        return pb.GetKVListByNamespaceResponse(table=table)

    # ------------------------------------------------------------ broker relay

    @observed
    @grpc_method
    async def RelayBrokerCall(  # noqa: N802
        self, request: pb.RelayBrokerCallRequest, context: grpc.aio.ServicerContext
    ) -> pb.RelayBrokerCallResponse:
        if not self.config.relay_enable:
            raise FailedPreconditionError(
                "the broker relay is disabled on this NameServer (relayEnable=false)")
        validation.check_address("broker_addr", request.broker_addr)
        if request.timeout_ms < 0:
            raise InvalidArgumentError(f"timeout_ms must be >= 0, got {request.timeout_ms}")
        timeout_s = (request.timeout_ms or self.config.relay_timeout_mills) / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            timeout_s = max(0.001, min(timeout_s, remaining - 0.05))
        forwarded = [(key, value) for key, value in (context.invocation_metadata() or ())
                     if key in (AUTHORIZATION, DATE_TIME) and isinstance(value, str)]
        response = await self.relay.call(request.broker_addr, request.method, request.request, timeout_s,
                                         forwarded)
        log.debug("broker call relayed",
                  extra={"broker_addr": request.broker_addr, "method": request.method})
        return pb.RelayBrokerCallResponse(response=response)

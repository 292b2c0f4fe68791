# ruff: noqa: N802  (method names are the RPC names)
"""gRPC servicers of the broker: ``pocketmq.broker.v1.Broker`` (produce, pull, offsets, consumer
groups, admin, status) and ``pocketmq.broker.v1.BrokerMetadata`` (what slaves sync).

Handlers translate requests to the domain services (:mod:`send`, :mod:`pull`, the metadata
managers) and back; domain errors become gRPC statuses through ``@grpc_method``. Validation
errors (bad topic name, negative offset, unknown group, ...) are raised before anything changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.wire.address import AddressError, parse_host_port
from services.broker import validation as v
from services.broker.acl_api import AclAdminMixin
from services.broker.metadata import SubscriptionGroupConfig, TopicConfig
from services.broker.ops_api import OpsMethods
from services.broker.pop import batched as pop_batched
from services.broker.pop.service import RETRY_PREFIX
from services.broker.send import SendOutcome
from services.broker.storage import record
from services.common.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ServiceError,
    grpc_method,
)

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)
Ctx: TypeAlias = grpc.aio.ServicerContext

VERSION = "0.1.0"
#: SendMessageStream: batches stored but not yet answered, per stream.
STREAM_WINDOW = 64


def peer_host(context: Ctx) -> record.Host:
    """``ipv4:1.2.3.4:5678`` -> ("1.2.3.4", 5678); anything else (IPv6, unix) -> loopback/0."""
    return _host_of_peer(context.peer() or "")


@functools.lru_cache(maxsize=1024)
def _host_of_peer(peer: str) -> record.Host:
    if peer.startswith("ipv4:"):
        with contextlib.suppress(AddressError):
            return parse_host_port(peer[5:], allow_port_zero=True)
    return "127.0.0.1", 0


class BrokerServicer(AclAdminMixin, OpsMethods, broker_pb2_grpc.BrokerServicer):  # type: ignore[misc]
    def __init__(self, app: BrokerApp) -> None:
        self.app = app
        self.cfg = app.broker_config

    # -- helpers ----------------------------------------------------------------------------

    def _require_master(self, what: str) -> None:
        if not self.cfg.is_master:
            master = self.app.master_addr or "unknown yet"
            raise FailedPreconditionError(
                f"{what} is done on the master: broker {self.cfg.broker_name} "
                f"(brokerId={self.cfg.broker_id}) is a SLAVE; use the master at {master}")

    def _topic(self, topic: str) -> TopicConfig:
        v.validate_topic(topic)
        tc = self.app.topics.get(topic)
        if tc is None:
            raise NotFoundError(f"topic {topic!r} does not exist on broker {self.cfg.broker_name}")
        return tc

    def _queue(self, topic: str, queue_id: int) -> TopicConfig:
        tc = self._topic(topic)
        n = max(tc.read_queue_nums, tc.write_queue_nums)
        if not 0 <= queue_id < n:
            raise InvalidArgumentError(
                f"queue id {queue_id} is out of range: topic {topic!r} has {n} queues (0..{n - 1})")
        return tc

    # -- produce ----------------------------------------------------------------------------

    @grpc_method
    async def SendMessage(self, request: pb.SendMessageRequest, context: Ctx) -> pb.SendMessageResponse:
        outcome = await self.app.send.send_one(request, peer_host(context))
        return outcome.to_single()

    @grpc_method
    async def SendMessageBatch(
        self, request: pb.SendMessageBatchRequest, context: Ctx
    ) -> pb.SendMessageBatchResponse:
        outcome = await self.app.send.send_batch(request, peer_host(context))
        return outcome.to_batch(request.request_id)

    async def SendMessageStream(
        self, request_iterator: AsyncIterator[pb.SendMessageBatchRequest],
        context: Ctx,
    ) -> AsyncIterator[pb.SendMessageBatchResponse]:
        """Each batch is appended as soon as it arrives (so batches of one stream share group
        commits); replies are written in request order, and the next requests are read while a
        reply is written. A request error (bad topic, access denied, ...) ends the stream with
        that error's status after the replies before it."""
        born_host = peer_host(context)
        send = self.app.send
        if not send.waits_for_durability:
            # Nothing to wait for: store and answer each batch in turn while a reader takes the
            # next requests off the stream.
            ahead: asyncio.Queue[pb.SendMessageBatchRequest | None] = asyncio.Queue(STREAM_WINDOW)

            async def read_ahead() -> None:
                try:
                    async for request in request_iterator:
                        await ahead.put(request)
                except Exception:
                    await ahead.put(None)  # (the batches before it are answered, then it is raised)
                    raise
                await ahead.put(None)

            reading = asyncio.create_task(read_ahead())
            try:
                while (batch := await ahead.get()) is not None:
                    try:
                        outcome = await send.send_batch(batch, born_host)
                    except ServiceError as exc:
                        await context.abort(exc.code, f"request {batch.request_id}: {exc}")
                    yield outcome.to_batch(batch.request_id)
                await reading  # (a failed read: its error)
            finally:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reading
            return
        pending: asyncio.Queue[asyncio.Task[SendOutcome] | None] = asyncio.Queue(STREAM_WINDOW)
        ids: asyncio.Queue[int] = asyncio.Queue()

        async def reader() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.ensure_future(send.send_batch(request, born_host))
                    ids.put_nowait(request.request_id)
                    await pending.put(task)
            finally:
                await pending.put(None)

        reading = asyncio.create_task(reader())
        try:
            while True:
                task = await pending.get()
                if task is None:
                    break
                request_id = ids.get_nowait()
                try:
                    outcome = await task
                except ServiceError as exc:
                    await context.abort(exc.code, f"request {request_id}: {exc}")
                yield outcome.to_batch(request_id)
            await reading
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
            while not pending.empty():
                leftover = pending.get_nowait()
                if leftover is not None:
                    leftover.cancel()

    # -- consume ----------------------------------------------------------------------------

    @grpc_method
    async def PullMessage(self, request: pb.PullMessageRequest, context: Ctx) -> pb.PullMessageResponse:
        query = self.app.pull.query(request)
        return await self.app.pull.pull(query, max(0, request.suspend_timeout_ms) / 1000, self.app.stopping)

    async def PullMessageStream(
        self, request: pb.PullMessageRequest, context: Ctx
    ) -> AsyncIterator[pb.PullMessageResponse]:
        pull = self.app.pull
        try:
            query = pull.query(request, stream=True)
        except ServiceError as exc:
            await context.abort(exc.code, str(exc))
        keepalive_s = request.suspend_timeout_ms / 1000 if request.suspend_timeout_ms > 0 else 30.0
        offset = query.offset
        while not self.app.stopping():
            reply = await pull.pull(query.at(offset), keepalive_s, self.app.stopping)
            if reply.status == pb.OFFSET_ILLEGAL:
                yield reply
                return
            offset = reply.next_begin_offset
            if reply.status == pb.NO_MATCHED_MSG:
                continue
            if reply.status == pb.NO_NEW_MSG and request.suspend_timeout_ms <= 0:
                continue
            yield reply

    @grpc_method
    async def GetMinOffset(self, request: pb.QueueRequest, context: Ctx) -> pb.OffsetResponse:
        self._queue(request.topic, request.queue_id)
        return pb.OffsetResponse(offset=self.app.store.min_queue_offset(request.topic, request.queue_id))

    @grpc_method
    async def GetMaxOffset(self, request: pb.QueueRequest, context: Ctx) -> pb.OffsetResponse:
        self._queue(request.topic, request.queue_id)
        return pb.OffsetResponse(offset=self.app.store.max_queue_offset(request.topic, request.queue_id))

    @grpc_method
    async def SearchOffset(self, request: pb.SearchOffsetRequest, context: Ctx) -> pb.OffsetResponse:
        self._queue(request.topic, request.queue_id)
        if request.timestamp_ms < 0:
            raise InvalidArgumentError(f"timestamp_ms must be >= 0, got {request.timestamp_ms}")
        offset = self.app.store.queue_offset_by_time(request.topic, request.queue_id, request.timestamp_ms)
        return pb.OffsetResponse(offset=offset)

    # -- consumer offsets and groups --------------------------------------------------------

    @grpc_method
    async def QueryConsumerOffset(
        self, request: pb.QueryConsumerOffsetRequest, context: Ctx
    ) -> pb.OffsetResponse:
        group = v.validate_group(request.consumer_group)
        self._queue(request.topic, request.queue_id)
        offset = self.app.offsets.query(group, request.topic, request.queue_id)
        if offset is None:
            if group not in self.app.groups and group not in self.app.offsets.groups():
                raise NotFoundError(f"consumer group {group!r} is unknown on broker {self.cfg.broker_name}")
            raise NotFoundError(
                f"consumer group {group!r} has no committed offset for topic {request.topic!r} "
                f"queue {request.queue_id}")
        return pb.OffsetResponse(offset=offset)

    @grpc_method
    async def UpdateConsumerOffset(
        self, request: pb.UpdateConsumerOffsetRequest, context: Ctx
    ) -> pb.UpdateConsumerOffsetResponse:
        group = v.validate_group(request.consumer_group)
        self._queue(request.topic, request.queue_id)
        v.validate_offset(request.offset, "consumer offset")
        self.app.ensure_group(group)
        if request.HasField("reset_generation") and self.app.consumers.stale_commit(
                group, request.topic, request.reset_generation):
            log.debug("commit from before an offset reset ignored", extra={
                "group": group, "topic": request.topic, "queue_id": request.queue_id})
            return pb.UpdateConsumerOffsetResponse()
        self.app.offsets.commit(group, request.topic, request.queue_id, request.offset)
        return pb.UpdateConsumerOffsetResponse()

    @grpc_method
    async def ConsumerHeartbeat(
        self, request: pb.ConsumerHeartbeatRequest, context: Ctx
    ) -> pb.ConsumerHeartbeatResponse:
        group = v.validate_group(request.consumer_group)
        if not request.client_id:
            raise InvalidArgumentError("client_id must not be empty")
        subs: dict[str, str] = {}
        for sub in request.subscriptions:
            v.validate_topic(sub.topic)
            v.parse_tag_expression(sub.expression)
            subs[sub.topic] = sub.expression or "*"
        self.app.ensure_group(group)
        if RETRY_PREFIX + group in subs:
            self.app.ensure_retry_topic(group)
        host, port = peer_host(context)
        self.app.consumers.heartbeat(group, request.client_id, subs, addr=f"{host}:{port}" if port else host,
                                     language=request.language, version=request.version)
        return pb.ConsumerHeartbeatResponse(reset_generations=self.app.consumers.reset_generations(group))

    @grpc_method
    async def UnregisterConsumer(
        self, request: pb.UnregisterConsumerRequest, context: Ctx
    ) -> pb.UnregisterConsumerResponse:
        group = v.validate_group(request.consumer_group)
        if not self.app.consumers.unregister(group, request.client_id):
            raise NotFoundError(f"client {request.client_id!r} is not a member of consumer group {group!r}")
        return pb.UnregisterConsumerResponse()

    @grpc_method
    async def GetConsumerList(
        self, request: pb.GetConsumerListRequest, context: Ctx
    ) -> pb.GetConsumerListResponse:
        group = v.validate_group(request.consumer_group)
        members = self.app.consumers.members(group)
        if not members:
            raise NotFoundError(
                f"consumer group {group!r} has no live member on broker {self.cfg.broker_name}")
        return pb.GetConsumerListResponse(client_ids=members)

    # -- topic admin ------------------------------------------------------------------------

    @staticmethod
    def _topic_to_create(config: common_pb2.TopicConfig) -> TopicConfig:
        tc = TopicConfig.from_proto(config)
        if tc.perm == 0:
            tc = dataclasses.replace(tc, perm=v.PERM_READ | v.PERM_WRITE)
        if tc.topic_name in v.SYSTEM_TOPICS:
            raise InvalidArgumentError(f"topic {tc.topic_name!r} is a system topic")
        return tc.validated()

    @grpc_method
    async def CreateTopic(self, request: pb.CreateTopicRequest, context: Ctx) -> pb.TopicResponse:
        self._require_master("topic admin")
        if not request.HasField("topic_config"):
            raise InvalidArgumentError("topic_config is required")
        tc = self._topic_to_create(request.topic_config)
        self.app.topics.put(tc)
        await self.app.topics.persist_if_dirty()
        log.info("topic created or updated", extra={
            "topic": tc.topic_name, "read_queues": tc.read_queue_nums, "write_queues": tc.write_queue_nums,
            "perm": v.perm_to_string(tc.perm)})
        return pb.TopicResponse(topic_config=tc.to_proto())

    @grpc_method
    async def CreateTopics(self, request: pb.CreateTopicsRequest, context: Ctx) -> pb.CreateTopicsResponse:
        self._require_master("topic admin")
        configs: dict[str, TopicConfig] = {}
        for i, config in enumerate(request.topic_configs):
            try:
                tc = self._topic_to_create(config)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"topic_configs[{i}]: {exc}") from None
            configs[tc.topic_name] = tc  # a name given twice: the last config wins
        for tc in configs.values():
            self.app.topics.put(tc)
        await self.app.topics.persist_if_dirty()
        log.info("topics created or updated", extra={"count": len(configs)})
        return pb.CreateTopicsResponse(topic_configs=[tc.to_proto() for tc in configs.values()])

    @grpc_method
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Ctx) -> pb.DeleteTopicResponse:
        self._require_master("topic admin")
        topic = v.validate_topic(request.topic)
        if topic in v.SYSTEM_TOPICS:
            raise InvalidArgumentError(f"topic {topic!r} is a system topic and cannot be deleted")
        await self.app.delete_topic(topic)
        return pb.DeleteTopicResponse()

    @grpc_method
    async def GetTopic(self, request: pb.GetTopicRequest, context: Ctx) -> pb.TopicResponse:
        return pb.TopicResponse(topic_config=self._topic(request.topic).to_proto())

    @grpc_method
    async def ListTopics(self, request: pb.ListTopicsRequest, context: Ctx) -> pb.ListTopicsResponse:
        return pb.ListTopicsResponse(topic_configs=[t.to_proto() for t in self.app.topics.all()])

    # -- subscription group admin -----------------------------------------------------------

    @grpc_method
    async def CreateSubscriptionGroup(
        self, request: pb.CreateSubscriptionGroupRequest, context: Ctx
    ) -> pb.SubscriptionGroupResponse:
        self._require_master("subscription group admin")
        if not request.HasField("config"):
            raise InvalidArgumentError("config is required")
        config = self.app.groups.put(SubscriptionGroupConfig.from_proto(request.config))
        await self.app.groups.persist_if_dirty()
        log.info("subscription group created or updated", extra={"group": config.group_name})
        return pb.SubscriptionGroupResponse(config=config.to_proto())

    @grpc_method
    async def DeleteSubscriptionGroup(
        self, request: pb.DeleteSubscriptionGroupRequest, context: Ctx
    ) -> pb.DeleteSubscriptionGroupResponse:
        self._require_master("subscription group admin")
        group = v.validate_group(request.group_name)
        self.app.groups.delete(group)
        await self.app.groups.persist_if_dirty()
        log.info("subscription group deleted", extra={"group": group})
        return pb.DeleteSubscriptionGroupResponse()

    @grpc_method
    async def ListSubscriptionGroups(
        self, request: pb.ListSubscriptionGroupsRequest, context: Ctx
    ) -> pb.ListSubscriptionGroupsResponse:
        return pb.ListSubscriptionGroupsResponse(configs=[g.to_proto() for g in self.app.groups.all()])

    # -- status -----------------------------------------------------------------------------

    @grpc_method
    async def GetBrokerStatus(self, request: pb.GetBrokerStatusRequest, context: Ctx) -> pb.BrokerStatus:
        app = self.app
        status = pb.BrokerStatus(
            cluster_name=self.cfg.broker_cluster_name, broker_name=self.cfg.broker_name,
            broker_id=self.cfg.broker_id, broker_role=self.cfg.broker_role.name,
            flush_disk_type=app.store_config.flush_disk_type.name, broker_addr=app.identity.broker_addr,
            ha_server_addr=app.identity.ha_server_addr, commit_log_min_offset=app.store.min_offset,
            commit_log_max_offset=app.store.max_offset, topic_count=len(app.topics),
            put_total=app.metrics.put_total, get_total=app.metrics.get_total,
            start_timestamp=app.start_timestamp, master_addr=app.master_addr, version=VERSION,
            broker_permission=app.broker_config.broker_permission,
        )
        status.timer_pending = app.timers.pending
        status.transaction_half_pending = app.transactions.pending
        return status

    @grpc_method
    async def PopMessages(self, request: pb.PopMessagesRequest, context: Ctx) -> pb.PopMessagesResponse:
        return await pop_batched.pop(self.app.pop, request, self.app.stopping)

    @grpc_method
    async def AckMessages(self, request: pb.AckMessagesRequest, context: Ctx) -> pb.AckMessagesResponse:
        return pop_batched.ack(self.app.pop, request)

    async def PopStream(self, request_iterator: AsyncIterator[pb.PopStreamRequest],
                        context: Ctx) -> AsyncIterator[pb.PopStreamResponse]:
        async for reply in pop_batched.serve_stream(self.app.pop, request_iterator, self.app.stopping):
            yield reply

    @grpc_method
    async def ChangeInvisibleTime(self, request: pb.ChangeInvisibleTimeRequest,
                                  context: Ctx) -> pb.ChangeInvisibleTimeResponse:
        return pop_batched.change_invisible(self.app.pop, request)

    @grpc_method
    async def GetHAStatus(self, request: pb.GetHAStatusRequest, context: Ctx) -> pb.HAStatus:
        if self.app.ha is not None:
            return self.app.ha.status()
        return pb.HAStatus(broker_role=self.cfg.broker_role.name,
                                   commit_log_max_offset=self.app.store.max_offset,
                                   master_ha_addr=self.app.master_ha_addr)


class BrokerMetadataServicer(broker_pb2_grpc.BrokerMetadataServicer):  # type: ignore[misc]
    """The four tables a slave copies from its master."""

    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    @grpc_method
    async def GetAllTopicConfig(
        self, request: pb.GetAllTopicConfigRequest, context: Ctx
    ) -> pb.TopicConfigTable:
        topics = self.app.topics
        return pb.TopicConfigTable(data_version=topics.data_version.to_proto(),
                                           topic_configs=[t.to_proto() for t in topics.all()])

    @grpc_method
    async def GetAllConsumerOffsets(
        self, request: pb.GetAllConsumerOffsetsRequest, context: Ctx
    ) -> pb.ConsumerOffsetTable:
        offsets = self.app.offsets
        return pb.ConsumerOffsetTable(
            data_version=offsets.data_version.to_proto(),
            offsets=[pb.ConsumerOffsetEntry(consumer_group=g, topic=t, queue_id=q, offset=o)
                     for g, t, q, o in offsets.entries()],
            reset_generations=[pb.ResetGenerationEntry(consumer_group=g, topic=t, generation=gen)
                               for g, t, gen in offsets.reset_entries()])

    @grpc_method
    async def GetAllDelayOffsets(
        self, request: pb.GetAllDelayOffsetsRequest, context: Ctx
    ) -> pb.DelayOffsetTable:
        delay = self.app.delay_offsets
        return pb.DelayOffsetTable(data_version=delay.data_version.to_proto(), offsets=delay.all())

    @grpc_method
    async def GetAllSubscriptionGroups(
        self, request: pb.GetAllSubscriptionGroupsRequest, context: Ctx
    ) -> pb.SubscriptionGroupTable:
        groups = self.app.groups
        return pb.SubscriptionGroupTable(data_version=groups.data_version.to_proto(),
                                                 configs=[g.to_proto() for g in groups.all()])

    @grpc_method
    async def GetAclTable(self, request: pb.GetAclTableRequest, context: Ctx) -> common_pb2.AclTable:
        return self.app.acl_table.to_proto()


def timestamp_ms() -> int:
    return int(time.time() * 1000)

"""Slave metadata sync (RocketMQ's SlaveSynchronize): every ``slaveSyncInterval`` (first after
3 s) a slave pulls the master's topic config, consumer offsets (with their offset-reset
generations), delay offsets and subscription groups over gRPC (the BrokerMetadata service),
replaces each local table whose DataVersion differs from the master's, and persists the replaced
tables.

The master's gRPC address comes from the NameServer (the registrar's ``on_master`` callback);
a change of address reopens the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

import grpc

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import signing_interceptors
from pocketmq.wire.tls import ClientTls, aio_channel
from services.broker.metadata.acl import AclTableManager
from services.broker.metadata.base import DataVersion, MetadataTable
from services.broker.metadata.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from services.broker.metadata.offsets import ConsumerOffsetManager, DelayOffsetManager
from services.broker.metadata.topics import TopicConfig, TopicConfigManager
from services.common.acl.protoconv import user_from_proto
from services.common.errors import ServiceError
from services.common.grpcserver import CHANNEL_OPTIONS

log = logging.getLogger(__name__)

FIRST_SYNC_DELAY_S = 3.0


@dataclasses.dataclass
class SyncResult:
    """Which tables one round replaced (by file name); ``error`` when the round failed."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    error: str = ""


class SlaveMetadataSync:
    def __init__(
        self,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsetManager,
        groups: SubscriptionGroupManager,
        *,
        interval_s: float,
        first_delay_s: float = FIRST_SYNC_DELAY_S,
        timeout_s: float = 3.0,
        on_round: Callable[[SyncResult], None] | None = None,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
        acl: AclTableManager | None = None,
    ) -> None:
        """``tls``: the master's gRPC port speaks TLS (None = plaintext)."""
        self.tls = tls
        self.acl = acl
        #: Signs the sync calls (the master's ACL lets Broker users read its tables).
        self._interceptors = signing_interceptors(credentials)
        self.topics = topics
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.groups = groups
        self.interval_s = interval_s
        self.first_delay_s = min(first_delay_s, interval_s)
        self.timeout_s = timeout_s
        self.on_round = on_round
        self._master_addr = ""
        self._channel: grpc.aio.Channel | None = None
        self._channel_addr = ""
        self._stub: broker_pb2_grpc.BrokerMetadataStub | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        #: Completed rounds (successful or not) and the latest result.
        self.rounds = 0
        self.last_result: SyncResult | None = None

    @property
    def master_addr(self) -> str:
        return self._master_addr

    def set_master(self, master_addr: str) -> None:
        """The master's gRPC address changed (registrar callback)."""
        if master_addr != self._master_addr:
            log.info("metadata sync master", extra={"master_addr": master_addr or "-",
                                                    "previous": self._master_addr or "-"})
            first = not self._master_addr
            self._master_addr = master_addr
            if first:
                self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slave-metadata-sync")

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_channel()

    async def _close_channel(self) -> None:
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()
        self._channel = None
        self._stub = None
        self._channel_addr = ""

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _run(self) -> None:
        await self._sleep(self.first_delay_s)
        while not self._stop.is_set():
            if not self._master_addr:
                # Wait for the registrar to learn the master (checked again every interval).
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
                continue
            result = await self.sync_once()
            if self.on_round is not None:
                self.on_round(result)
            await self._sleep(self.interval_s)

    async def sync_once(self) -> SyncResult:
        """One round: fetch the four tables and replace the ones that changed."""
        result = SyncResult()
        addr = self._master_addr
        if not addr:
            result.error = "master address unknown"
            return result
        if addr != self._channel_addr:
            await self._close_channel()
            self._channel = aio_channel(addr, CHANNEL_OPTIONS, self.tls, self._interceptors)
            self._stub = broker_pb2_grpc.BrokerMetadataStub(self._channel)
            self._channel_addr = addr
        stub = self._stub
        assert stub is not None
        try:
            topic_t, offset_t, delay_t, group_t = await asyncio.gather(
                stub.GetAllTopicConfig(broker_pb2.GetAllTopicConfigRequest(), timeout=self.timeout_s),
                stub.GetAllConsumerOffsets(broker_pb2.GetAllConsumerOffsetsRequest(), timeout=self.timeout_s),
                stub.GetAllDelayOffsets(broker_pb2.GetAllDelayOffsetsRequest(), timeout=self.timeout_s),
                stub.GetAllSubscriptionGroups(
                    broker_pb2.GetAllSubscriptionGroupsRequest(), timeout=self.timeout_s),
            )
        except grpc.aio.AioRpcError as exc:
            result.error = f"{exc.code().name}: {exc.details()}"
            log.warning("metadata sync from master failed",
                        extra={"master_addr": addr, "error": result.error})
            self._finish(result)
            return result

        def differs(table: MetadataTable, version: DataVersion) -> bool:
            return table.data_version != version

        version = DataVersion.from_proto(topic_t.data_version)
        if differs(self.topics, version):
            self.topics.replace_all([TopicConfig.from_proto(t) for t in topic_t.topic_configs], version)
            result.replaced.append(self.topics.file_name)
        version = DataVersion.from_proto(offset_t.data_version)
        if differs(self.offsets, version):
            self.offsets.replace_all(
                [(e.consumer_group, e.topic, e.queue_id, e.offset) for e in offset_t.offsets], version,
                [(e.consumer_group, e.topic, e.generation) for e in offset_t.reset_generations])
            result.replaced.append(self.offsets.file_name)
        version = DataVersion.from_proto(delay_t.data_version)
        if differs(self.delay_offsets, version):
            self.delay_offsets.replace_all(dict(delay_t.offsets), version)
            result.replaced.append(self.delay_offsets.file_name)
        version = DataVersion.from_proto(group_t.data_version)
        if differs(self.groups, version):
            self.groups.replace_all([SubscriptionGroupConfig.from_proto(g) for g in group_t.configs], version)
            result.replaced.append(self.groups.file_name)
        if self.acl is not None:
            await self._sync_acl(stub, result)
        for table in (self.topics, self.offsets, self.delay_offsets, self.groups, self.acl):
            if table is None:
                continue
            if table.file_name in result.replaced:
                try:
                    await table.persist_async()
                except OSError as exc:
                    log.error("cannot persist synced metadata", extra={"file": str(table.path),
                                                                       "error": str(exc)})
        if result.replaced:
            log.info("metadata synced from master", extra={"master_addr": addr,
                                                           "replaced": ",".join(result.replaced)})
        self._finish(result)
        return result

    async def _sync_acl(self, stub: broker_pb2_grpc.BrokerMetadataStub, result: SyncResult) -> None:
        """The ACL table, when the master has one (a master without GetAclTable is skipped)."""
        assert self.acl is not None
        try:
            acl_t = await stub.GetAclTable(broker_pb2.GetAclTableRequest(), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                log.warning("ACL table sync from master failed", extra={"error": exc.code().name})
            return
        version = DataVersion.from_proto(acl_t.data_version)
        if self.acl.data_version != version:
            try:
                users = [user_from_proto(u) for u in acl_t.users]
            except ServiceError as exc:
                log.error("ACL table of the master not applied", extra={"error": str(exc)})
                return
            self.acl.replace_all(users, version)
            result.replaced.append(self.acl.file_name)

    def _finish(self, result: SyncResult) -> None:
        self.rounds += 1
        self.last_result = result

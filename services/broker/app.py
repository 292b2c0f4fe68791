"""Wiring of one broker process: store, metadata tables, produce/pull services, delayed delivery,
slave metadata sync, NameServer registration, gRPC and metrics servers, graceful shutdown.

Replication (:mod:`services.broker.replication`) plugs in through ``ha_factory``: the app owns an optional
:class:`ReplicationService`; SYNC_MASTER sends wait for slaves through
:meth:`BrokerApp.wait_replicated` only, and the NameServer's master address reaches it through
:meth:`ReplicationService.set_master`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from services.broker import k8s_labels
from services.broker import validation as v
from services.broker.api import BrokerMetadataServicer, BrokerServicer
from services.broker.config import BrokerConfig
from services.broker.consumers import ConsumerManager
from services.broker.delay import DelayDeliveryService
from services.broker.longpoll import QueueNotifier
from services.broker.metadata import (
    ConsumerOffsetManager,
    DataVersion,
    DelayOffsetManager,
    MetadataTable,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.metadata.acl import AclTableManager
from services.broker.metadata.sync import SlaveMetadataSync, SyncResult
from services.broker.metrics import BrokerMetrics
from services.broker.pop.metrics import PopMetrics
from services.broker.pop.service import PopService, retry_topic, revive_topic
from services.broker.pull import MAX_PULL_BYTES, PullQuery, PullService
from services.broker.query import MessageQueryServicer
from services.broker.registration import BrokerIdentity, BrokerRegistrar, clamp_register_period
from services.broker.send import SendService
from services.broker.storage.config import StoreConfig
from services.broker.storage.status import PutMessageStatus
from services.broker.storage.store import MessageStore
from services.broker.timer.service import TIMER_QUEUES, TimerService
from services.broker.transaction import TransactionService
from services.broker.transaction_api import TransactionsServicer
from services.broker.v2.service import MessagingServicer, add_messaging_service
from services.broker.v2.status import SERVICE_NAME as V2_SERVICE
from services.common.acl.setup import build_interceptor
from services.common.errors import NotFoundError
from services.common.grpcserver import GrpcServer, start_grpc_server
from services.common.metrics import MetricsServer

log = logging.getLogger(__name__)

BROKER_SERVICES = (
    broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name,
    broker_pb2.DESCRIPTOR.services_by_name["BrokerMetadata"].full_name,
    V2_SERVICE,
    broker_pb2.DESCRIPTOR.services_by_name["Transactions"].full_name,
    broker_pb2.DESCRIPTOR.services_by_name["MessageQuery"].full_name,
)
#: Topic changes are published to the NameServers after this quiet period (coalescing bursts).
REGISTER_DEBOUNCE_S = 0.2
CONSUMER_SCAN_INTERVAL_S = 5.0


class ControllerView(Protocol):
    """What the app shows of a failover controller (services.broker.controller)."""

    problem: str
    failovers: int

    def sync_state_members(self) -> list[int]: ...


class ReplicationService(Protocol):
    """What the app needs from replication (master: serve slaves; slave: follow the master)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def set_master(self, master_addr: str, master_ha_addr: str) -> None:
        """Slave: the NameServer reported (another) master."""

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> PutMessageStatus:
        """SYNC_MASTER: PUT_OK once a slave acknowledged ``end_offset``; SLAVE_NOT_AVAILABLE
        when no slave is connected or in reach; FLUSH_SLAVE_TIMEOUT after ``timeout_s``."""

    def status(self) -> broker_pb2.HAStatus: ...


HAFactory = Callable[["BrokerApp"], ReplicationService]


def tls_address(addr: str, offset: int) -> str:
    """A broker's TLS address from its plain one: brokers of a cluster share the offset between
    listenPort and tlsListenPort (routes answered over TLS point at TLS ports)."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) + offset}" if port.isdigit() else addr


class BrokerApp:
    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: StoreConfig,
        *,
        ha_factory: HAFactory | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.broker_config = cfg = broker_config
        self.store_config = store_config
        self.ha_factory = ha_factory
        ip = cfg.advertised_ip
        metrics_port = cfg.effective_metrics_port
        self.identity = BrokerIdentity(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_id=cfg.broker_id,
            broker_addr=cfg.broker_addr, ha_server_addr=cfg.ha_server_addr,
            metrics_addr=f"{ip}:{metrics_port}" if metrics_port > 0 else "",
            broker_role=cfg.broker_role.name,
        )
        #: The certificate of the gRPC and metrics ports (files checked now: a bad path or a key
        #: that does not match fails at start naming the key); None without tlsEnable.
        self.server_tls = cfg.server_tls()
        #: TLS of this broker's own channels (NameServers, the master's metadata API).
        self.client_tls = cfg.client_tls()
        self.config_dir = os.path.join(store_config.store_path_root_dir, "config")
        self.topics = TopicConfigManager(self.config_dir, default_queue_nums=cfg.default_topic_queue_nums)
        self.offsets = ConsumerOffsetManager(self.config_dir)
        self.delay_offsets = DelayOffsetManager(self.config_dir)
        self.groups = SubscriptionGroupManager(self.config_dir)
        #: Users managed with `pocketmq acl` (used when aclEnable=true).
        self.acl_table = AclTableManager(self.config_dir)
        self.tables: tuple[MetadataTable, ...] = (self.topics, self.offsets, self.delay_offsets, self.groups,
                                                  self.acl_table)
        self.store = MessageStore(store_config, store_host=(ip, cfg.listen_port))
        self.metrics = BrokerMetrics(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, registry)
        self.consumers = ConsumerManager(cfg.consumer_channel_expired_time / 1000, self.offsets)
        self.ha: ReplicationService | None = None
        #: Fencing under a failover controller: while it returns True this master must not
        #: acknowledge a write (its leader lease may be about to expire).
        self.write_fence: Callable[[], bool] | None = None
        #: The failover controller running this broker (None: static roles).
        self.controller: ControllerView | None = None
        self.start_timestamp = 0
        self._stopping = False
        self._master_addr = ""
        self._master_ha_addr = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._register_task: asyncio.Task[None] | None = None
        #: Topics changed while _register_task was already publishing: it goes round again.
        self._topics_dirty = False
        self._grpc: GrpcServer | None = None
        self._metrics_server: MetricsServer | None = None
        self._registrar: BrokerRegistrar | None = None
        self._delay: DelayDeliveryService | None = None
        self._sync: SlaveMetadataSync | None = None
        self._store_started = False
        # Created in start() (they need the running loop).
        self.notifier: QueueNotifier
        self.send: SendService
        self.pull: PullService
        #: The RocketMQ 5 API (apache.rocketmq.v2.MessagingService).
        self.v2: MessagingServicer | None = None
        self.timers: TimerService
        self.transactions: TransactionService
        #: POP consumption (RocketMQ 5 consumers): receipts, acks, retries, dead letters.
        self.pop: PopService

    # -- properties used by the API -----------------------------------------------------------

    @property
    def master_addr(self) -> str:
        """This broker's address on a master; the master's as learned from the NameServer on a
        slave ("" until known)."""
        return self.identity.broker_addr if self.broker_config.is_master else self._master_addr

    @property
    def master_ha_addr(self) -> str:
        return self.identity.ha_server_addr if self.broker_config.is_master else self._master_ha_addr

    @property
    def grpc_port(self) -> int:
        return self._grpc.port if self._grpc is not None else 0

    @property
    def metrics_port(self) -> int:
        return self._metrics_server.port if self._metrics_server is not None else 0

    @property
    def slave_sync(self) -> SlaveMetadataSync | None:
        return self._sync

    def stopping(self) -> bool:
        return self._stopping

    # -- start ------------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.broker_config
        loop = asyncio.get_running_loop()
        for table in self.tables:
            if table.load():
                log.info("metadata loaded", extra={"file": str(table.path),
                                                   "version": table.data_version.counter})
        if cfg.is_master:
            self._ensure_system_topics()
            await asyncio.gather(*(t.persist_if_dirty() for t in self.tables))
        await asyncio.to_thread(self.store.start)
        self._store_started = True
        self.start_timestamp = int(time.time() * 1000)

        self.notifier = QueueNotifier(loop, self.store.max_queue_offset)
        if not cfg.is_master:
            # Replicated data is dispatched by the store's reput thread, outside the send path:
            # wake pulls by max queue offset once it is readable.
            self.store.add_dispatch_listener(lambda _offset: self.notifier.poke())
        self.send = SendService(
            cfg, self.store_config, self.store, self.notifier, self.topics, self.metrics,
            store_host=self.store.store_host, master_addr=lambda: self.master_addr,
            replication_wait=self.wait_replicated,
        )
        self.pull = PullService(cfg, self.store_config, self.store, self.topics, self.groups, self.offsets,
                                self.notifier, self.metrics, self.ensure_group, resets=self.consumers)
        self.metrics.add_gauges(self._gauges)
        self.pop = PopService(
            store=self.store, topics=self.topics, offsets=self.offsets, notifier=self.notifier,
            append=self.send.append, group_config=self.ensure_group, cluster=cfg.broker_cluster_name,
            broker_name=cfg.broker_name, metrics=PopMetrics(self.metrics.registry, [
                ("cluster", cfg.broker_cluster_name), ("broker", cfg.broker_name),
                ("broker_id", str(cfg.broker_id))]),
            read_raw=self._read_raw, auto_renew_ms=cfg.default_invisible_time_mills,
            renew_ahead_ms=cfg.renew_ahead_time_millis, renew_max_ms=cfg.renew_max_time_millis)
        await self._load_timers_and_transactions()

        if self.ha_factory is not None:
            self.ha = self.ha_factory(self)
            await self.ha.start()
        self.timers.start()
        self.transactions.start()
        if cfg.is_master:
            self._delay = DelayDeliveryService(self.store, self.delay_offsets, cfg.delay_levels_ms,
                                               self.notifier, self.send.deliver, self.metrics)
            self._delay.start()
        else:
            self._sync = SlaveMetadataSync(
                self.topics, self.offsets, self.delay_offsets, self.groups,
                interval_s=cfg.slave_sync_interval / 1000, on_round=self._on_sync_round, tls=self.client_tls,
                credentials=cfg.inner_credentials, acl=self.acl_table)
            self._sync.start()

        # Permissive TLS: routes answered on the extra TLS listener point at the brokers' TLS
        # listeners. Enforcing: every registered address already is a TLS port.
        tls_offset = cfg.effective_tls_port - cfg.listen_port
        self.v2 = v2 = MessagingServicer(self, tls_address_map=None if cfg.tls_main_port
                                         else lambda addr: tls_address(addr, tls_offset))
        v2.start()
        # POP state is role-driven: a master (also a slave restarted as master on its store)
        # rebuilds the in-flight table from the replicated revive topic and revives.
        await self.pop.set_role(cfg.is_master)

        def register(server: object) -> None:
            broker_pb2_grpc.add_BrokerServicer_to_server(BrokerServicer(self), server)
            broker_pb2_grpc.add_BrokerMetadataServicer_to_server(BrokerMetadataServicer(self), server)
            add_messaging_service(v2, server)
            broker_pb2_grpc.add_TransactionsServicer_to_server(TransactionsServicer(self), server)
            broker_pb2_grpc.add_MessageQueryServicer_to_server(MessageQueryServicer(self), server)

        address = f"{cfg.listen_host}:{cfg.listen_port}"
        tls = self.server_tls
        tls_listener = (f"{cfg.listen_host}:{cfg.effective_tls_port}"
                        if tls is not None and not cfg.tls_main_port else None)
        health_listener = f"{cfg.listen_host}:{cfg.health_listen_port}" if cfg.health_listen_port else None
        acl = build_interceptor(cfg.acl_enable, cfg.acl_config_file, cfg.acl_signature_window_mills,
                                cfg.broker_cluster_name, self.metrics.registry, table=self.acl_table.document)
        if acl is not None:
            self.acl_table.listeners.append(acl.authenticator.store.table_changed)
            # Publish a changed ACL table to the NameServers soon (with the topics).
            self.acl_table.listeners.append(self._topics_changed)
        self._grpc = await start_grpc_server(address, register, BROKER_SERVICES, tls, tls_listener,
                                             health_listener, interceptors=[acl] if acl is not None else ())
        if cfg.effective_metrics_port > 0:
            self._metrics_server = MetricsServer(
                self.metrics.registry, cfg.listen_host, cfg.effective_metrics_port, tls)

        self._tasks.append(asyncio.create_task(self._persist_loop(), name="metadata-persist"))
        self._tasks.append(asyncio.create_task(self._consumer_scan_loop(), name="consumer-expiry"))
        if cfg.namesrv_addrs:
            self._registrar = BrokerRegistrar(
                cfg.namesrv_addrs, self.identity, self._topic_snapshot,
                period_s=clamp_register_period(cfg.register_name_server_period),
                timeout_s=cfg.register_broker_timeout_mills / 1000, on_master=self._on_master,
                tls=self.client_tls, credentials=cfg.inner_credentials, acl_snapshot=self._acl_snapshot,
                topic_delta=self._topic_delta)
            await self._registrar.start()
        self.topics.add_listener(self._topics_changed)
        # In Kubernetes, show the role on the pod (`kubectl get pods -L pocketmq.io/role`); outside
        # a cluster this logs one line and does nothing. Never raises.
        self._tasks.append(asyncio.create_task(self._label_pod(), name="k8s-self-label"))
        log.info("broker started", extra={
            "cluster": cfg.broker_cluster_name, "broker": cfg.broker_name, "broker_id": cfg.broker_id,
            "role": cfg.broker_role.name, "flush": self.store_config.flush_disk_type.name,
            "addr": self.identity.broker_addr, "store": self.store_config.store_path_root_dir,
            "max_offset": self.store.max_offset, "topics": len(self.topics)})

    def _read_raw(self, topic: str, queue_id: int, offset: int, max_count: int) -> tuple[bytes, int, int]:
        """Records of a queue as stored, for the POP service's batched pops."""
        result = self.pull.get_raw(PullQuery("", topic, queue_id, offset, max_count, MAX_PULL_BYTES,
                                             v.MATCH_ALL, True), offset)
        return result.records, result.found, result.next_begin_offset

    async def _load_timers_and_transactions(self) -> None:
        """Build the timer and transaction indexes (snapshot + the system queues since)."""
        cfg = self.broker_config
        root = Path(self.store_config.store_path_root_dir)
        self.timers = TimerService(
            self.store, root / "timer" / "snapshot", append=self.send.append, notifier=self.notifier,
            master=cfg.is_master, flush_interval_s=cfg.timer_flush_interval_ms / 1000,
            deliver_batch=cfg.timer_deliver_batch, store_host=self.store.store_host,
            registry_labels=(self.metrics.registry, self.metrics.ident))
        self.transactions = TransactionService(
            self.store, root / "transaction" / "snapshot", append=self.send.append, notifier=self.notifier,
            master=cfg.is_master, check_writable=self.send.check_writable_broker,
            msg_id=lambda offset: self.send.msg_ids([offset])[0], timeout_ms=cfg.transaction_time_out,
            check_interval_ms=cfg.transaction_check_interval, check_max=cfg.transaction_check_max,
            store_host=self.store.store_host)
        await asyncio.to_thread(self.timers.load)
        await asyncio.to_thread(self.transactions.load)

    async def _label_pod(self) -> None:
        # under a controller, its one labeller writes the label of the newest role (an app of the
        # previous role may still have a patch in flight); the chart's master Service selects it
        want = getattr(self.controller, "want_pod_label", None)
        if want is not None:
            want(self.broker_config.broker_role, self.broker_config.broker_id)
            return
        await k8s_labels.label_own_pod(self.broker_config.broker_role, self.broker_config.broker_id)

    def _ensure_system_topics(self) -> None:
        levels = len(self.broker_config.delay_levels_ms)
        self.topics.ensure_system_topic(TopicConfig(v.SCHEDULE_TOPIC, levels, levels))
        if self.broker_config.auto_create_topic_enable:
            n = self.broker_config.default_topic_queue_nums
            self.topics.ensure_system_topic(
                TopicConfig(v.AUTO_CREATE_TOPIC_KEY, n, n, v.PERM_ALL))
        self.topics.ensure_system_topic(TopicConfig(v.TIMER_TOPIC, TIMER_QUEUES, TIMER_QUEUES))
        self.topics.ensure_system_topic(TopicConfig(v.TRANS_HALF_TOPIC, 1, 1))
        self.topics.ensure_system_topic(TopicConfig(v.TRANS_OP_HALF_TOPIC, 1, 1))
        revive = revive_topic(self.broker_config.broker_cluster_name)
        self.topics.ensure_system_topic(TopicConfig(revive, 1, 1))

    # -- stop -------------------------------------------------------------------------------

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new work, let in-flight requests finish (long polls return at
        once; for ``grace_s``, default shutdownGracePeriod), persist metadata, flush and close the
        store, unregister from the NameServers."""
        if self._stopping:
            return
        self._stopping = True
        cfg = self.broker_config
        log.info("broker stopping", extra={"broker": cfg.broker_name, "broker_id": cfg.broker_id})
        if self._delay is not None:
            await self._delay.stop()
        if hasattr(self, "timers"):
            await self.timers.stop()
        if hasattr(self, "transactions"):
            await self.transactions.stop()
        if hasattr(self, "pop"):
            await self.pop.stop()
        if hasattr(self, "notifier"):
            self.notifier.close()
        if self._grpc is not None:
            await self._grpc.stop(cfg.shutdown_grace_period / 1000 if grace_s is None else grace_s)
        if self.v2 is not None:
            await self.v2.stop()
        if self._sync is not None:
            await self._sync.stop()
        for task in [*self._tasks, *([self._register_task] if self._register_task else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.ha is not None:
            await self.ha.stop()
        for table in self.tables:
            try:
                table.persist()
            except OSError as exc:
                log.error("cannot persist metadata", extra={"file": str(table.path), "error": str(exc)})
        if self._store_started:
            await asyncio.to_thread(self.store.shutdown)
        if self._registrar is not None:
            await self._registrar.stop(unregister=True)
        if self._metrics_server is not None:
            self._metrics_server.stop()
        log.info("broker stopped", extra={"broker": cfg.broker_name, "broker_id": cfg.broker_id})

    # -- behaviour shared by the services -----------------------------------------------------

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        """The single point where SYNC_MASTER sends wait for a slave."""
        if self.ha is None:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        status = await self.ha.wait_replicated(end_offset, self.broker_config.slave_timeout / 1000)
        fence = self.write_fence
        if fence is not None and fence():
            return PutMessageStatus.SLAVE_NOT_AVAILABLE  # stored, but this master may be deposed
        return status

    def ensure_retry_topic(self, group: str) -> None:
        """The group's retry topic (RocketMQ creates it when a consumer of the group shows up)."""
        topic = retry_topic(group)
        if self.broker_config.is_master and self.topics.get(topic) is None:
            config = self.ensure_group(group)
            n = max(1, config.retry_queue_nums)
            self.topics.ensure_system_topic(TopicConfig(topic, n, n))
            log.info("retry topic created", extra={"topic": topic})

    def ensure_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config; unknown groups are auto-created (autoCreateSubscriptionGroup,
        masters only: a slave answers with defaults and waits for the master's table)."""
        config = self.groups.get(group)
        if config is not None:
            return config
        if not self.broker_config.auto_create_subscription_group:
            raise NotFoundError(
                f"subscription group {group!r} does not exist on broker {self.broker_config.broker_name} "
                "and autoCreateSubscriptionGroup is false; create it first")
        config = SubscriptionGroupConfig(v.validate_group(group))
        if self.broker_config.is_master:
            self.groups.put(config)
            log.info("subscription group auto-created", extra={"group": group})
        return config

    async def delete_topic(self, topic: str) -> None:
        self.topics.delete(topic)
        queues = await asyncio.to_thread(self.store.delete_topic, topic)
        self.offsets.remove_topic(topic)
        await self.topics.persist_async()
        await self.offsets.persist_if_dirty()
        log.info("topic deleted", extra={"topic": topic, "queues": queues})

    # -- background ---------------------------------------------------------------------------

    async def _persist_loop(self) -> None:
        cfg = self.broker_config
        loop = asyncio.get_running_loop()
        offsets_every = cfg.flush_consumer_offset_interval / 1000
        delay_every = cfg.flush_delay_offset_interval / 1000
        next_offsets = loop.time() + offsets_every
        next_delay = loop.time() + delay_every
        while True:
            await asyncio.sleep(max(0.0, min(next_offsets, next_delay) - loop.time()))
            now = loop.time()
            try:
                await self.topics.persist_if_dirty()
                await self.groups.persist_if_dirty()
                if now >= next_offsets:
                    next_offsets = now + offsets_every
                    await self.offsets.persist_if_dirty()
                if now >= next_delay:
                    next_delay = now + delay_every
                    await self.delay_offsets.persist_if_dirty()
            except OSError as exc:
                log.error("cannot persist metadata", extra={"error": str(exc)})

    async def _consumer_scan_loop(self) -> None:
        interval = min(CONSUMER_SCAN_INTERVAL_S, self.consumers.expiry_s / 2)
        while True:
            await asyncio.sleep(interval)
            self.consumers.scan_expired()

    def _topic_snapshot(self) -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig]]:
        version, topics = self.topics.snapshot()
        return version.to_proto(), self._registered_configs(topics)

    def _topic_delta(self, base: common_pb2.DataVersion,
                     ) -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig], list[str]] | None:
        changes = self.topics.changes_since(DataVersion.from_proto(base))
        if changes is None:
            return None
        version, changed, deleted = changes
        return version.to_proto(), self._registered_configs(changed), deleted

    def _registered_configs(self, topics: list[TopicConfig]) -> list[common_pb2.TopicConfig]:
        configs = [t.to_proto() for t in topics]
        mask = self.broker_config.broker_permission | v.PERM_INHERIT
        if mask != v.PERM_READ | v.PERM_WRITE | v.PERM_INHERIT:
            for config in configs:  # brokerPermission: registered as this broker serves them
                config.perm &= mask
        return configs

    def republish_topics(self) -> None:
        """Register the topics with every NameServer again now (brokerPermission changed)."""
        self.topics.changed()
        self._topics_changed()

    def _acl_snapshot(self) -> common_pb2.AclTable | None:
        """What registrations carry of the ACL table: a master's, when access control is on."""
        cfg = self.broker_config
        return self.acl_table.to_proto() if cfg.acl_enable and cfg.is_master else None

    def _topics_changed(self) -> None:
        """Persist topic changes and publish them to the NameServers soon (coalesced)."""
        if self._stopping:
            return
        self._topics_dirty = True
        if self._register_task is None or self._register_task.done():
            self._register_task = asyncio.get_running_loop().create_task(self._topics_changed_soon())

    async def _topics_changed_soon(self) -> None:
        # Until no change came in meanwhile: one that lands while a registration is on its way
        # (after its table was read) is published by the next round, not 30 s later.
        while self._topics_dirty and not self._stopping:
            await asyncio.sleep(REGISTER_DEBOUNCE_S)
            self._topics_dirty = False
            try:
                await self.topics.persist_if_dirty()
            except OSError as exc:
                log.error("cannot persist topics", extra={"error": str(exc)})
            if self._registrar is not None and not self._stopping and self.broker_config.is_master:
                await self._registrar.register_now(incremental=True)

    def _on_master(self, master_addr: str, master_ha_addr: str) -> None:
        self._master_addr, self._master_ha_addr = master_addr, master_ha_addr
        if self._sync is not None:
            self._sync.set_master(master_addr)
        if self.ha is not None:
            self.ha.set_master(master_addr, master_ha_addr)

    def _on_sync_round(self, result: SyncResult) -> None:
        self.metrics.slave_sync("error" if result.error else ("replaced" if result.replaced else "unchanged"))

    def _gauges(self) -> dict[str, tuple[str, float]]:
        store = self.store
        prefix = "pocketmq_broker_"
        gauges: dict[str, tuple[str, float]] = {
            prefix + "commitlog_max_offset": ("Commit log end offset.", store.max_offset),
            prefix + "commitlog_min_offset": ("Lowest commit log offset still stored.", store.min_offset),
            prefix + "commitlog_flushed_offset": ("Commit log offset on disk.", store.flushed_offset),
            prefix + "topics": ("Topics configured on this broker.", len(self.topics)),
            prefix + "subscription_groups": ("Subscription groups.", len(self.groups)),
            prefix + "consumers_online": ("Live consumer group members.", self.consumers.member_count()),
            prefix + "pulls_suspended": ("Pulls parked waiting for new messages.",
                                         self.pull.parked if hasattr(self, "pull") else 0),
            prefix + "is_master": ("1 on a master, 0 on a slave.", 1 if self.broker_config.is_master else 0),
        }
        if hasattr(self, "timers"):
            gauges[prefix + "timer_pending_messages"] = (
                "Timer messages not yet delivered.", self.timers.pending)
            gauges[prefix + "timer_lag_seconds"] = (
                "How far behind its due time the earliest undelivered timer message is.",
                self.timers.lag_ms() / 1000)
        if hasattr(self, "transactions"):
            gauges[prefix + "transaction_half_pending_messages"] = (
                "Half (transaction) messages neither committed nor rolled back.", self.transactions.pending)
        if store.index is not None:
            gauges[prefix + "index_lag_bytes"] = (
                "Commit log bytes not yet in the message key index.",
                max(0, store.dispatched_offset - store.index.indexed_offset))
        if self._delay is not None:
            gauges["pocketmq_broker_delay_backlog_messages"] = (
                "Delayed messages not yet delivered.", self._delay.backlog(store.max_queue_offset))
        return gauges


async def run_broker(broker_config: BrokerConfig, store_config: StoreConfig, stop: asyncio.Event,
                     ha_factory: HAFactory | None = None) -> None:
    """Start a broker, wait for ``stop``, stop it gracefully (the entry point's main)."""
    app = BrokerApp(broker_config, store_config, ha_factory=ha_factory)
    try:
        await app.start()
        await stop.wait()
    finally:
        await app.stop()

"""The broker's :class:`~services.broker.app.ReplicationService`: an :class:`HAMaster` on masters
(ASYNC_MASTER, SYNC_MASTER), an :class:`HASlave` on slaves, plus metrics and the admin status.

Wired in by the entry point: ``run_broker(..., ha_factory=create_replication_service)``.
SYNC_MASTER semantics (:meth:`BrokerReplication.wait_replicated`) are described in
``docs/replication.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pocketmq.broker.v1 import broker_pb2
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.master import HAMaster
from services.broker.replication.master_settings import MasterSettings
from services.broker.replication.metrics import HAMetrics, MasterSample, SlaveSample, SlaveSeries
from services.broker.replication.slave import HASlave, SlaveSettings
from services.broker.storage.status import PutMessageStatus

if TYPE_CHECKING:
    from services.broker.app import BrokerApp, ReplicationService

__all__ = ["BrokerReplication", "create_replication_service"]


class BrokerReplication:
    def __init__(self, app: BrokerApp) -> None:
        cfg = app.broker_config
        self.role = cfg.broker_role.name
        self.is_master = cfg.is_master
        self.app = app
        self.store = app.store
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.epochs = EpochFile(app.store_config.store_path_root_dir)
        if self.is_master:
            self.master = HAMaster(app.store, MasterSettings.from_config(cfg, app.store_config),
                                   epochs=self.epochs)
            if cfg.all_ack_in_sync_state_set and app.controller is not None:
                # no slave's ack counts until the controller has published the SyncStateSet
                self.master.set_counted(frozenset())
        else:
            self.slave = HASlave(app.store, SlaveSettings.from_config(cfg, app.store_config),
                                 epochs=self.epochs)
        self.metrics = HAMetrics(app.metrics.registry, cfg.broker_cluster_name, cfg.broker_name,
                                 cfg.broker_id, master=self.is_master)

    async def start(self) -> None:
        if self.master is not None:
            if self.epochs.epoch == 0:
                # a static master's first term (epoch 1 from the oldest byte it holds)
                self.epochs.start_epoch(1, self.store.min_offset)
            await self.master.start()
        if self.slave is not None:
            await self.slave.start()
        self.metrics.add_source(self._sample)

    async def stop(self) -> None:
        self.metrics.remove_source()
        if self.master is not None:
            await self.master.stop()
        if self.slave is not None:
            await self.slave.stop()

    def set_master(self, master_addr: str, master_ha_addr: str) -> None:
        if self.slave is not None:
            self.slave.set_master(master_ha_addr)

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> PutMessageStatus:
        master = self.master
        if master is None:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        started = time.perf_counter()
        status = await master.wait_replicated(end_offset, timeout_s)
        if status is PutMessageStatus.SLAVE_NOT_AVAILABLE:
            self.metrics.slave_not_available.inc()
            return status
        self.metrics.sync_wait.observe(time.perf_counter() - started)
        if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT:
            self.metrics.flush_slave_timeout.inc()
        return status

    # -- status and metrics ---------------------------------------------------------------------

    def status(self) -> broker_pb2.HAStatus:
        max_offset = self.store.max_offset
        reply = broker_pb2.HAStatus(broker_role=self.role, commit_log_max_offset=max_offset,
                                    epoch=self.epochs.epoch)
        if self.master is not None:
            reply.push2slave_max_offset = self.master.tracker.push2slave_max_offset
            for s in self.master.slaves():
                reply.slaves.append(broker_pb2.HASlaveStatus(
                    slave_addr=s.slave, request_offset=s.request_offset, ack_offset=s.ack_offset,
                    lag_bytes=max(0, max_offset - s.ack_offset) if s.ack_offset >= 0 else max_offset,
                    connected_since_ms=s.connected_since_ms, transferred_bytes=s.transferred_bytes,
                    last_ack_timestamp_ms=s.last_ack_ms, broker_id=s.broker_id, broker_addr=s.broker_addr,
                    epoch=s.epoch))
        if self.slave is not None:
            reply.master_ha_addr = self.slave.master_addr
            reply.client_max_offset = max_offset
            reply.last_data_timestamp_ms = self.slave.last_data_ms
            reply.reconnects = self.slave.reconnects
            reply.connected = self.slave.connected
            reply.problem = self.slave.problem
        controller = self.app.controller
        if controller is not None:
            # the controller's reason first: it says why the group has no master to follow
            reply.problem = "; ".join(p for p in (controller.problem, reply.problem) if p)
            reply.sync_state_set.extend(controller.sync_state_members())
            reply.failovers = controller.failovers
        return reply

    def _sample(self) -> MasterSample | SlaveSample:
        max_offset = self.store.max_offset
        if self.master is not None:
            master = self.master
            now = time.time()
            series = []
            for s in master.slaves():
                ack = max(s.ack_offset, 0)
                series.append(SlaveSeries(s.label, ack, max(0, max_offset - ack),
                                          master.lag_seconds(ack, max_offset, now), s.transferred_bytes))
            return MasterSample(max_offset, master.tracker.push2slave_max_offset, series,
                                auth_failures=master.auth_failures)
        slave = self.slave
        assert slave is not None
        now = time.time()
        data_age = now - slave.last_data_ms / 1000 if slave.last_data_ms else -1.0
        read_age = now - slave.last_read_ms / 1000 if slave.last_read_ms else -1.0
        return SlaveSample(max_offset, data_age, read_age, slave.connected, slave.reconnects,
                           slave.received_bytes, slave.repairs)


def create_replication_service(app: BrokerApp) -> ReplicationService:
    """The ``ha_factory`` of :class:`~services.broker.app.BrokerApp`."""
    return BrokerReplication(app)

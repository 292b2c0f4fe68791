"""Prometheus series of the failover controller, read at scrape time.  Every series carries
``cluster``, ``broker`` (the group) and ``member`` (the member's configured brokerId, stable
across role changes); names are a contract with the chart's dashboard and alerts.

``pocketmq_controller_is_master``, ``pocketmq_controller_epoch``,
``pocketmq_controller_sync_state_set_size`` (the master's view; 1 = no in-sync slave, a
failover now would lose data), ``pocketmq_controller_failovers_total`` (times this member took
the lease), ``pocketmq_controller_last_failover_timestamp_seconds`` (0 = never),
``pocketmq_controller_lease_renew_latency_seconds`` (the master's last renewal),
``pocketmq_controller_dcs_reachable`` (0 while etcd cannot be reached or has no quorum).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from services.broker.controller.runner import Controller

__all__ = ["ControllerCollector"]

_LABELS = ["cluster", "broker", "member"]


class ControllerCollector(Collector):
    def __init__(self, controller: Controller) -> None:
        self._c = controller

    def collect(self) -> Iterable[Metric]:
        c = self._c
        ident = [c.cfg.broker_cluster_name, c.cfg.broker_name, str(c.member_id)]
        members = c.sync_state.members if c.sync_state is not None else frozenset()
        for name, doc, value in (
            ("pocketmq_controller_is_master", "1 while this member holds the leader lease.",
             int(c.is_master)),
            ("pocketmq_controller_epoch", "The newest epoch this member knows.", c.epoch),
            ("pocketmq_controller_sync_state_set_size", "Members in the SyncStateSet (master included).",
             len(members)),
            ("pocketmq_controller_last_failover_timestamp_seconds",
             "When this member last took the leader lease (0 = never).", c.last_failover_ms / 1000),
            ("pocketmq_controller_lease_renew_latency_seconds",
             "Duration of the master's last lease renewal.", c.renew_latency_s),
            ("pocketmq_controller_dcs_reachable",
             "1 while this member's last controller step reached the DCS (0: unreachable or no quorum).",
             int(c.dcs_reachable)),
        ):
            family = GaugeMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(ident, value)
            yield family
        counter = CounterMetricFamily("pocketmq_controller_failovers",
                                      "Times this member took the leader lease.", labels=_LABELS)
        counter.add_metric(ident, c.failovers)
        yield counter

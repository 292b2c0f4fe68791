"""Prometheus metrics of replication, registered in the broker's registry.

Every series carries ``cluster``, ``broker`` and ``broker_id``; per-slave series on the master
also carry ``slave``: the slave's brokerId from its HA hello, so a reconnect continues the same
series (the connection's ``ip:port`` only for an original slave that sends no hello).  Names are a
contract with the Helm chart's dashboard and alerts (``deploy/helm/pocketmq/README.md``).

Master
    ``pocketmq_ha_push2slave_max_offset``, ``pocketmq_commitlog_max_offset``,
    ``pocketmq_ha_connections``, ``pocketmq_ha_slave_ack_offset{slave}``,
    ``pocketmq_ha_replication_lag_bytes{slave}``, ``pocketmq_ha_replication_lag_seconds{slave}``,
    ``pocketmq_ha_transferred_bytes_total{slave}``, ``pocketmq_ha_slave_not_available_total``,
    ``pocketmq_ha_flush_slave_timeout_total``, ``pocketmq_ha_sync_wait_seconds`` (histogram),
    ``pocketmq_ha_auth_failures_total`` (connections closed because the peer did not answer the
    ``haAuthSecret`` challenge correctly or in time; always 0 without a secret).
Slave
    ``pocketmq_ha_client_max_offset``, ``pocketmq_commitlog_max_offset``,
    ``pocketmq_ha_client_last_data_age_seconds`` (seconds since the last data frame; -1 before
    the first; grows on an idle master), ``pocketmq_ha_client_last_read_age_seconds`` (since
    anything was read, heartbeats included: the link's liveness), ``pocketmq_ha_client_connected``,
    ``pocketmq_ha_client_reconnects_total``, ``pocketmq_ha_client_received_bytes_total``,
    ``pocketmq_ha_client_repairs_total``.

Per-slave series exist while the slave is connected (a collector reads them at scrape time), so
a departed slave leaves no stale series behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["HAMetrics", "MasterSample", "SlaveSample", "SlaveSeries"]

_IDENT = ("cluster", "broker", "broker_id")
_WAIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class SlaveSeries:
    slave: str
    ack_offset: int
    lag_bytes: int
    lag_seconds: float
    transferred_bytes: int


@dataclass(frozen=True)
class MasterSample:
    commitlog_max_offset: int
    push2slave_max_offset: int
    slaves: Sequence[SlaveSeries]
    auth_failures: int = 0


@dataclass(frozen=True)
class SlaveSample:
    commitlog_max_offset: int
    last_data_age_s: float
    last_read_age_s: float
    connected: bool
    reconnects: int
    received_bytes: int
    repairs: int


Sample = MasterSample | SlaveSample


class _HACollector(Collector):
    def __init__(self, ident: list[str], sample: Callable[[], Sample]) -> None:
        self._ident = ident
        self._sample = sample

    def collect(self) -> Iterable[Metric]:
        sample = self._sample()
        ident = self._ident
        yield _gauge("pocketmq_commitlog_max_offset", "Commit log max (write) offset.", ident,
                     sample.commitlog_max_offset)
        if isinstance(sample, MasterSample):
            yield _gauge("pocketmq_ha_push2slave_max_offset",
                         "Highest commit log offset any slave has acknowledged (push2SlaveMaxOffset).",
                         ident, sample.push2slave_max_offset)
            yield _gauge("pocketmq_ha_connections", "Slaves connected to the HA port.", ident,
                         len(sample.slaves))
            labels = [*_IDENT, "slave"]
            ack = GaugeMetricFamily("pocketmq_ha_slave_ack_offset", "Each slave's acknowledged offset.",
                                    labels=labels)
            lag = GaugeMetricFamily("pocketmq_ha_replication_lag_bytes",
                                    "Commit log max offset minus the slave's acknowledged offset.",
                                    labels=labels)
            lag_s = GaugeMetricFamily("pocketmq_ha_replication_lag_seconds",
                                      "Age of the oldest data the slave has not acknowledged "
                                      "(0 when caught up).", labels=labels)
            sent = CounterMetricFamily("pocketmq_ha_transferred_bytes",
                                       "Commit log bytes sent to the slave on its current connection.",
                                       labels=labels)
            for s in sample.slaves:
                values = [*ident, s.slave]
                ack.add_metric(values, s.ack_offset)
                lag.add_metric(values, s.lag_bytes)
                lag_s.add_metric(values, s.lag_seconds)
                sent.add_metric(values, s.transferred_bytes)
            yield from (ack, lag, lag_s, sent)
            yield _counter("pocketmq_ha_auth_failures",
                           "HA connections closed because the peer failed the haAuthSecret challenge "
                           "(wrong, missing or late answer).", ident, sample.auth_failures)
        else:
            yield _gauge("pocketmq_ha_client_max_offset", "The slave's commit log max offset.", ident,
                         sample.commitlog_max_offset)
            yield _gauge("pocketmq_ha_client_last_data_age_seconds",
                         "Seconds since the last data frame from the master (-1 before the first).",
                         ident, sample.last_data_age_s)
            yield _gauge("pocketmq_ha_client_last_read_age_seconds",
                         "Seconds since anything (data or heartbeat) was read from the master (-1 before "
                         "the first).", ident, sample.last_read_age_s)
            yield _gauge("pocketmq_ha_client_connected", "1 while connected to the master.", ident,
                         1 if sample.connected else 0)
            yield _counter("pocketmq_ha_client_reconnects", "Reconnects to the master.", ident,
                           sample.reconnects)
            yield _counter("pocketmq_ha_client_received_bytes", "Commit log bytes received from the master.",
                           ident, sample.received_bytes)
            yield _counter("pocketmq_ha_client_repairs",
                           "Divergence repairs (log truncated back to the master's offset).", ident,
                           sample.repairs)


def _gauge(name: str, doc: str, ident: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(_IDENT))
    family.add_metric(ident, value)
    return family


def _counter(name: str, doc: str, ident: list[str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(_IDENT))
    family.add_metric(ident, value)
    return family


class HAMetrics:
    """Counters and the wait histogram (updated by the service) plus the scrape-time series."""

    def __init__(self, registry: CollectorRegistry, cluster: str, broker: str, broker_id: int, *,
                 master: bool = True) -> None:
        self.registry = registry
        self._ident = [cluster, broker, str(broker_id)]
        sends = registry if master else None  # SYNC_MASTER series exist on masters only
        self.slave_not_available = Counter(
            "pocketmq_ha_slave_not_available", "SYNC_MASTER sends answered SLAVE_NOT_AVAILABLE.",
            _IDENT, registry=sends).labels(*self._ident)
        self.flush_slave_timeout = Counter(
            "pocketmq_ha_flush_slave_timeout", "SYNC_MASTER sends answered FLUSH_SLAVE_TIMEOUT.",
            _IDENT, registry=sends).labels(*self._ident)
        self.sync_wait = Histogram(
            "pocketmq_ha_sync_wait_seconds", "SYNC_MASTER wait for a slave's acknowledgement.",
            _IDENT, buckets=_WAIT_BUCKETS, registry=sends).labels(*self._ident)
        self._collector: _HACollector | None = None

    def add_source(self, sample: Callable[[], Sample]) -> None:
        self._collector = _HACollector(self._ident, sample)
        self.registry.register(self._collector)

    def remove_source(self) -> None:
        if self._collector is not None:
            self.registry.unregister(self._collector)
            self._collector = None

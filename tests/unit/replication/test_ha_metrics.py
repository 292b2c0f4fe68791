"""Replication metric names and labels: a contract with the Helm chart's dashboard and alerts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from services.broker.replication.metrics import HAMetrics, MasterSample, SlaveSample, SlaveSeries
from services.broker.replication.progress import ProgressHistory

IDENT = 'broker="broker-a",broker_id="0",cluster="c1"'


def test_master_series() -> None:
    registry = CollectorRegistry()
    metrics = HAMetrics(registry, "c1", "broker-a", 0)
    series = [SlaveSeries("10.0.0.2:40000", 4000, 1000, 0.25, 4100)]
    metrics.add_source(lambda: MasterSample(5000, 4000, series))
    metrics.slave_not_available.inc()
    metrics.sync_wait.observe(0.002)
    text = generate_latest(registry).decode()
    slave = IDENT + ',slave="10.0.0.2:40000"'
    for line in (
        f"pocketmq_commitlog_max_offset{{{IDENT}}} 5000.0",
        f"pocketmq_ha_push2slave_max_offset{{{IDENT}}} 4000.0",
        f"pocketmq_ha_connections{{{IDENT}}} 1.0",
        f"pocketmq_ha_slave_ack_offset{{{slave}}} 4000.0",
        f"pocketmq_ha_replication_lag_bytes{{{slave}}} 1000.0",
        f"pocketmq_ha_replication_lag_seconds{{{slave}}} 0.25",
        f"pocketmq_ha_transferred_bytes_total{{{slave}}} 4100.0",
        f"pocketmq_ha_slave_not_available_total{{{IDENT}}} 1.0",
        f"pocketmq_ha_flush_slave_timeout_total{{{IDENT}}} 0.0",
        f"pocketmq_ha_sync_wait_seconds_count{{{IDENT}}} 1.0",
    ):
        assert line in text, line
    metrics.remove_source()
    assert "pocketmq_ha_connections" not in generate_latest(registry).decode()


def test_slave_series() -> None:
    registry = CollectorRegistry()
    metrics = HAMetrics(registry, "c1", "broker-a", 1, master=False)
    metrics.add_source(lambda: SlaveSample(7000, 1.5, 0.5, True, 3, 7000, 0))
    text = generate_latest(registry).decode()
    ident = IDENT.replace('broker_id="0"', 'broker_id="1"')
    for line in (
        f"pocketmq_ha_client_max_offset{{{ident}}} 7000.0",
        f"pocketmq_ha_client_last_data_age_seconds{{{ident}}} 1.5",
        f"pocketmq_ha_client_last_read_age_seconds{{{ident}}} 0.5",
        f"pocketmq_ha_client_connected{{{ident}}} 1.0",
        f"pocketmq_ha_client_reconnects_total{{{ident}}} 3.0",
    ):
        assert line in text, line
    assert "pocketmq_ha_slave_not_available" not in text  # master-only series


def test_progress_history_gives_arrival_times() -> None:
    history = ProgressHistory()
    history.note(100, 10.0)
    history.note(200, 10.0005)  # same millisecond: merged into the previous point
    history.note(300, 11.0)
    history.note(250, 12.0)  # never backwards
    assert history.floor == 200
    assert history.arrival_time(50) == 10.0
    assert history.arrival_time(199) == 10.0
    assert history.arrival_time(200) == 11.0
    assert history.arrival_time(300) is None

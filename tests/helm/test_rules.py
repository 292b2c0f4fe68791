"""The rendered PrometheusRule passes ``promtool check rules``, and ``promtool test rules`` shows
each alert firing on the series the services export (and staying quiet on a healthy cluster)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import NAMESPACE, VALUE_SETS, merge, render
from tests.support import require_executable

RULES_ON = {"metrics": {"prometheusRule": {"enabled": True}}}


def rule_groups(values: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = render(merge(values, RULES_ON)).of_kind("PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def promtool(*args: str, cwd: Path) -> str:
    done = subprocess.run([require_executable("promtool", "prometheus"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("value_set", ["default", "three-groups-two-slaves", "sync-master"])
def test_rendered_rules_pass_promtool_check(value_set: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups(VALUE_SETS[value_set])}))
    out = promtool("check", "rules", str(path), cwd=tmp_path)
    assert "SUCCESS: 7 rules found" in out


def test_alert_names_and_severities() -> None:
    (group,) = rule_groups({})
    assert {r["alert"]: r["labels"]["severity"] for r in group["rules"]} == {
        "PocketMQReplicationLagHigh": "warning",
        "PocketMQSlaveNotAvailable": "warning",
        "PocketMQFlushSlaveTimeout": "warning",
        "PocketMQHAAuthFailures": "warning",
        "PocketMQNoInSyncSlave": "warning",
        "PocketMQFailover": "warning",
        "PocketMQBrokerMissingFromNameServer": "critical",
    }
    fast = {"PocketMQNoInSyncSlave": "1m", "PocketMQFailover": "0m"}
    assert all(r["for"] == fast.get(r["alert"], "5m") for r in group["rules"])


def broker_series(metric: str, values: str, **labels: str) -> dict[str, str]:
    base = {"namespace": NAMESPACE, "cluster": "DefaultCluster", "broker": "broker-a", "broker_id": "0",
            "job": "broker", "instance": "10.0.0.10:10913", **labels}
    selector = ", ".join(f'{k}="{v}"' for k, v in base.items())
    return {"series": f"{metric}{{{selector}}}", "values": values}


def up(instance: str) -> dict[str, str]:
    series = f'up{{namespace="{NAMESPACE}", job="namesrv", instance="{instance}"}}'
    return {"series": series, "values": "1x14"}


def test_alerts_fire_on_exported_series(tmp_path: Path) -> None:
    # Strip annotations for the unit test (their templates are checked by `promtool check rules`).
    groups = rule_groups({"broker": {"groups": 1, "slavesPerGroup": 1}})  # 2 brokers expected
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    lag = 64 * 1024 * 1024
    group = {"namespace": NAMESPACE, "cluster": "DefaultCluster", "broker": "broker-a"}
    namesrv = {"severity": "critical", "namespace": NAMESPACE, "job": "namesrv"}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # slave 10.0.0.11 falls behind and stays behind; slave 10.0.0.12 stays close
                broker_series("pocketmq_ha_replication_lag_bytes", f"0 {lag // 2} {lag + 1}x12",
                              slave="10.0.0.11:10912"),
                broker_series("pocketmq_ha_replication_lag_bytes", "0x14", slave="10.0.0.12:10912"),
                # broker-a keeps answering SLAVE_NOT_AVAILABLE; FLUSH_SLAVE_TIMEOUT stays flat
                broker_series("pocketmq_ha_slave_not_available_total", "0+30x14"),
                broker_series("pocketmq_ha_flush_slave_timeout_total", "0x14"),
                # a slave with the wrong haAuthSecret retries every few seconds
                broker_series("pocketmq_ha_auth_failures_total", "0+12x14"),
                # controllerMode=etcd: member 2 is master, alone in its SyncStateSet from minute 5;
                # member 1 took the lease once at minute 2
                broker_series("pocketmq_controller_is_master", "1x14", member="2"),
                broker_series("pocketmq_controller_sync_state_set_size", "3x4 1x10", member="2"),
                broker_series("pocketmq_controller_is_master", "0x14", member="1"),
                broker_series("pocketmq_controller_sync_state_set_size", "1x14", member="1"),
                broker_series("pocketmq_controller_failovers_total", "0 0 1x12", member="1"),
                # NameServer -0 sees both brokers, -1 only one, -2 none (its gauge has no cluster series)
                {"series": f'pocketmq_namesrv_live_brokers{{namespace="{NAMESPACE}", job="namesrv", '
                           'cluster="DefaultCluster", instance="10.0.1.10:9877"}', "values": "2x14"},
                {"series": f'pocketmq_namesrv_live_brokers{{namespace="{NAMESPACE}", job="namesrv", '
                           'cluster="DefaultCluster", instance="10.0.1.11:9877"}', "values": "1x14"},
                *(up(i) for i in ("10.0.1.10:9877", "10.0.1.11:9877", "10.0.1.12:9877")),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "PocketMQReplicationLagHigh", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "PocketMQReplicationLagHigh", "exp_alerts": [
                    {"exp_labels": {**group, "severity": "warning", "slave": "10.0.0.11:10912"}}]},
                {"eval_time": "3m", "alertname": "PocketMQSlaveNotAvailable", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "PocketMQSlaveNotAvailable", "exp_alerts": [
                    {"exp_labels": {**group, "severity": "warning"}}]},
                {"eval_time": "10m", "alertname": "PocketMQFlushSlaveTimeout", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "PocketMQHAAuthFailures", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "PocketMQHAAuthFailures", "exp_alerts": [
                    {"exp_labels": {**group, "severity": "warning"}}]},
                {"eval_time": "4m", "alertname": "PocketMQNoInSyncSlave", "exp_alerts": []},
                {"eval_time": "7m", "alertname": "PocketMQNoInSyncSlave", "exp_alerts": [
                    {"exp_labels": {**group, "severity": "warning"}}]},
                {"eval_time": "1m", "alertname": "PocketMQFailover", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "PocketMQFailover", "exp_alerts": [
                    {"exp_labels": {**group, "severity": "warning"}}]},
                {"eval_time": "14m", "alertname": "PocketMQFailover", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "PocketMQBrokerMissingFromNameServer", "exp_alerts": [
                    {"exp_labels": {**namesrv, "cluster": "DefaultCluster", "instance": "10.0.1.11:9877"}},
                    {"exp_labels": {**namesrv, "instance": "10.0.1.12:9877"}}]},
            ],
        }],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert "SUCCESS" in out


def test_healthy_cluster_raises_no_alert(tmp_path: Path) -> None:
    groups = rule_groups({})
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            broker_series("pocketmq_ha_replication_lag_bytes", "0 4096 0 1024 0x10", slave="10.0.0.11:10912"),
            broker_series("pocketmq_ha_slave_not_available_total", "0x14"),
            broker_series("pocketmq_ha_flush_slave_timeout_total", "0x14"),
            broker_series("pocketmq_ha_auth_failures_total", "0x14"),
            broker_series("pocketmq_controller_is_master", "1x14", member="1"),
            broker_series("pocketmq_controller_sync_state_set_size", "2x14", member="1"),
            broker_series("pocketmq_controller_failovers_total", "1x14", member="1"),
            *({"series": f'pocketmq_namesrv_live_brokers{{namespace="{NAMESPACE}", job="namesrv", '
                         f'cluster="DefaultCluster", instance="{i}"}}', "values": "2x14"}
              for i in ("10.0.1.10:9877", "10.0.1.11:9877")),
            *(up(i) for i in ("10.0.1.10:9877", "10.0.1.11:9877")),
        ],
        "alert_rule_test": [{"eval_time": "12m", "alertname": name, "exp_alerts": []} for name in (
            "PocketMQReplicationLagHigh", "PocketMQSlaveNotAvailable", "PocketMQFlushSlaveTimeout",
            "PocketMQHAAuthFailures", "PocketMQNoInSyncSlave", "PocketMQFailover",
            "PocketMQBrokerMissingFromNameServer")],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    assert "SUCCESS" in promtool("test", "rules", "tests.yaml", cwd=tmp_path)

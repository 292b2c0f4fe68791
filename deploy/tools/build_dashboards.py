"""Build the chart's Grafana dashboards (deploy/helm/pocketmq/dashboards/*.json).

    python deploy/tools/build_dashboards.py          # rewrite the JSON files
    python deploy/tools/build_dashboards.py --check  # exit 1 if they are stale (tests do this)

Every query uses the template variables $namespace, $cluster and $broker (regex matchers, "All" =
".*") and $__rate_interval; tests/helm substitutes them and runs each expression against a real
Prometheus scraping the rendered chart. Metric names are the contract in
deploy/helm/pocketmq/README.md ("Metrics").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DASHBOARD_DIR = Path(__file__).resolve().parents[1] / "helm" / "pocketmq" / "dashboards"

BROKER = 'namespace=~"$namespace", cluster=~"$cluster", broker=~"$broker"'
NAMESRV = 'namespace=~"$namespace", cluster=~"$cluster"'
MASTER = BROKER + ', broker_id="0"'
PER_SLAVE = "{{broker}} {{slave}}"
RATE = "[$__rate_interval]"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
POP_EVENTS = "pocketmq_pop_messages_total"
#: Series of the failover controller (controllerMode etcd / kubernetes), per member.
IS_MASTER = "pocketmq_controller_is_master"
MEMBER = "namespace, cluster, broker, member"


def on_master(metric: str) -> str:
    """``metric`` of the member holding each group's lease (one series per member first: a
    restarted pod's old series may linger)."""
    return (f"max by (broker) (max by ({MEMBER}) ({metric}{{{BROKER}}}) * on ({MEMBER}) "
            f"(max by ({MEMBER}) ({IS_MASTER}{{{BROKER}}}) == 1))")


def target(ref: str, expr: str, legend: str) -> dict[str, Any]:
    return {"refId": ref, "datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}


def timeseries(title: str, description: str, unit: str, targets: list[dict[str, Any]],
               x: int, y: int, w: int = 12, h: int = 8) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"},
            },
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def stat(title: str, description: str, unit: str, targets: list[dict[str, Any]],
         x: int, y: int, w: int = 6, h: int = 4) -> dict[str, Any]:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "area", "textMode": "auto"},
        "targets": targets,
    }


def row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": []}


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def by(labels: str, metric: str, agg: str = "max", selector: str = BROKER) -> str:
    """``<agg> by (<labels>) (<metric>{<selector>})``."""
    return f"{agg} by ({labels}) ({metric}{{{selector}}})"


def rate_by(labels: str, metric: str) -> str:
    """``sum by (<labels>) (rate(<metric>{<broker selector>}[$__rate_interval]))``."""
    return f"sum by ({labels}) (rate({metric}{{{BROKER}}}{RATE}))"


def failover_panels(y: int) -> list[dict[str, Any]]:
    """The failover controller's row (docs/failover.md): empty with controllerMode none."""
    epoch = "pocketmq_controller_epoch"
    sss = "pocketmq_controller_sync_state_set_size"
    last = "pocketmq_controller_last_failover_timestamp_seconds"
    return [
        row("Failover (controllerMode kubernetes / etcd)", y),
        stat("Masters per group", "Members holding their group's leader lease: 1 is healthy, 0 means the "
             "group takes no writes (no in-sync member to promote yet).", "none",
             [target("A", by("broker", IS_MASTER, "sum"), "{{broker}}")], 0, y + 1),
        stat("Epoch", "The group's epoch: one more at every change of master.", "none",
             [target("A", by("broker", epoch), "{{broker}}")], 6, y + 1),
        stat("SyncStateSet size", "Members in the group's SyncStateSet as its master publishes it (master "
             "included). 1 = no in-sync slave: a failover now would lose data, so none would happen.",
             "none", [target("A", on_master(sss), "{{broker}}")], 12, y + 1),
        stat("Time since last failover", "Since a member last took its group's leader lease.", "s",
             [target("A", f"time() - max by (broker) ({last}{{{BROKER}}} > 0)", "{{broker}}")], 18, y + 1),
        timeseries("Current master per group", "The member (brokerId as configured) holding each group's "
                   "leader lease; a new line is a failover or switchover.", "none",
                   [target("A", f"max by (broker, member) ({IS_MASTER}{{{BROKER}}}) > 0",
                           "{{broker}} member {{member}}")], 0, y + 5),
        timeseries("Failovers", "Times each group's members took the leader lease (the first election "
                   "counts; a counter per member process).", "none",
                   [target("A", by("broker", "pocketmq_controller_failovers_total", "sum"), "{{broker}}")],
                   12, y + 5),
        timeseries("Lease renew latency", "Duration of the master's last leader-lease renewal (an etcd "
                   "transaction or a Lease read and conditional replace). Near the renew interval, the "
                   "master is about to fence itself.", "s",
                   [target("A", on_master("pocketmq_controller_lease_renew_latency_seconds"), "{{broker}}")],
                   0, y + 13),
        timeseries("SyncStateSet size over time", "The master's SyncStateSet size; dips to 1 are windows "
                   "in which a failover would have had no member to promote.", "none",
                   [target("A", on_master(sss), "{{broker}}")], 12, y + 13),
    ]


def overview() -> dict[str, Any]:
    put = "pocketmq_broker_put_messages_total"
    sync_wait = "pocketmq_ha_sync_wait_seconds_bucket"
    panels: list[dict[str, Any]] = [
        row("Cluster", 0),
        stat("NameServer live brokers",
             "Brokers registered at each NameServer (lowest NameServer shown). Lower than the deployed "
             "broker count means a broker is missing from routes.", "none",
             [target("A", by("cluster", "pocketmq_namesrv_live_brokers", "min", NAMESRV), "{{cluster}}")],
             0, 1),
        stat("HA connections", "Slaves connected to each master's HA port.", "none",
             [target("A", by("broker", "pocketmq_ha_connections", "sum"), "{{broker}}")], 6, 1),
        stat("Max replication lag", "Largest lag of any slave behind its master.", "bytes",
             [target("A", f"max(pocketmq_ha_replication_lag_bytes{{{BROKER}}})", "lag")], 12, 1),
        stat("Produce rate", "Messages stored per second (all put statuses).", "short",
             [target("A", f"sum(rate({put}{{{BROKER}}}{RATE}))", "msg/s")], 18, 1),
        timeseries("NameServer live brokers", "Live brokers per NameServer and cluster.", "none",
                   [target("A", f"pocketmq_namesrv_live_brokers{{{NAMESRV}}}", "{{instance}} {{cluster}}")],
                   0, 5, w=24, h=6),
        row("Replication", 11),
        timeseries(
            "Commit log max offset vs push2SlaveMaxOffset",
            "Master commit-log max offset, the highest offset any slave acknowledged (push2SlaveMaxOffset) "
            "and each slave's own max offset. The gap between the lines is unreplicated data.",
            "bytes",
            [
                target("A", by("broker", "pocketmq_broker_commitlog_max_offset", selector=MASTER),
                       "{{broker}} commit log max offset"),
                target("B", by("broker", "pocketmq_ha_push2slave_max_offset"),
                       "{{broker}} push2SlaveMaxOffset"),
                target("C", by("broker, broker_id", "pocketmq_ha_client_max_offset"),
                       "{{broker}} slave {{broker_id}} max offset"),
            ],
            0, 12, w=24,
        ),
        timeseries("Replication lag per slave (bytes)",
                   "Master commit-log max offset minus the slave's acknowledged offset.", "bytes",
                   [target("A", by("broker, slave", "pocketmq_ha_replication_lag_bytes"), PER_SLAVE)], 0, 20),
        timeseries("Replication lag per slave (seconds)",
                   "Age of the oldest message the slave has not acknowledged yet (0 when caught up).", "s",
                   [target("A", by("broker, slave", "pocketmq_ha_replication_lag_seconds"), PER_SLAVE)],
                   12, 20),
        timeseries("HA connections", "Slave connections per master.", "none",
                   [target("A", by("broker", "pocketmq_ha_connections", "sum"), "{{broker}}")], 0, 28),
        timeseries("Replication throughput", "Commit-log bytes sent to each slave.", "Bps",
                   [target("A", rate_by("broker, slave", "pocketmq_ha_transferred_bytes_total"),
                           "{{broker}} {{slave}}")], 12, 28),
        row("Traffic", 36),
        timeseries("Put statuses", "Messages per second by put status (PUT_OK, SLAVE_NOT_AVAILABLE, "
                   "FLUSH_SLAVE_TIMEOUT, FLUSH_DISK_TIMEOUT, ...).", "short",
                   [target("A", rate_by("status", put), "{{status}}")], 0, 37),
        timeseries("Produce / consume rate", "Messages stored and messages pulled per second per group.",
                   "short",
                   [target("A", rate_by("broker", put), "{{broker}} produce"),
                    target("B", rate_by("broker", "pocketmq_broker_get_messages_total"),
                           "{{broker}} consume")],
                   12, 37),
        timeseries("SYNC_MASTER replication failures",
                   "Sends answered SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT (stored on the master only).",
                   "short",
                   [target("A", rate_by("broker", "pocketmq_ha_slave_not_available_total"),
                           "{{broker}} SLAVE_NOT_AVAILABLE"),
                    target("B", rate_by("broker", "pocketmq_ha_flush_slave_timeout_total"),
                           "{{broker}} FLUSH_SLAVE_TIMEOUT")], 0, 45),
        timeseries("Sync replication wait (p99)",
                   "How long SYNC_MASTER sends wait for a slave's acknowledgement.", "s",
                   [target("A", f"histogram_quantile(0.99, {rate_by('broker, le', sync_wait)})",
                           "{{broker}} p99")], 12, 45),
        timeseries("HA authentication failures",
                   "Connections to a master's HA port closed because they failed the haAuthSecret "
                   "challenge (a slave with a missing or different secret, or a stranger); the master "
                   "logs each peer.", "short",
                   [target("A", rate_by("broker", "pocketmq_ha_auth_failures_total"), "{{broker}}")], 0, 53),
        row("Consumer health (POP)", 61),
        timeseries("POP events per group",
                   "Messages popped, acked, nacked (invisible time changed), revived (invisible time ran "
                   "out), retried and dead-lettered per second, by consumer group.", "short",
                   [target("A", rate_by("group, event", POP_EVENTS), "{{group}} {{event}}")], 0, 62),
        timeseries("Retries and dead letters",
                   "Messages revived into the group's retry topic and moved to its dead-letter topic per "
                   "second. A steady dead-letter rate means a consumer keeps failing on some messages.",
                   "short",
                   [target("A", f'sum by (group, event) (rate({POP_EVENTS}{{{BROKER}, '
                                f'event=~"retried|dead_lettered"}}{RATE}))', "{{group}} {{event}}")], 12, 62),
        timeseries("In-flight messages",
                   "Popped messages not acked yet (invisible to the group), by group.", "none",
                   [target("A", by("group", "pocketmq_pop_in_flight", "sum"), "{{group}}")], 0, 70),
        timeseries("Oldest in-flight message",
                   "Age of the oldest popped, not acked message of each group: growing steadily means a "
                   "consumer holds messages without acking them.", "s",
                   [target("A", by("group", "pocketmq_pop_oldest_in_flight_seconds"), "{{group}}")], 12, 70),
        *failover_panels(78),
    ]
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    namespace_query = "label_values(pocketmq_namesrv_live_brokers, namespace)"
    cluster_query = 'label_values(pocketmq_broker_commitlog_max_offset{namespace=~"$namespace"}, cluster)'
    broker_query = ('label_values(pocketmq_broker_commitlog_max_offset{namespace=~"$namespace", '
                    'cluster=~"$cluster"}, broker)')
    return {
        "title": "PocketMQ",
        "uid": "pocketmq-overview",
        "description": "PocketMQ NameServers, broker groups and commit-log replication.",
        "tags": ["pocketmq", "messaging"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                 "current": {}, "hide": 0, "refresh": 1},
                query_variable("namespace", "Namespace", namespace_query),
                query_variable("cluster", "Cluster", cluster_query),
                query_variable("broker", "Broker group", broker_query),
            ]
        },
        "panels": panels,
    }


DASHBOARDS = {"pocketmq-overview.json": overview}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the files differ from a fresh build")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = DASHBOARD_DIR / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run python {Path(__file__).name}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

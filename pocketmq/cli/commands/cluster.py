"""``pocketmq cluster``: the clusters, broker groups and live brokers the NameServer knows."""

from __future__ import annotations

import time

import typer

from pocketmq.cli.common import Conn, connected
from pocketmq.cli.output import print_json, stdout_console, table

app = typer.Typer(help="Clusters and their brokers.", no_args_is_help=True)


@app.command("list")
@connected()
def cluster_list(*, conn: Conn) -> None:
    """Every cluster, broker group and live broker the NameServer knows."""
    info = conn.call(lambda admin: admin.cluster_info())
    now = time.time() * 1000
    brokers = []
    for addr, live in info.broker_live_table.items():
        brokers.append({
            "cluster": live.cluster_name, "broker_name": live.broker_name, "broker_id": live.broker_id,
            "role": live.broker_role, "addr": addr, "ha_addr": live.ha_server_addr,
            "metrics_addr": live.metrics_addr, "last_update_timestamp": live.last_update_timestamp,
            "last_update_age_s": round(max(0.0, now - live.last_update_timestamp) / 1000, 1),
        })
    brokers.sort(key=lambda b: (b["cluster"], b["broker_name"], b["broker_id"]))
    clusters = {c: sorted(n.broker_names) for c, n in sorted(info.cluster_addr_table.items())}
    if conn.json:
        print_json({"clusters": clusters, "brokers": brokers})
        return
    stdout_console().print(table(
        "Brokers",
        ["cluster", "broker", "id", "role", "address", "HA address", "metrics", "heartbeat age"],
        ([b["cluster"], b["broker_name"], b["broker_id"], b["role"], b["addr"], b["ha_addr"],
          b["metrics_addr"], f"{b['last_update_age_s']} s"] for b in brokers), right=["id"]))

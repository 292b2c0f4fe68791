"""``pocketmq group``: subscription (consumer) group configs on the master brokers."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, CLUSTER, Conn, FailedError, connected, results_rows
from pocketmq.cli.output import print_json, proto_dict, stderr_console, stdout_console, table

app = typer.Typer(help="Subscription (consumer) groups.", no_args_is_help=True)


@app.command("create")
@connected(CLUSTER, BROKER, ACCESS)
def group_create(
    group: Annotated[str, typer.Argument(help="Group name.")],
    consume_enable: Annotated[bool, typer.Option("--consume-enable/--consume-disable")] = True,
    retry_max_times: Annotated[int, typer.Option("--retry-max-times", min=0)] = 16,
    broadcast: Annotated[bool, typer.Option("--broadcast/--no-broadcast")] = False,
    *,
    conn: Conn,
) -> None:
    """Create (or overwrite) a subscription group on every master broker."""
    results = conn.call(lambda admin: admin.create_group(
        group, consume_enable=consume_enable, broadcast=broadcast, retry_max_times=retry_max_times,
        cluster=conn.cluster))
    rows, ok = results_rows(results, "config")
    if conn.json:
        print_json({"group": group, "results": rows})
    else:
        stdout_console().print(table(f"create group {group}", ["broker", "address", "result", "error"], (
            [r.target.broker_name, r.target.addr, "ok" if r.ok else "failed", str(r.error or "")]
            for r in results)))
    if not ok:
        raise FailedError


@app.command("list")
@connected(CLUSTER, BROKER, ACCESS)
def group_list(*, conn: Conn) -> None:
    """Subscription groups defined on the master brokers."""
    results = conn.call(lambda admin: admin.groups(conn.cluster))
    groups: dict[str, dict[str, Any]] = {}
    errors = []
    for r in results:
        if r.error is not None:
            errors.append({"broker_name": r.target.broker_name, "addr": r.target.addr,
                           "error": r.error.to_dict()})
            continue
        for cfg in r.value or []:
            entry = groups.setdefault(cfg.group_name, {**proto_dict(cfg), "brokers": []})
            entry["brokers"].append(r.target.broker_name)
    rows = [groups[name] for name in sorted(groups)]
    if conn.json:
        print_json({"groups": rows, "errors": errors})
    else:
        stdout_console().print(table("Subscription groups", [
            "group", "brokers", "consume", "broadcast", "retry max", "from min"], (
            [g["group_name"], ",".join(g["brokers"]), g["consume_enable"], g["consume_broadcast_enable"],
             g["retry_max_times"], g["consume_from_min_enable"]] for g in rows)))
        for e in errors:
            stderr_console().print(
                f"[red]error[/red] {e['broker_name']} {e['addr']}: {e['error']['message']}")
    if errors:
        raise FailedError

"""``pocketmq broker``: broker status, replication (HA) status, drain / undrain and live config."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, CLUSTER, Conn, FailedError, connected, results_rows
from pocketmq.cli.output import human_bytes, ms_to_iso, print_json, stderr_console, stdout_console, table
from pocketmq.wire.dcs import LEADER, SWITCHOVER, group_key, k8s_lease_name

app = typer.Typer(help="Broker status and replication.", no_args_is_help=True)


@app.command("status")
@connected(CLUSTER, BROKER, ACCESS)
def broker_status(*, conn: Conn) -> None:
    """Identity, role, commit-log offsets and counters of every broker (or --broker)."""
    results = conn.call(lambda admin: admin.broker_status(conn.cluster))
    rows, ok = results_rows(results, "status")
    if conn.json:
        print_json({"brokers": rows})
    else:
        now = time.time() * 1000

        def cells(r: Any) -> list[Any]:
            t = r.target
            if r.error is not None:
                return [t.broker_name, t.broker_id, t.addr, "[red]unreachable[/red]", "", "", "", "", "",
                        str(r.error)]
            s = r.value
            uptime = f"{(now - s.start_timestamp) / 1000:.0f} s" if s.start_timestamp else "-"
            return [t.broker_name, t.broker_id, t.addr, s.broker_role, s.flush_disk_type,
                    s.commit_log_max_offset, s.topic_count, s.put_total, s.get_total, uptime]

        stdout_console().print(table("Brokers", [
            "broker", "id", "address", "role", "flush", "max offset", "topics", "put total", "get total",
            "uptime"], (cells(r) for r in results),
            right=["id", "max offset", "topics", "put total", "get total", "uptime"]))
    if not ok:
        raise FailedError


@app.command("ha-status")
@connected(CLUSTER, BROKER, ACCESS)
def broker_ha_status(*, conn: Conn) -> None:
    """Replication: per slave of each master its ack offset, lag and connection time; each
    slave's own view of its master."""
    results = conn.call(lambda admin: admin.ha_status(conn.cluster))
    rows, ok = results_rows(results, "ha")
    if conn.json:
        print_json({"brokers": rows})
    else:
        console = stdout_console()
        slave_rows = []
        for r in results:
            if r.value is None or not r.target.is_master:
                continue
            for s in r.value.slaves:
                # brokerId from the slave's HA hello (0 or -1: an older slave that sent none)
                slave_rows.append([r.target.broker_name, r.target.addr,
                                   s.broker_id if s.broker_id > 0 else "-", s.broker_addr or s.slave_addr,
                                   s.epoch or "-", s.ack_offset,
                                   s.lag_bytes, human_bytes(s.lag_bytes), ms_to_iso(s.connected_since_ms),
                                   ms_to_iso(s.last_ack_timestamp_ms)])
        console.print(table("Slaves as their masters see them", [
            "broker", "master", "slave id", "slave", "epoch", "ack offset", "lag bytes", "lag",
            "connected since", "last ack"],
            slave_rows, right=["slave id", "epoch", "ack offset", "lag bytes", "lag"]))
        console.print(table("Brokers", [
            "broker", "id", "address", "role", "epoch", "max offset", "push2slave max", "slaves", "connected",
            "sync state set", "problem / error"],
            ([r.target.broker_name, r.target.broker_id, r.target.addr,
              r.value.broker_role if r.value else "", (r.value.epoch or "-") if r.value else "",
              r.value.commit_log_max_offset if r.value else "",
              r.value.push2slave_max_offset if r.value and r.target.is_master else "",
              len(r.value.slaves) if r.value and r.target.is_master else "",
              ("yes" if r.value.connected else "no") if r.value and not r.target.is_master else "",
              ",".join(map(str, r.value.sync_state_set)) if r.value else "",
              str(r.error or "") or (r.value.problem if r.value else "")] for r in results),
            right=["id", "epoch", "max offset", "push2slave max", "slaves"]))
    if not ok:
        raise FailedError


@app.command("switchover")
def broker_switchover(
    group: Annotated[str, typer.Argument(help="The broker group (brokerName).")],
    cluster: Annotated[str, typer.Option("--cluster", "-c", help="The group's brokerClusterName.")],
    etcd: Annotated[str, typer.Option("--etcd", help="etcd endpoint host:port (controllerEtcdEndpoints).")]
    = "127.0.0.1:2379",
    to: Annotated[int, typer.Option("--to", help="The member (brokerId) to hand over to; 0 = the most "
                                    "up-to-date in-sync slave.")] = 0,
    kubernetes: Annotated[bool, typer.Option("--kubernetes", help="The group runs with "
                                             "controllerMode=kubernetes: use its Lease, not etcd.")] = False,
    kube_api: Annotated[str, typer.Option("--kube-api", help="API server URL (default: the kubeconfig's).")]
    = "",
    kubeconfig: Annotated[str, typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or "
                                            "~/.kube/config).")] = "",
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The Lease's namespace.")] = "default",
    lease: Annotated[str, typer.Option("--lease", help="The group's Lease (controllerK8sLeaseName; default "
                                       "pocketmq-<cluster>-<group>).")] = "",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the new master.")] = 30.0,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table",
) -> None:
    """Planned switchover of a group under controllerMode=etcd (or kubernetes): the master stops
    acknowledging, lets the target catch up, hands it the leader lease and becomes a slave."""
    if kubernetes:
        from pocketmq.cli import k8s_switchover

        try:
            outcome = k8s_switchover.switchover(kube_api, kubeconfig, namespace,
                                                lease or k8s_lease_name(cluster, group), to, timeout)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        if outcome is None:
            stdout_console().print(f"[red]no new master within {timeout:g} s (see the master's log: the "
                                   "target must be an in-sync slave)[/red]")
            raise FailedError
        result = {**outcome, "group": group}
    else:
        result = asyncio.run(_switchover(etcd, cluster, group, to, timeout))
    if output == "json":
        print_json(result)
    else:
        stdout_console().print(
            f"{group}: master {result['from']} (epoch {result['from_epoch']}) -> {result['to']} "
            f"(epoch {result['epoch']}) in {result['seconds']:.2f} s")


async def _switchover(endpoint: str, cluster: str, group: str, to: int, limit_s: float) -> dict[str, Any]:
    import aetcd  # (only this command needs it)

    host, _, port = endpoint.rpartition(":")
    client = aetcd.Client(host=host or "127.0.0.1", port=int(port), timeout=5)
    started = time.monotonic()
    try:
        before = await client.get(group_key(cluster, group, LEADER))
        if before is None:
            raise typer.BadParameter(f"group {group} of cluster {cluster} has no master in etcd {endpoint}")
        old = json.loads(before.value)
        lease = await client.lease(max(5, int(limit_s)))
        await client.put(group_key(cluster, group, SWITCHOVER), json.dumps({"to": to}).encode(), lease)
        while time.monotonic() - started < limit_s:
            now = await client.get(group_key(cluster, group, LEADER))
            if now is not None and now.create_revision != before.create_revision:
                new = json.loads(now.value)
                if new.get("ready", True):
                    return {"group": group, "from": old["brokerId"], "from_epoch": before.create_revision,
                            "to": new["brokerId"], "epoch": now.create_revision,
                            "seconds": round(time.monotonic() - started, 3)}
            await asyncio.sleep(0.05)
        await client.delete(group_key(cluster, group, SWITCHOVER))
        stdout_console().print(f"[red]no new master within {limit_s:g} s (see the master's log: the "
                               "target must be an in-sync slave)[/red]")
        raise FailedError
    finally:
        await client.close()


def _drain(broker_name: str, conn: Conn, undo: bool) -> None:
    outcome = conn.call(lambda admin: (admin.undrain_broker if undo else admin.drain_broker)(broker_name))
    rows, _ = results_rows(outcome.brokers)
    if conn.json:
        print_json({"broker": broker_name, "writable": undo, "brokers": rows, "namesrvs": [
            {"namesrv": r.namesrv, "topics_changed": r.topics_changed,
             **({"error": r.error.to_dict()} if r.error else {})} for r in outcome.namesrvs]})
    else:
        out, err = stdout_console(), stderr_console()
        for b in outcome.brokers:
            if b.error is not None:
                err.print(f"[red]{b.target.broker_name} {b.target.addr}:[/red] {b.error}")
            else:
                out.print(f"{b.target.broker_name} id {b.target.broker_id} {b.target.addr}: brokerPermission="
                          f"{'6 (read and write)' if undo else '4 (read-only)'}")
        for r in outcome.namesrvs:
            if r.error is not None:
                err.print(f"[red]{r.namesrv}:[/red] {r.error}")
            else:
                verb = "write permission restored on" if undo else "write permission wiped from"
                out.print(f"NameServer {r.namesrv}: {verb} {r.topics_changed} topic(s) of {broker_name}")
    if not outcome.ok:
        raise FailedError


@app.command("drain")
@connected(ACCESS)
def broker_drain(
    broker_name: Annotated[str, typer.Argument(help="Broker group name (brokerName).")],
    *,
    conn: Conn,
) -> None:
    """Take a broker group out of writes (mqadmin wipeWritePerm; brokerPermission=4 on its
    members, kept over restarts and re-registered with every NameServer): producers move to the
    other groups at their next route refresh; consumers keep reading it."""
    _drain(broker_name, conn, undo=False)


@app.command("undrain")
@connected(ACCESS)
def broker_undrain(
    broker_name: Annotated[str, typer.Argument(help="Broker group name (brokerName).")],
    *,
    conn: Conn,
) -> None:
    """Give a drained broker group its write permission back (mqadmin addWritePerm)."""
    _drain(broker_name, conn, undo=True)


config_app = typer.Typer(help="Live broker configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


def _config_rows(results: list[Any], only_live: bool = False) -> None:
    console = stdout_console()
    for r in results:
        if r.error is not None:
            stderr_console().print(f"[red]{r.target.broker_name} {r.target.addr}:[/red] {r.error}")
            continue
        console.print(table(f"{r.target.broker_name} (id {r.target.broker_id}) {r.target.addr}",
                            ["key", "value", "live", "overridden"],
                            ([e.key, e.value, "yes" if e.live else "", "yes" if e.overridden else ""]
                             for e in r.value.entries if e.live or not only_live)))


@config_app.command("get")
@connected(ACCESS)
def broker_config_get(
    broker: Annotated[str, typer.Argument(help="Broker group name (all members) or host:port.")],
    keys: Annotated[list[str] | None, typer.Argument(help="Only these keys.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Only the keys that can be changed live.")] = False,
    *,
    conn: Conn,
) -> None:
    """The effective configuration of a broker (secrets not shown); 'live' keys can be set."""
    results = conn.call(lambda admin: admin.broker_config(broker))
    if keys:
        for r in results:
            if r.value is not None:
                kept = [e for e in r.value.entries if e.key in keys]
                del r.value.entries[:]
                r.value.entries.extend(kept)
    rows, ok = results_rows(results, "config")
    if conn.json:
        print_json({"brokers": rows})
    else:
        _config_rows(results, only_live=live)
    if not ok:
        raise FailedError


@config_app.command("set")
@connected(ACCESS)
def broker_config_set(
    broker: Annotated[str, typer.Argument(help="Broker group name (all members) or host:port.")],
    assignments: Annotated[list[str], typer.Argument(help="key=value (RocketMQ key names).")],
    *,
    conn: Conn,
) -> None:
    """Change live-safe keys without a restart; each broker validates them like broker.conf and
    keeps them in its store directory (applied over broker.conf at its next start). Other keys
    are refused with the reason."""
    changes: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: expected key=value")
        changes[key.strip()] = value.strip()
    results = conn.call(lambda admin: admin.set_broker_config(broker, changes))
    rows, ok = results_rows(results, "config")
    if conn.json:
        print_json({"brokers": rows})
    else:
        _config_rows(results)
    if not ok:
        raise FailedError

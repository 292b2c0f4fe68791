"""The ``pocketmq`` command: cluster, topic, group, send, consume, consumer progress, broker
status / HA status and benchmarks.

Every command takes ``--namesrv host:port[;host:port]`` (env ``POCKETMQ_NAMESRV``, default
127.0.0.1:9876) and ``--output table|json`` (env ``POCKETMQ_OUTPUT``). Broker calls of the admin
commands go through the NameServer's broker relay (``--access auto``, the default), so one
``kubectl port-forward svc/<release>-namesrv 9876`` reaches the whole cluster; ``--broker
host:port`` talks to one broker directly.

Exit codes: 0 success; 1 the operation failed (on at least one broker, or fewer messages than
``--count`` arrived); 2 bad usage.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer

from pocketmq.cli.output import (
    Output,
    human_bytes,
    ms_to_iso,
    print_json,
    print_json_line,
    proto_dict,
    stderr_console,
    stdout_console,
    table,
)
from pocketmq.errors import InvalidArgumentError, NotFoundError, PocketMQError

T = TypeVar("T")

app = typer.Typer(
    name="pocketmq",
    help="PocketMQ command line: administer a cluster, send and consume messages, benchmark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
cluster_app = typer.Typer(help="Clusters and their brokers.", no_args_is_help=True)
topic_app = typer.Typer(help="Topics: create, update, delete, list, route.", no_args_is_help=True)
group_app = typer.Typer(help="Subscription (consumer) groups.", no_args_is_help=True)
consumer_app = typer.Typer(help="Consumer groups at work.", no_args_is_help=True)
broker_app = typer.Typer(help="Broker status and replication.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks through the client (progress bar, summary table).",
                        no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(topic_app, name="topic")
app.add_typer(group_app, name="group")
app.add_typer(consumer_app, name="consumer")
app.add_typer(broker_app, name="broker")
app.add_typer(bench_app, name="bench")


class Access(enum.StrEnum):
    auto = "auto"
    relay = "relay"
    direct = "direct"


class StartFrom(enum.StrEnum):
    first = "first"
    last = "last"
    timestamp = "timestamp"


class BodyFormat(enum.StrEnum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


# -- options every command shares -------------------------------------------------------------

NamesrvOpt = Annotated[str, typer.Option(
    "--namesrv", "-n", envvar="POCKETMQ_NAMESRV",
    help="NameServer address(es), host:port[;host:port].")]
OutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", envvar="POCKETMQ_OUTPUT", case_sensitive=False, help="table or json.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Per-call timeout in seconds.")]
BrokerOpt = Annotated[str | None, typer.Option(
    "--broker", "-b", help="Talk to this one broker (host:port) directly instead of via the NameServer.")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", "-c", help="Only this cluster's brokers.")]
AccessOpt = Annotated[Access, typer.Option(
    "--access", envvar="POCKETMQ_ACCESS", case_sensitive=False,
    help="How broker calls travel: relay (through the NameServer only), direct (to broker addresses), "
         "auto (relay, direct if the NameServer has no relay).")]
DEFAULT_NAMESRV = "127.0.0.1:9876"


class FailedError(Exception):
    """Ends a command with exit code 1 after its output was printed."""


def _fail_json(exc: PocketMQError, output: Output) -> None:
    if output is Output.json:
        print_json({"error": exc.to_dict()})
    else:
        stderr_console().print(f"[red]error:[/red] {type(exc).__name__}: {exc}", markup=True)


def run_command(coro_fn: Callable[[], Coroutine[Any, Any, T]], output: Output) -> T:
    """Run one command's coroutine; PocketMQ errors end it with exit code 1."""
    logging.basicConfig(level=os.environ.get("POCKETMQ_LOG_LEVEL", "WARNING").upper(),
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return asyncio.run(coro_fn())
    except PocketMQError as exc:
        _fail_json(exc, output)
        raise typer.Exit(1) from None
    except FailedError:
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _admin(namesrv: str, broker: str | None = None, access: Access = Access.auto,
           timeout: float = 5.0) -> Any:
    from pocketmq.client.admin import AsyncAdmin

    return AsyncAdmin(namesrv, broker=broker, relay=access.value, timeout=timeout)


def _results_rows(results: list[Any]) -> tuple[list[dict[str, Any]], bool]:
    """BrokerResult list -> JSON rows and whether all succeeded."""
    rows = []
    ok = True
    for r in results:
        row: dict[str, Any] = {"cluster": r.target.cluster, "broker_name": r.target.broker_name,
                               "broker_id": r.target.broker_id, "addr": r.target.addr, "ok": r.ok}
        if r.error is not None:
            ok = False
            row["error"] = r.error.to_dict()
        rows.append(row)
    return rows, ok


# -- cluster ----------------------------------------------------------------------------------


@cluster_app.command("list")
def cluster_list(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV, output: OutputOpt = Output.table, timeout: TimeoutOpt = 5.0,
) -> None:
    """Every cluster, broker group and live broker the NameServer knows."""

    async def go() -> None:
        async with _admin(namesrv, timeout=timeout) as admin:
            info = await admin.cluster_info()
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
        if output is Output.json:
            print_json({"clusters": clusters, "brokers": brokers})
            return
        stdout_console().print(table(
            "Brokers",
            ["cluster", "broker", "id", "role", "address", "HA address", "metrics", "heartbeat age"],
            ([b["cluster"], b["broker_name"], b["broker_id"], b["role"], b["addr"], b["ha_addr"],
              b["metrics_addr"], f"{b['last_update_age_s']} s"] for b in brokers), right=["id"]))

    run_command(go, output)


# -- topics -----------------------------------------------------------------------------------


def _perm(value: str) -> int:
    v = value.strip().upper()
    perm = int(v) if v.isdigit() else (4 if "R" in v else 0) | (2 if "W" in v else 0) | (1 if "X" in v else 0)
    if perm <= 0 or perm > 7:
        raise typer.BadParameter(f"{value!r}: use R, W, RW (or the bits 4/2/6)")
    return perm


def _print_topic_results(title: str, topic: str, results: list[Any], output: Output) -> None:
    rows, ok = _results_rows(results)
    for row, r in zip(rows, results, strict=True):
        if r.ok and r.value is not None and not isinstance(r.value, bool):
            row["config"] = proto_dict(r.value)
        elif isinstance(r.value, bool):
            row["existed"] = r.value
    if output is Output.json:
        print_json({"topic": topic, "results": rows})
    else:
        from pocketmq.client.routes import perm_text

        def cells(r: Any) -> list[Any]:
            if r.error is not None:
                return [r.target.broker_name, r.target.addr, "[red]failed[/red]", "", "", "", str(r.error)]
            if isinstance(r.value, bool):
                result = "deleted" if r.value else "absent"
                return [r.target.broker_name, r.target.addr, result, "", "", "", ""]
            c = r.value
            return [r.target.broker_name, r.target.addr, "ok", c.read_queue_nums, c.write_queue_nums,
                    perm_text(c.perm), ""]

        stdout_console().print(table(f"{title} {topic}", ["broker", "address", "result", "read queues",
                                                           "write queues", "perm", "error"],
                                     (cells(r) for r in results), right=["read queues", "write queues"]))
    if not ok:
        raise FailedError


@topic_app.command("create")
def topic_create(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    read_queues: Annotated[int, typer.Option("--read-queues", "-r", min=1, max=1024)] = 4,
    write_queues: Annotated[int, typer.Option("--write-queues", "-w", min=1, max=1024)] = 4,
    perm: Annotated[str, typer.Option("--perm", help="R, W or RW.")] = "RW",
    order: Annotated[bool, typer.Option("--order/--no-order", help="Ordered topic flag.")] = False,
    message_type: Annotated[str, typer.Option(
        "--message-type",
        help="RocketMQ 5 message.type: NORMAL, FIFO, DELAY or TRANSACTION (default: any).")] = "",
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Create (or overwrite) a topic on every master broker (of --cluster, or --broker)."""
    perm_bits = _perm(perm)

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.create_topic(topic, read_queues=read_queues, write_queues=write_queues,
                                               perm=perm_bits, order=order, cluster=cluster,
                                               message_type=message_type.upper())
        _print_topic_results("create topic", topic, results, output)

    run_command(go, output)


@topic_app.command("update")
def topic_update(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    read_queues: Annotated[int | None, typer.Option("--read-queues", "-r", min=1, max=1024)] = None,
    write_queues: Annotated[int | None, typer.Option("--write-queues", "-w", min=1, max=1024)] = None,
    perm: Annotated[str | None, typer.Option("--perm", help="R, W or RW.")] = None,
    order: Annotated[bool | None, typer.Option("--order/--no-order")] = None,
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Change queue counts / permission of a topic on every master that has it."""
    perm_bits = _perm(perm) if perm is not None else None

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.update_topic(topic, read_queues=read_queues, write_queues=write_queues,
                                               perm=perm_bits, order=order, cluster=cluster)
        _print_topic_results("update topic", topic, results, output)

    run_command(go, output)


@topic_app.command("delete")
def topic_delete(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Delete a topic (its messages and offsets) on every master broker."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.delete_topic(topic, cluster=cluster)
        _print_topic_results("delete topic", topic, results, output)

    run_command(go, output)


@topic_app.command("list")
def topic_list(
    cluster: ClusterOpt = None,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Topics the NameServer knows (of --cluster)."""

    async def go() -> None:
        async with _admin(namesrv, timeout=timeout) as admin:
            topics = await admin.topics(cluster)
        if output is Output.json:
            print_json({"topics": topics})
        else:
            stdout_console().print(table(None, ["topic"], ([t] for t in topics)))

    run_command(go, output)


@topic_app.command("route")
def topic_route(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Which broker groups serve a topic, with how many queues, at which addresses."""

    async def go() -> None:
        from pocketmq.client.routes import perm_text

        async with _admin(namesrv, timeout=timeout) as admin:
            route = await admin.route(topic)
        if output is Output.json:
            print_json(route.to_dict())
            return
        console = stdout_console()
        console.print(table(f"Route of {topic}",
                            ["broker", "read queues", "write queues", "perm", "sys flag"],
                            ([q.broker_name, q.read_queue_nums, q.write_queue_nums, perm_text(q.perm),
                              q.topic_sys_flag] for q in route.queue_datas),
                            right=["read queues", "write queues"]))
        console.print(table(None, ["cluster", "broker", "id", "address"],
                            ([g.cluster, g.broker_name, bid, addr]
                             for _, g in sorted(route.brokers.items())
                             for bid, addr in sorted(g.addrs.items())),
                            right=["id"]))
        if route.order_topic_conf:
            console.print(f"order topic conf: {route.order_topic_conf}")

    run_command(go, output)


# -- groups -----------------------------------------------------------------------------------


@group_app.command("create")
def group_create(
    group: Annotated[str, typer.Argument(help="Group name.")],
    consume_enable: Annotated[bool, typer.Option("--consume-enable/--consume-disable")] = True,
    retry_max_times: Annotated[int, typer.Option("--retry-max-times", min=0)] = 16,
    broadcast: Annotated[bool, typer.Option("--broadcast/--no-broadcast")] = False,
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Create (or overwrite) a subscription group on every master broker."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.create_group(group, consume_enable=consume_enable, broadcast=broadcast,
                                               retry_max_times=retry_max_times, cluster=cluster)
        rows, ok = _results_rows(results)
        for row, r in zip(rows, results, strict=True):
            if r.value is not None:
                row["config"] = proto_dict(r.value)
        if output is Output.json:
            print_json({"group": group, "results": rows})
        else:
            stdout_console().print(table(f"create group {group}", ["broker", "address", "result", "error"], (
                [r.target.broker_name, r.target.addr, "ok" if r.ok else "failed", str(r.error or "")]
                for r in results)))
        if not ok:
            raise FailedError

    run_command(go, output)


@group_app.command("list")
def group_list(
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Subscription groups defined on the master brokers."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.groups(cluster)
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
        if output is Output.json:
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

    run_command(go, output)


# -- consumer progress ------------------------------------------------------------------------


@consumer_app.command("progress")
def consumer_progress(
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t",
        help="Topic the group consumes (default: every topic it committed offsets for).")] = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Per queue: the broker's max offset, the group's committed offset, the lag and the member
    that owns the queue."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            topics = [topic] if topic else await admin.consumer_topics(group)
            if not topics:
                raise NotFoundError(f"consumer group {group!r} has no committed offset on any master")
            rows = [row for t in topics for row in await admin.consumer_progress(group, t)]
        total = sum(r.lag for r in rows)
        if output is Output.json:
            print_json({"group": group, "topics": topics, "total_lag": total,
                        "queues": [r.to_dict() for r in rows]})
            return
        stdout_console().print(table(
            f"Consumer progress of {group} on {', '.join(topics)} (total lag {total})",
            ["topic", "broker", "queue", "broker offset", "consumer offset", "lag", "client"],
            ([r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.broker_offset,
              "-" if r.consumer_offset is None else r.consumer_offset, r.lag, r.client or "-"] for r in rows),
            right=["queue", "broker offset", "consumer offset", "lag"]))

    run_command(go, output)


# -- broker -----------------------------------------------------------------------------------


@broker_app.command("status")
def broker_status(
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Identity, role, commit-log offsets and counters of every broker (or --broker)."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.broker_status(cluster)
        rows, ok = _results_rows(results)
        for row, r in zip(rows, results, strict=True):
            if r.value is not None:
                row["status"] = proto_dict(r.value)
        if output is Output.json:
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

    run_command(go, output)


@broker_app.command("ha-status")
def broker_ha_status(
    cluster: ClusterOpt = None,
    broker: BrokerOpt = None,
    access: AccessOpt = Access.auto,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Replication: per slave of each master its ack offset, lag and connection time; each
    slave's own view of its master."""

    async def go() -> None:
        async with _admin(namesrv, broker, access, timeout) as admin:
            results = await admin.ha_status(cluster)
        rows, ok = _results_rows(results)
        for row, r in zip(rows, results, strict=True):
            if r.value is not None:
                row["ha"] = proto_dict(r.value)
        if output is Output.json:
            print_json({"brokers": rows})
        else:
            console = stdout_console()
            slave_rows = []
            for r in results:
                if r.value is None or not r.target.is_master:
                    continue
                for s in r.value.slaves:
                    slave_rows.append([r.target.broker_name, r.target.addr, s.slave_addr, s.ack_offset,
                                       s.lag_bytes, human_bytes(s.lag_bytes), ms_to_iso(s.connected_since_ms),
                                       ms_to_iso(s.last_ack_timestamp_ms)])
            console.print(table("Slaves as their masters see them", [
                "broker", "master", "slave", "ack offset", "lag bytes", "lag", "connected since", "last ack"],
                slave_rows, right=["ack offset", "lag bytes", "lag"]))
            console.print(table("Brokers", [
                "broker", "id", "address", "role", "max offset", "push2slave max", "slaves", "connected",
                "error"],
                ([r.target.broker_name, r.target.broker_id, r.target.addr,
                  r.value.broker_role if r.value else "", r.value.commit_log_max_offset if r.value else "",
                  r.value.push2slave_max_offset if r.value and r.target.is_master else "",
                  len(r.value.slaves) if r.value and r.target.is_master else "",
                  ("yes" if r.value.connected else "no") if r.value and not r.target.is_master else "",
                  str(r.error or "")] for r in results),
                right=["id", "max offset", "push2slave max", "slaves"]))
        if not ok:
            raise FailedError

    run_command(go, output)


# -- send / consume ---------------------------------------------------------------------------


def _properties(items: list[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: expected key=value", param_hint="--property")
        props[key] = value
    return props


@app.command("send")
def send(
    topic: Annotated[str, typer.Argument(help="Topic.")],
    body: Annotated[str | None, typer.Argument(help="Message body; '-' or none reads stdin.")] = None,
    tags: Annotated[str, typer.Option("--tags", help="The message's tag.")] = "",
    keys: Annotated[str, typer.Option("--keys", help="Business keys, space separated.")] = "",
    prop: Annotated[list[str] | None,
                    typer.Option("--property", "-p", help="key=value (repeatable).")] = None,
    delay_level: Annotated[int, typer.Option("--delay-level", min=0,
                                             help="1..18 (1s 5s 10s 30s 1m ...).")] = 0,
    sharding_key: Annotated[str | None, typer.Option("--sharding-key", help="Same key, same queue.")] = None,
    count: Annotated[int, typer.Option("--count", min=1, help="Send the message this many times.")] = 1,
    lines: Annotated[bool, typer.Option("--lines", help="Each stdin line is one message.")] = False,
    group: Annotated[str, typer.Option("--group", help="Producer group.")] = "pocketmq-cli",
    access: Annotated[Access, typer.Option("--access", envvar="POCKETMQ_ACCESS", case_sensitive=False,
                                           help="direct (default), relay or auto.")] = Access.direct,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Send a message (or each stdin line with --lines) and print where it was stored."""
    from pocketmq.client.message import Message

    if body is None or body == "-":
        data = sys.stdin.buffer.read()
        bodies = [line for line in data.split(b"\n") if line] if lines else [data]
    else:
        bodies = [body.encode()]
    properties = _properties(prop or [])
    try:
        messages = [Message(topic, b, tags=tags, keys=keys, properties=properties, delay_level=delay_level)
                    for b in bodies for _ in range(count)]
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def go() -> None:
        from pocketmq.client.producer import AsyncProducer

        results = []
        async with AsyncProducer(namesrv, group=group, send_timeout=timeout, relay=access.value) as producer:
            for msg in messages:
                results.append(await producer.send(msg, sharding_key=sharding_key))
        if output is Output.json:
            print_json({"results": [r.to_dict() for r in results]})
        else:
            stdout_console().print(table(None, ["status", "msg id", "broker", "queue", "offset"], (
                [r.status.value, r.msg_id, r.queue.broker_name, r.queue.queue_id, r.queue_offset]
                for r in results),
                right=["queue", "offset"]))

    run_command(go, output)


@app.command("consume")
def consume(
    topic: Annotated[str, typer.Argument(help="Topic.")],
    group: Annotated[str | None,
                     typer.Option("--group", "-g", help="Consumer group (default: a new one).")] = None,
    tags: Annotated[str, typer.Option("--tags", help="Tag expression: '*' or 'a || b'.")] = "*",
    start: Annotated[StartFrom, typer.Option("--from", case_sensitive=False,
                                             help="Where a group with no offset starts.")] = StartFrom.first,
    timestamp: Annotated[float | None,
                         typer.Option("--timestamp", help="--from timestamp: epoch ms.")] = None,
    count: Annotated[int | None,
                     typer.Option("--count", min=1, help="Stop after this many messages.")] = None,
    wait: Annotated[float, typer.Option("--wait", min=0,
                                        help="Give up after this many seconds (0 = never).")] = 0,
    idle: Annotated[float, typer.Option("--idle", min=0,
                                        help="Stop after this long without a message (0 = never).")] = 0,
    body_format: Annotated[BodyFormat, typer.Option("--body", case_sensitive=False)] = BodyFormat.text,
    access: Annotated[Access, typer.Option("--access", envvar="POCKETMQ_ACCESS", case_sensitive=False,
                                           help="direct (default), relay or auto.")] = Access.direct,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 5.0,
) -> None:
    """Consume messages and print them as they arrive (JSON: one object per line). Offsets are
    committed for the group on exit."""
    group_name = group or f"pocketmq-cli-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom

        consumer = AsyncConsumer(
            group_name, namesrv, consume_from=ConsumeFrom(start.value),
            consume_timestamp=timestamp / 1000 if timestamp is not None else None,
            request_timeout=timeout, long_poll_timeout=5.0, rebalance_interval=2.0, relay=access.value)
        consumer.subscribe(topic, tags)
        received = 0
        console = stdout_console()
        deadline = time.monotonic() + wait if wait else None
        try:
            await consumer.start()
            while count is None or received < count:
                limit = [x for x in (idle or None, deadline and deadline - time.monotonic()) if x is not None]
                step = min(limit) if limit else None
                if step is not None and step <= 0:
                    break
                msg = await consumer.receive(step)
                if msg is None:
                    break
                received += 1
                if output is Output.json:
                    print_json_line(msg.to_dict(body_format.value))
                else:
                    shown = msg.to_dict(body_format.value)["body"]
                    console.print(f"{msg.queue} offset={msg.queue_offset} id={msg.msg_id} "
                                  f"tags={msg.tags or '-'} "
                                  f"keys={' '.join(msg.keys) or '-'}  {shown if shown is not None else ''}",
                                  markup=False)
            await consumer.commit()
        finally:
            await consumer.close()
        if output is Output.table:
            stderr_console().print(f"{received} message(s) consumed by group {group_name}")
        if count is not None and received < count:
            stderr_console().print(f"[red]expected {count} message(s), got {received}[/red]")
            raise FailedError

    run_command(go, output)


# -- bench ------------------------------------------------------------------------------------


@bench_app.command("produce")
def bench_produce(
    topic: Annotated[str, typer.Option("--topic", "-t")] = "BenchTopic",
    messages: Annotated[int, typer.Option("--messages", "-m", min=1, help="Messages to send.")] = 100_000,
    duration: Annotated[float, typer.Option("--duration", min=0,
                                            help="Stop after seconds (0 = by count).")] = 0,
    size: Annotated[int, typer.Option("--size", "-s", min=1, help="Body bytes.")] = 1024,
    batch: Annotated[int, typer.Option("--batch", min=1, max=4096, help="Messages per request.")] = 32,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Requests in flight.")] = 8,
    tags: Annotated[str, typer.Option("--tags")] = "",
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Send messages as fast as possible; print msgs/s, MB/s and request latency."""
    from pocketmq.cli import bench

    summary = run_command(lambda: bench.produce(
        namesrv, topic=topic, messages=messages, duration=duration, size=size, batch=batch,
        concurrency=concurrency, tags=tags, timeout=timeout, progress=output is Output.table), output)
    bench.print_summary(summary, output)
    if summary.errors and not summary.messages:
        raise typer.Exit(1)


@bench_app.command("consume")
def bench_consume(
    topic: Annotated[str, typer.Option("--topic", "-t")] = "BenchTopic",
    group: Annotated[str | None, typer.Option("--group", "-g", help="Default: a new group.")] = None,
    messages: Annotated[int, typer.Option("--messages", "-m", min=1, help="Stop after this many.")] = 100_000,
    duration: Annotated[float, typer.Option("--duration", min=0,
                                            help="Stop after seconds (0 = by count).")] = 0,
    idle: Annotated[float, typer.Option("--idle", min=0.1,
                                        help="Stop after this long without messages.")] = 10.0,
    start: Annotated[StartFrom, typer.Option("--from", case_sensitive=False)] = StartFrom.first,
    batch: Annotated[int, typer.Option("--batch", min=1, max=4096, help="Messages per pull.")] = 256,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    output: OutputOpt = Output.table,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Consume as fast as possible; print msgs/s, MB/s and end-to-end latency (store to receive)."""
    from pocketmq.cli import bench

    summary = run_command(lambda: bench.consume(
        namesrv, topic=topic, group=group or f"bench-{uuid.uuid4().hex[:8]}", messages=messages,
        duration=duration, idle=idle, start=start.value, batch=batch, timeout=timeout,
        progress=output is Output.table), output)
    bench.print_summary(summary, output)
    if not summary.messages:
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pocketmq`` console script."""
    try:
        app(args=argv, prog_name="pocketmq", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0

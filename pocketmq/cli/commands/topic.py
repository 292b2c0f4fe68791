"""``pocketmq topic``: create, update, delete, list and route topics."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, CLUSTER, Conn, FailedError, connected, results_rows
from pocketmq.cli.output import print_json, proto_dict, stdout_console, table

app = typer.Typer(help="Topics: create, update, delete, list, route.", no_args_is_help=True)

TopicArg = Annotated[str, typer.Argument(help="Topic name.")]
_READ_QUEUES = typer.Option("--read-queues", "-r", min=1, max=1024)
_WRITE_QUEUES = typer.Option("--write-queues", "-w", min=1, max=1024)
_PERM = typer.Option("--perm", help="R, W or RW.")


def _perm(value: str) -> int:
    v = value.strip().upper()
    perm = int(v) if v.isdigit() else (4 if "R" in v else 0) | (2 if "W" in v else 0) | (1 if "X" in v else 0)
    if perm <= 0 or perm > 7:
        raise typer.BadParameter(f"{value!r}: use R, W, RW (or the bits 4/2/6)")
    return perm


def _print_topic_results(title: str, topic: str, results: list[Any], conn: Conn) -> None:
    rows, ok = results_rows(results)
    for row, r in zip(rows, results, strict=True):
        if r.ok and r.value is not None and not isinstance(r.value, bool):
            row["config"] = proto_dict(r.value)
        elif isinstance(r.value, bool):
            row["existed"] = r.value
    if conn.json:
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


@app.command("create")
@connected(CLUSTER, BROKER, ACCESS)
def topic_create(
    topics: Annotated[list[str] | None, typer.Argument(help="Topic name(s).", show_default=False)] = None,
    read_queues: Annotated[int, _READ_QUEUES] = 4,
    write_queues: Annotated[int, _WRITE_QUEUES] = 4,
    perm: Annotated[str, _PERM] = "RW",
    order: Annotated[bool, typer.Option("--order/--no-order", help="Ordered topic flag.")] = False,
    file: Annotated[Path | None, typer.Option(
        "--file", "-f", help="Also create the topics named in this file (one a line; - reads stdin; "
        "blank lines and # comments are skipped).", show_default=False)] = None,
    message_type: Annotated[str, typer.Option(
        "--message-type",
        help="RocketMQ 5 message.type: NORMAL, FIFO, DELAY or TRANSACTION (default: any).")] = "",
    *,
    conn: Conn,
) -> None:
    """Create (or overwrite) topics on every master broker (of --cluster, or --broker). Several
    topics (names, --file) go in batches, one metadata write per batch on each broker."""
    perm_bits = _perm(perm)
    names = list(topics or [])
    if file is not None:
        text = sys.stdin.read() if str(file) == "-" else _read_text(file)
        names += [line.strip() for line in text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")]
    if not names:
        raise typer.BadParameter("give at least one topic name (or --file)")
    if len(names) == 1 and file is None:
        results = conn.call(lambda admin: admin.create_topic(
            names[0], read_queues=read_queues, write_queues=write_queues, perm=perm_bits, order=order,
            cluster=conn.cluster, message_type=message_type.upper()))
        _print_topic_results("create topic", names[0], results, conn)
        return
    batch = conn.call(lambda admin: admin.create_topics(
        names, read_queues=read_queues, write_queues=write_queues, perm=perm_bits, order=order,
        cluster=conn.cluster, message_type=message_type.upper()))
    rows, ok = results_rows(batch)
    for row, r in zip(rows, batch, strict=True):
        if r.ok and r.value is not None:
            row["created"] = len(r.value)
    if conn.json:
        print_json({"topics": len(names), "results": rows})
    else:
        stdout_console().print(table(
            f"create {len(names)} topics", ["broker", "address", "result", "topics", "error"],
            ([r.target.broker_name, r.target.addr, "ok" if r.ok else "[red]failed[/red]",
              len(r.value) if r.ok and r.value is not None else "", "" if r.error is None else str(r.error)]
             for r in batch), right=["topics"]))
    if not ok:
        raise FailedError


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None


@app.command("update")
@connected(CLUSTER, BROKER, ACCESS)
def topic_update(
    topic: TopicArg,
    read_queues: Annotated[int | None, _READ_QUEUES] = None,
    write_queues: Annotated[int | None, _WRITE_QUEUES] = None,
    perm: Annotated[str | None, _PERM] = None,
    order: Annotated[bool | None, typer.Option("--order/--no-order")] = None,
    *,
    conn: Conn,
) -> None:
    """Change queue counts / permission of a topic on every master that has it."""
    perm_bits = _perm(perm) if perm is not None else None

    results = conn.call(lambda admin: admin.update_topic(
        topic, read_queues=read_queues, write_queues=write_queues, perm=perm_bits, order=order,
        cluster=conn.cluster))
    _print_topic_results("update topic", topic, results, conn)


@app.command("delete")
@connected(CLUSTER, BROKER, ACCESS)
def topic_delete(topic: TopicArg, *, conn: Conn) -> None:
    """Delete a topic (its messages and offsets) on every master broker."""
    results = conn.call(lambda admin: admin.delete_topic(topic, cluster=conn.cluster))
    _print_topic_results("delete topic", topic, results, conn)


@app.command("list")
@connected(CLUSTER)
def topic_list(*, conn: Conn) -> None:
    """Topics the NameServer knows (of --cluster)."""
    topics = conn.call(lambda admin: admin.topics(conn.cluster))
    if conn.json:
        print_json({"topics": topics})
    else:
        stdout_console().print(table(None, ["topic"], ([t] for t in topics)))


@app.command("route")
@connected()
def topic_route(topic: TopicArg, *, conn: Conn) -> None:
    """Which broker groups serve a topic, with how many queues, at which addresses."""
    from pocketmq.client.routes import perm_text

    route = conn.call(lambda admin: admin.route(topic))
    if conn.json:
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

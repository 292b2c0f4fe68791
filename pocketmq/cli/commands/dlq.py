"""``pocketmq dlq``: dead-letter topics (``%DLQ%<group>``): list them with their counts, show
their messages, send them back to the topic they came from. Broker calls go through the
NameServer's relay by default (``--access``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pocketmq.cli.commands.messages import BodyFormat
from pocketmq.cli.common import ACCESS, BROKER, CLUSTER, Conn, FailedError, connected
from pocketmq.cli.output import print_json, stderr_console, stdout_console, table

app = typer.Typer(help="Dead-letter topics of consumer groups.", no_args_is_help=True)
GroupOpt = Annotated[str, typer.Option("--group", "-g", help="Consumer group.")]


@app.command("list")
@connected(CLUSTER, BROKER, ACCESS)
def dlq_list(*, conn: Conn) -> None:
    """Every dead-letter topic the NameServer knows, with its message count."""
    from pocketmq.client.deadletters import dead_letter_queues

    queues = conn.call(lambda admin: dead_letter_queues(admin, conn.cluster))
    if conn.json:
        print_json({"dead_letter_queues": [q.to_dict() for q in queues]})
        return
    stdout_console().print(table("Dead-letter topics", ["group", "topic", "messages", "per broker"], (
        [q.group, q.topic, q.count, " ".join(f"{b}={n}" for b, n in sorted(q.counts.items())) or "-"]
        for q in queues), right=["messages"]))


@app.command("show")
@connected(BROKER, ACCESS)
def dlq_show(
    group: GroupOpt,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many.")] = 32,
    body_format: Annotated[BodyFormat, typer.Option("--body", case_sensitive=False)] = BodyFormat.text,
    *,
    conn: Conn,
) -> None:
    """The dead letters of a group: id, original topic, reconsume times, body."""
    from pocketmq.client.deadletters import read_dead_letters

    letters = conn.call(lambda admin: read_dead_letters(admin, group, limit))
    if conn.json:
        print_json({"group": group, "messages": [d.to_dict(body_format.value) for d in letters]})
        return
    stdout_console().print(table(
        f"Dead letters of {group}", ["msg id", "original topic", "reconsume times", "tags", "stored", "body"],
        ([d.message.msg_id, d.original_topic or "-", d.reconsume_times, d.message.tags or "-",
          d.message.store_timestamp, d.to_dict(body_format.value)["body"]] for d in letters),
        right=["reconsume times"]))


@app.command("resend")
@connected(BROKER, ACCESS)
def dlq_resend(
    group: GroupOpt,
    msg_id: Annotated[list[str] | None, typer.Option(
        "--msg-id", help="Dead letter to send again (repeatable; its id as `dlq show` lists it).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Send every dead letter of the group again.")] = False,
    *,
    conn: Conn,
) -> None:
    """Send dead letters again to their original topic (the dead letters stay where they are)."""
    if bool(msg_id) == all_:
        raise typer.BadParameter("give --msg-id (one or more) or --all")
    wanted = set(msg_id or ())

    async def go(admin: Any) -> list[dict[str, Any]]:
        from pocketmq.client.deadletters import read_dead_letters, resend_message
        from pocketmq.client.producer import AsyncProducer

        letters = [d for d in await read_dead_letters(admin, group)
                   if all_ or d.message.msg_id in wanted or d.original_msg_id in wanted]
        rows: list[dict[str, Any]] = []
        if not letters:
            return rows
        async with AsyncProducer(conn.namesrv, send_timeout=conn.timeout,
                                 relay="direct" if conn.broker else conn.access.value) as producer:
            for d in letters:
                row: dict[str, Any] = {"dead_letter_id": d.message.msg_id, "topic": d.original_topic}
                try:
                    result = await producer.send(resend_message(d))
                    row.update(status=result.status.value, msg_id=result.msg_id)
                except Exception as exc:  # one failure must not hide the others' results
                    row.update(status="failed", error=str(exc))
                rows.append(row)
        return rows

    rows = conn.call(go)
    missing = wanted - {r["dead_letter_id"] for r in rows}
    if conn.json:
        print_json({"group": group, "resent": rows, "not_found": sorted(missing)})
    else:
        stdout_console().print(table(f"Re-sent dead letters of {group}",
                                     ["dead letter", "topic", "status", "new msg id / error"], (
            [r["dead_letter_id"], r["topic"], r["status"], r.get("msg_id") or r.get("error", "")]
            for r in rows)))
        for m in sorted(missing):
            stderr_console().print(f"[red]no dead letter {m} in group {group}[/red]")
    if missing or any(r["status"] == "failed" for r in rows):
        raise FailedError

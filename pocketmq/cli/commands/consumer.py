"""``pocketmq consumer``: consumer groups at work (per-queue progress and lag)."""

from __future__ import annotations

import datetime
from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, Conn, FailedError, connected, results_rows
from pocketmq.cli.output import print_json, proto_dict, stderr_console, stdout_console, table
from pocketmq.errors import NotFoundError

app = typer.Typer(help="Consumer groups at work.", no_args_is_help=True)


@app.command("progress")
@connected(BROKER, ACCESS)
def consumer_progress(
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t",
        help="Topic the group consumes (default: every topic it committed offsets for).")] = None,
    *,
    conn: Conn,
) -> None:
    """Per queue: the broker's max offset, the group's committed offset, the lag and the member
    that owns the queue."""

    async def fetch(admin: Any) -> tuple[list[str], list[Any]]:
        topics = [topic] if topic else await admin.consumer_topics(group)
        if not topics:
            raise NotFoundError(f"consumer group {group!r} has no committed offset on any master")
        return topics, [row for t in topics for row in await admin.consumer_progress(group, t)]

    topics, rows = conn.call(fetch)
    total = sum(r.lag for r in rows)
    if conn.json:
        print_json({"group": group, "topics": topics, "total_lag": total,
                    "queues": [r.to_dict() for r in rows]})
        return
    stdout_console().print(table(
        f"Consumer progress of {group} on {', '.join(topics)} (total lag {total})",
        ["topic", "broker", "queue", "broker offset", "consumer offset", "lag", "client"],
        ([r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.broker_offset,
          "-" if r.consumer_offset is None else r.consumer_offset, r.lag, r.client or "-"] for r in rows),
        right=["queue", "broker offset", "consumer offset", "lag"]))


def parse_time_ms(text: str) -> int:
    """``--to-time``: milliseconds since the epoch, or an ISO 8601 time (without a zone it is
    the local time), e.g. ``2026-11-24T12:30:00Z``."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither ms since the epoch nor an ISO 8601 time") from None
    return int(when.timestamp() * 1000)


@app.command("reset")
@connected(ACCESS)
def consumer_reset(
    group: Annotated[str, typer.Option("--group", "-g", help="Consumer group.")],
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets to move.")],
    to_time: Annotated[str | None, typer.Option(
        "--to-time",
        help="First message stored at or after this time (ISO 8601 or ms since the epoch).")] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to-offset", help="This queue offset in every queue (clamped to each queue's range).")] = None,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="The oldest stored message.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Skip everything stored so far.")] = False,
    *,
    conn: Conn,
) -> None:
    """Move a consumer group's offsets of a topic on every master (RocketMQ's resetOffsetByTime).
    Works online: running members notice within a pull or a heartbeat, drop what they hold and
    read again from the new offsets."""
    if sum([to_time is not None, to_offset is not None, to_earliest, to_latest]) != 1:
        raise typer.BadParameter("give exactly one of --to-time, --to-offset, --to-earliest, --to-latest")
    ts = parse_time_ms(to_time) if to_time is not None else None
    results = conn.call(lambda admin: admin.reset_offsets(
        group, topic, timestamp_ms=ts, offset=to_offset, earliest=to_earliest, latest=to_latest))
    rows, ok = results_rows(results, "reset")
    if conn.json:
        print_json({"group": group, "topic": topic, "brokers": rows})
    else:
        stdout_console().print(table(
            f"Offsets of {group} on {topic} reset", ["broker", "queue", "old offset", "new offset", "error"],
            ([r.target.broker_name, q.queue_id, "-" if q.old_offset < 0 else q.old_offset, q.new_offset, ""]
             for r in results if r.value is not None for q in r.value.queues),
            right=["queue", "old offset", "new offset"]))
        for r in results:
            if r.error is not None:
                stderr_console().print(f"[red]{r.target.broker_name} {r.target.addr}:[/red] {r.error}")
    if not ok:
        raise FailedError


@app.command("connections")
@connected(ACCESS)
def consumer_connections(
    group: Annotated[str, typer.Option("--group", "-g", help="Consumer group.")],
    *,
    conn: Conn,
) -> None:
    """The group's live members: client id, address, SDK language and version, protocol and
    subscriptions (own clients by heartbeat, RocketMQ 5 SDKs by their Telemetry settings)."""
    members, results = conn.call(lambda admin: admin.consumer_connections(group))
    _, ok = results_rows(results)
    if conn.json:
        print_json({"group": group, "connections": [proto_dict(c) for c in members]})
    else:
        stdout_console().print(table(
            f"Connections of {group} ({len(members)})",
            ["client id", "address", "language", "version", "protocol", "type", "subscriptions"],
            ([c.client_id, c.addr, c.language, c.version, c.protocol, c.client_type,
              ", ".join(f"{s.topic}:{s.expression}" for s in c.subscriptions)] for c in members)))
    if not ok and not members:
        raise FailedError

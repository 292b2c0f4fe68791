"""``pocketmq consumer``: consumer groups at work (per-queue progress and lag)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, Conn, connected
from pocketmq.cli.output import print_json, stdout_console, table
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

"""``pocketmq send`` and ``pocketmq consume``: messages through the real producer and consumer."""

from __future__ import annotations

import enum
import sys
import time
import uuid
from typing import Annotated

import typer

from pocketmq.cli.common import CLIENT_ACCESS, Conn, FailedError, StartFrom, connected
from pocketmq.cli.output import print_json, print_json_line, stderr_console, stdout_console, table
from pocketmq.errors import InvalidArgumentError

TopicArg = Annotated[str, typer.Argument(help="Topic.")]


class BodyFormat(enum.StrEnum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


def _properties(items: list[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: expected key=value", param_hint="--property")
        props[key] = value
    return props


@connected(CLIENT_ACCESS)
def send(
    topic: TopicArg,
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
    *,
    conn: Conn,
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
        async with AsyncProducer(conn.namesrv, group=group, send_timeout=conn.timeout,
                                 relay=conn.access.value, tls=conn.client_tls) as producer:
            for msg in messages:
                results.append(await producer.send(msg, sharding_key=sharding_key))
        if conn.json:
            print_json({"results": [r.to_dict() for r in results]})
        else:
            stdout_console().print(table(None, ["status", "msg id", "broker", "queue", "offset"], (
                [r.status.value, r.msg_id, r.queue.broker_name, r.queue.queue_id, r.queue_offset]
                for r in results),
                right=["queue", "offset"]))

    conn.run(go)


@connected(CLIENT_ACCESS)
def consume(
    topic: TopicArg,
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
    *,
    conn: Conn,
) -> None:
    """Consume messages and print them as they arrive (JSON: one object per line). Offsets are
    committed for the group on exit."""
    group_name = group or f"pocketmq-cli-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom

        consumer = AsyncConsumer(
            group_name, conn.namesrv, consume_from=ConsumeFrom(start.value),
            consume_timestamp=timestamp / 1000 if timestamp is not None else None,
            request_timeout=conn.timeout, long_poll_timeout=5.0, rebalance_interval=2.0,
            relay=conn.access.value, tls=conn.client_tls)
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
                if conn.json:
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
        if not conn.json:
            stderr_console().print(f"{received} message(s) consumed by group {group_name}")
        if count is not None and received < count:
            stderr_console().print(f"[red]expected {count} message(s), got {received}[/red]")
            raise FailedError

    conn.run(go)

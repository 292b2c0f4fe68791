"""``pocketmq message``: find messages by id or key, and browse a queue (through the relay)."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated, Any

import typer

from pocketmq.cli.common import ACCESS, BROKER, Conn, FailedError, connected
from pocketmq.cli.output import ms_to_iso, print_json, stderr_console, stdout_console, table
from pocketmq.wire.messages import ReceivedMessage

app = typer.Typer(help="Find messages by id or key; browse a queue.", no_args_is_help=True)


class Body(enum.StrEnum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


BodyOpt = Annotated[Body, typer.Option("--body", case_sensitive=False,
                                       help="Show bodies as text, hex, base64 or not at all.")]
HexOpt = Annotated[bool, typer.Option("--hex", help="Same as --body hex.")]
#: Longest body text shown in a table cell.
CELL_BODY = 60


def parse_time(value: str | None, option: str) -> int | None:
    """``--since/--until/--from-time``: epoch ms, or an ISO 8601 time (no zone = UTC)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{value!r}: expected epoch milliseconds or an ISO time like "
                                 "2026-11-24T12:00:00Z", param_hint=option) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _body_format(body: Body, hex_: bool) -> str:
    return "hex" if hex_ else body.value


def _cell(msg: ReceivedMessage, fmt: str) -> str:
    shown = msg.to_dict(fmt)["body"]
    text = "" if shown is None else str(shown)
    return text if len(text) <= CELL_BODY else text[:CELL_BODY - 1] + "…"


def _rows(messages: list[ReceivedMessage], fmt: str) -> list[list[Any]]:
    return [[m.queue.broker_name, m.queue.queue_id, m.queue_offset, m.msg_id, ms_to_iso(m.store_timestamp),
             m.tags or "-", " ".join(m.keys) or "-", _cell(m, fmt)] for m in messages]


COLUMNS = ["broker", "queue", "offset", "msg id", "stored", "tags", "keys", "body"]


@app.command("get")
@connected(BROKER, ACCESS)
def get(
    msg_id: Annotated[str, typer.Argument(help="Offset message id or unique (SDK) message id.")],
    topic: Annotated[str | None, typer.Option("--topic", "-t",
                                              help="Look a unique message id up in this topic only "
                                                   "(default: every topic of every broker group).")] = None,
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", min=0, help="Read from this member of the group (0 = master).")] = None,
    body: BodyOpt = Body.text,
    hex_: HexOpt = False,
    *,
    conn: Conn,
) -> None:
    """Show one message with all its properties."""
    fmt = _body_format(body, hex_)
    msg: ReceivedMessage = conn.call(lambda a: a.get_message(msg_id, topic=topic, broker_id=broker_id))
    data = msg.to_dict(fmt)
    if conn.json:
        print_json({"message": data})
        return
    rows: list[list[Any]] = [[k, data[k]] for k in (
        "topic", "broker_name", "queue_id", "queue_offset", "msg_id", "tags", "born_host", "store_host",
        "reconsume_times", "body_size")]
    rows.insert(3, ["keys", " ".join(msg.keys) or "-"])
    rows += [["born", ms_to_iso(msg.born_timestamp)], ["stored", ms_to_iso(msg.store_timestamp)],
             ["commit log offset", msg.commit_log_offset]]
    rows += [[f"property {k}", v] for k, v in sorted(msg.properties.items())]
    rows.append(["body", "" if data["body"] is None else data["body"]])
    stdout_console().print(table(f"Message {msg.msg_id}", ["field", "value"], rows))


@app.command("find")
@connected(ACCESS)
def find(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic.")],
    key: Annotated[str, typer.Option("--key", "-k", help="Business key (KEYS) or unique message id.")],
    since: Annotated[str | None, typer.Option(
        "--since", help="Stored at or after (epoch ms or ISO time).")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Stored at or before (epoch ms or ISO time).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = 64,
    unique: Annotated[bool, typer.Option("--unique", help="Match only the unique message id.")] = False,
    body: BodyOpt = Body.text,
    hex_: HexOpt = False,
    *,
    conn: Conn,
) -> None:
    """Messages of a topic by key, from every broker group of the topic, newest first. Exit 1
    when nothing is found or a broker group could not answer."""
    fmt = _body_format(body, hex_)
    begin, end = parse_time(since, "--since"), parse_time(until, "--until")
    result = conn.call(lambda a: a.find_messages(topic, key, begin, end, limit, unique=unique))
    if conn.json:
        print_json({"topic": topic, "key": key, **result.to_dict(fmt)})
    else:
        stdout_console().print(table(f"Messages of {topic} with key {key!r} ({len(result.messages)})",
                                     COLUMNS,
                                     _rows(result.messages, fmt), right=["queue", "offset"]))
        for name, error in sorted(result.errors.items()):
            stderr_console().print(f"[red]broker {name}:[/red] {type(error).__name__}: {error}")
    if not result.messages or result.errors:
        raise FailedError


@app.command("browse")
@connected(ACCESS)
def browse(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic.")],
    queue: Annotated[int, typer.Option("--queue", "-q", min=0, help="Queue id.")] = 0,
    broker_name: Annotated[str | None, typer.Option(
        "--broker-name", help="Broker group (default: the topic's first).")] = None,
    from_offset: Annotated[int | None, typer.Option(
        "--from-offset", min=0, help="Queue offset to start at (default: the oldest).")] = None,
    from_time: Annotated[str | None, typer.Option("--from-time",
                                                  help="Start at the first message stored at or after this "
                                                       "(epoch ms or ISO time).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=256, help="Messages per page.")] = 20,
    pages: Annotated[int, typer.Option(
        "--pages", min=1, help="Pages to fetch (each continues the last).")] = 1,
    body: BodyOpt = Body.text,
    hex_: HexOpt = False,
    *,
    conn: Conn,
) -> None:
    """Messages of one queue in order, a page at a time; prints where the next page starts
    (pass it as --from-offset)."""
    if from_offset is not None and from_time is not None:
        raise typer.BadParameter("give --from-offset or --from-time, not both")
    fmt = _body_format(body, hex_)
    start_ms = parse_time(from_time, "--from-time")

    async def fetch(admin: Any) -> list[Any]:
        got = []
        page = await admin.browse(topic, queue, broker_name=broker_name, from_offset=from_offset,
                                  from_time=start_ms, limit=limit)
        got.append(page)
        while len(got) < pages and not page.at_end:
            page = await admin.browse(topic, queue, broker_name=page.queue.broker_name,
                                      from_offset=page.next_offset, limit=limit)
            got.append(page)
        return got

    got = conn.call(fetch)
    last = got[-1]
    messages = [m for p in got for m in p.messages]
    if conn.json:
        print_json({"topic": topic, "broker_name": last.queue.broker_name, "queue_id": queue,
                    "next_offset": last.next_offset, "min_offset": last.min_offset,
                    "max_offset": last.max_offset,
                    "messages": [m.to_dict(fmt) for m in messages]})
        return
    stdout_console().print(table(
        f"{topic} {last.queue.broker_name} queue {queue} (offsets {last.min_offset}..{last.max_offset})",
        COLUMNS, _rows(messages, fmt), right=["queue", "offset"]))
    more = "end of queue" if last.at_end else f"next page: --from-offset {last.next_offset}"
    stderr_console().print(f"{len(messages)} message(s); {more}")

"""The console's message lookup page: by message id (the offset message id names the broker and
commit log offset; a unique client id needs the topic) or by business key within a topic,
through the admin client's lookup (``get_message`` / ``find_messages``, the brokers' message
index, docs/message-index.md)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from pocketmq.client.admin import AsyncAdmin
from pocketmq.console.html import esc, form, table
from pocketmq.errors import PocketMQError
from pocketmq.wire.errors import RecordError
from pocketmq.wire.msgid import parse_offset_msg_id


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _body_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "hex: " + body.hex()


def _messages_table(messages: list[Any]) -> str:
    return table(["msg id", "topic", "broker", "queue", "queue offset", "tags", "keys", "stored", "body"], (
        [m.msg_id, m.topic, m.queue.broker_name, m.queue.queue_id, m.queue_offset, m.tags, " ".join(m.keys),
         _time(m.store_timestamp), _body_text(m.body)[:200]] for m in messages),
        numeric=["queue", "queue offset"], table_id="messages")


def _detail(m: Any) -> str:
    rows = [("msg id", m.msg_id), ("topic", m.topic), ("broker", m.queue.broker_name),
            ("queue", m.queue.queue_id), ("queue offset", m.queue_offset),
            ("commit log offset", m.commit_log_offset), ("tags", m.tags), ("keys", " ".join(m.keys)),
            ("born", f"{_time(m.born_timestamp)} from {m.born_host}"),
            ("stored", f"{_time(m.store_timestamp)} on {m.store_host}"),
            ("reconsume times", m.reconsume_times)]
    props = "".join(f"{esc(k)}={esc(v)}<br>" for k, v in sorted(m.properties.items()))
    return (table(["field", "value"], rows, table_id="message") + "<h2>Properties</h2>"
            + f"<p>{props or '-'}</p><h2>Body ({len(m.body)} bytes)</h2><pre id=\"body\">"
            + esc(_body_text(m.body)) + "</pre>")


def _forms(query: Mapping[str, str]) -> str:
    by_id = form("/message", {}, "Find by id", visible=[
        ("id", "message id", f'<input name="id" size="36" value="{esc(query.get("id", ""))}">'),
        ("topic", "topic (optional: narrows a unique id lookup)",
         f'<input name="topic" size="20" value="{esc(query.get("topic", "") if query.get("id") else "")}">')],
        form_id="by-id")
    by_key = form("/message", {}, "Find by key", visible=[
        ("topic", "topic", f'<input name="topic" size="20" value="{esc(query.get("topic", ""))}">'),
        ("key", "key", f'<input name="key" size="28" value="{esc(query.get("key", ""))}">')],
        form_id="by-key")
    return f"<p>{by_id}</p><p>{by_key}</p>"


async def render(admin: AsyncAdmin, query: Mapping[str, str]) -> str:
    """The page body for ``query`` (``id`` [+ ``topic``], or ``topic`` + ``key``)."""
    msg_id, topic = query.get("id", "").strip(), query.get("topic", "").strip()
    key = query.get("key", "").strip()
    out = [_forms(query)]
    try:
        if msg_id:
            try:
                (ip, port), offset = parse_offset_msg_id(msg_id)
                where = f"offset message id: stored by {ip}:{port} at commit log offset {offset}"
            except RecordError:
                where = ("not an offset message id: looked up as a unique client id in the index of "
                         + (f"topic {topic}" if topic else "every topic"))
            out.append(f'<p class="muted">{esc(where)}</p>')
            out.append(_detail(await admin.get_message(msg_id, topic=topic or None)))
        elif topic and key:
            found = await admin.find_messages(topic, key)
            out.append(f"<h2>{len(found.messages)} message(s) with key {esc(key)} in {esc(topic)}</h2>")
            out.append(_messages_table(found.messages))
            for name, error in sorted(found.errors.items()):
                out.append(f'<div class="error">{esc(name)}: {esc(error)}</div>')
    except PocketMQError as exc:
        out.append(f'<div class="error" id="not-found">{esc(type(exc).__name__)}: {esc(exc)}</div>')
    return "".join(out)

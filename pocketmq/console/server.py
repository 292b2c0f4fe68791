"""The web console's HTTP server (aiohttp) and pages.

Data comes from the same admin client the CLI uses (:class:`pocketmq.client.admin.AsyncAdmin`),
pointed at this NameServer with broker calls relayed: whatever the console shows, the CLI shows
through the same port-forward. Write actions (drain / undrain, consumer offset reset, live
broker config) are two steps: a GET shows what will happen and a form that POSTs it with this
process's random token (a page of another site cannot forge it).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.admin import AsyncAdmin
from pocketmq.client.routes import MASTER_ID, PERM_WRITE, perm_text
from pocketmq.console import lookup
from pocketmq.console.html import esc, form, link, page, table
from pocketmq.errors import PocketMQError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.Response]]


def _ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


#: No scripts, no framing, forms only to this server.
_HEADERS = {"Cache-Control": "no-store", "X-Frame-Options": "DENY",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"}


def _error_box(exc: Exception) -> str:
    return f'<div class="error">{esc(type(exc).__name__)}: {esc(exc)}</div>'


class ConsoleServer:
    """Serves the console on ``host:port`` (port 0 = any free port, see :attr:`port`) for the
    cluster of the NameServer(s) at ``namesrv_addr``."""

    def __init__(self, host: str, port: int, namesrv_addr: str) -> None:
        self.host = host
        self.requested_port = port
        self.port = 0
        self.namesrv_addr = namesrv_addr
        self.token = secrets.token_urlsafe(24)
        self._runner: web.AppRunner | None = None
        self.admin: AsyncAdmin | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self.admin = AsyncAdmin(self.namesrv_addr, relay="relay", timeout=5.0)
        await self.admin.start()
        app = web.Application()
        app.add_routes([
            web.get("/", self._wrap(self.cluster_page)),
            web.get("/topics", self._wrap(self.topics_page)),
            web.get("/topic", self._wrap(self.topic_page)),
            web.get("/groups", self._wrap(self.groups_page)),
            web.get("/group", self._wrap(self.group_page)),
            web.get("/broker", self._wrap(self.broker_page)),
            web.get("/message", self._wrap(self.message_page)),
            web.get("/confirm", self._wrap(self.confirm_page)),
            web.post("/action", self._wrap(self.action)),
            web.get("/healthz", self._health),
        ])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.requested_port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.requested_port
        log.info("console started", extra={"host": self.host, "port": self.port})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.admin is not None:
            await self.admin.close()
            self.admin = None

    # -- plumbing ---------------------------------------------------------------------------------

    def _wrap(self, handler: Handler) -> Handler:
        async def wrapped(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except web.HTTPException:
                raise
            except (PocketMQError, ValueError) as exc:
                return self._html("Error", _error_box(exc), status=400)
        return wrapped

    @staticmethod
    async def _health(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    def _html(self, title: str, body: str, status: int = 200) -> web.Response:
        return web.Response(text=page(title, body), content_type="text/html", status=status,
                            headers=_HEADERS)

    @property
    def _admin(self) -> AsyncAdmin:
        assert self.admin is not None, "console not started"
        return self.admin

    # -- pages --------------------------------------------------------------------------------

    async def cluster_page(self, request: web.Request) -> web.Response:
        admin = self._admin
        info, statuses, has = await asyncio.gather(admin.cluster_info(), admin.broker_status(),
                                                   admin.ha_status())
        status = {r.target.addr: r for r in statuses}
        ha = {r.target.addr: r for r in has}
        rows = []
        for cluster in sorted(info.cluster_addr_table):
            for name in sorted(info.cluster_addr_table[cluster].broker_names):
                group = info.broker_addr_table[name]
                master = status.get(group.broker_addrs.get(MASTER_ID, ""))
                master_max = master.value.commit_log_max_offset \
                    if master is not None and master.value is not None else None
                drained = master is not None and master.value is not None and \
                    not master.value.broker_permission & PERM_WRITE
                for broker_id in sorted(group.broker_addrs):
                    addr = group.broker_addrs[broker_id]
                    s, h = status.get(addr), ha.get(addr)
                    value = s.value if s is not None else None
                    role = esc(value.broker_role) if value is not None else \
                        '<span class="bad">unreachable</span>'
                    max_offset = value.commit_log_max_offset if value is not None else ""
                    rows.append([cluster, link("/broker", name, name=name), broker_id, addr, role, max_offset,
                                 self._ha_cell(broker_id, h, master_max),
                                 '<span class="bad">drained (read-only)</span>' if drained
                                 else '<span class="ok">writable</span>',
                                 self._drain_button(name, drained) if broker_id == MASTER_ID else ""])
        body = table(["cluster", "broker", "id", "address", "role", "commit log max offset", "HA", "writes",
                      ""], rows, raw=["broker", "role", "HA", "writes", ""],
                     numeric=["id", "commit log max offset"], table_id="brokers")
        return self._html("Cluster", body)

    @staticmethod
    def _ha_cell(broker_id: int, h: Any, master_max: int | None) -> str:
        if h is None or h.value is None:
            return '<span class="muted">-</span>'
        v = h.value
        if broker_id == MASTER_ID:
            if not v.slaves:
                return '<span class="muted">no slave connected</span>'
            worst = max(s.lag_bytes for s in v.slaves)
            return esc(f"{len(v.slaves)} slave(s), max lag {worst} bytes")
        if not v.connected:
            return '<span class="bad">not connected to its master</span>'
        behind = "" if master_max is None else f", {max(0, master_max - v.client_max_offset)} bytes behind"
        return esc(f"replicating from {v.master_ha_addr}{behind}")

    @staticmethod
    def _drain_button(name: str, drained: bool) -> str:
        action = "undrain" if drained else "drain"
        return form("/confirm", {"action": action, "broker": name}, action.capitalize(),
                    form_id=f"{action}-{name}")

    async def topics_page(self, request: web.Request) -> web.Response:
        topics = await self._admin.topics()
        shown = [t for t in topics if request.query.get("system") or not t.startswith(("%", "rmq_sys_"))]
        body = '<p>' + link("/topics", "show system topics", system=1) + '</p>' + table(
            ["topic"], ([link("/topic", t, name=t)] for t in shown), raw=["topic"], table_id="topics")
        return self._html(f"Topics ({len(shown)})", body)

    async def topic_page(self, request: web.Request) -> web.Response:
        name = request.query.get("name", "")
        admin = self._admin
        route = await admin.route(name)
        rows = []

        async def offsets(broker_name: str, queue_id: int) -> tuple[int | str, int | str]:
            addrs = route.brokers[broker_name].read_addrs()
            req = broker_pb2.QueueRequest(topic=name, queue_id=queue_id)
            for addr in addrs:
                try:
                    lo, hi = await asyncio.gather(admin.call(addr, "GetMinOffset", req),
                                                  admin.call(addr, "GetMaxOffset", req))
                    return int(lo.offset), int(hi.offset)
                except PocketMQError:
                    continue
            return "?", "?"

        queues = [(q.broker_name, qid, q) for q in route.queue_datas
                  for qid in range(max(q.read_queue_nums, q.write_queue_nums))]
        found = await asyncio.gather(*(offsets(b, qid) for b, qid, _ in queues))
        for (broker_name, qid, q), (lo, hi) in zip(queues, found, strict=True):
            rows.append([broker_name, qid, perm_text(q.perm), lo, hi,
                         hi - lo if isinstance(lo, int) and isinstance(hi, int) else "?"])
        body = table(["broker", "queue", "perm", "min offset", "max offset", "messages"], rows,
                     numeric=["queue", "min offset", "max offset", "messages"], table_id="queues")
        return self._html(f"Topic {name}", body)

    async def groups_page(self, request: web.Request) -> web.Response:
        results = await self._admin.groups()
        seen: dict[str, list[str]] = {}
        for r in results:
            for g in r.value or []:
                seen.setdefault(g.group_name, []).append(r.target.broker_name)
        body = table(["group", "brokers"], ([link("/group", g, name=g), ", ".join(sorted(seen[g]))]
                                            for g in sorted(seen)), raw=["group"], table_id="groups")
        return self._html(f"Consumer groups ({len(seen)})", body)

    async def group_page(self, request: web.Request) -> web.Response:
        name = request.query.get("name", "")
        admin = self._admin
        topics, (members, _) = await asyncio.gather(admin.consumer_topics(name),
                                                    admin.consumer_connections(name))
        progress = await asyncio.gather(*(admin.consumer_progress(name, t) for t in topics))
        rows = [[p.queue.topic, p.queue.broker_name, p.queue.queue_id, p.broker_offset,
                 "-" if p.consumer_offset is None else p.consumer_offset, p.lag, p.client or "-"]
                for per_topic in progress for p in per_topic]
        total = sum(p.lag for per_topic in progress for p in per_topic)
        body = [f"<h2>Lag per queue (total {total})</h2>",
                table(["topic", "broker", "queue", "broker offset", "consumer offset", "lag", "client"], rows,
                      numeric=["queue", "broker offset", "consumer offset", "lag"], table_id="lag"),
                f"<h2>Connections ({len(members)})</h2>",
                table(["client id", "address", "language", "version", "protocol", "type", "subscriptions"],
                      ([c.client_id, c.addr, c.language, c.version, c.protocol, c.client_type,
                        ", ".join(f"{s.topic}: {s.expression}" for s in c.subscriptions)] for c in members),
                      table_id="connections"),
                "<h2>Reset offsets</h2>"]
        subscribed = sorted({s.topic for c in members for s in c.subscriptions} | set(topics))
        options = "".join(f'<option value="{esc(t)}">{esc(t)}</option>' for t in subscribed
                          if not t.startswith("%"))
        body.append(form("/confirm", {"action": "reset", "group": name}, "Reset...", visible=[
            ("topic", "topic", f'<select name="topic">{options}</select>'),
            ("to", "to", '<select name="to"><option value="time">time</option><option value="earliest">'
                         'earliest</option><option value="latest">latest</option><option value="offset">'
                         'offset</option></select>'),
            ("value", "time (ISO 8601 or ms) / offset", '<input name="value" size="28">')], form_id="reset"))
        return self._html(f"Consumer group {name}", "".join(body))

    async def broker_page(self, request: web.Request) -> web.Response:
        name = request.query.get("name", "")
        results = await self._admin.broker_config(name)
        body = []
        for r in results:
            title = f"{r.target.broker_name} id {r.target.broker_id} ({r.target.addr})"
            if r.value is None:
                body.append(f"<h2>{esc(title)}</h2>{_error_box(r.error or RuntimeError('no answer'))}")
                continue
            body.append(f"<h2>{esc(title)}</h2>" + table(
                ["key", "value", "live", "overridden"],
                ([e.key, e.value, "yes" if e.live else "", "yes" if e.overridden else ""]
                 for e in r.value.entries), table_id=f"config-{r.target.broker_id}"))
        set_form = form("/confirm", {"action": "config", "broker": name}, "Set...", visible=[
            ("kv", "key=value", '<input name="kv" size="40">')], form_id="config")
        body.insert(0, "<p>Keys marked live can be changed without a restart (kept in the store's overrides "
                       f"file).</p>{set_form}")
        return self._html(f"Broker {name}", "".join(body))

    async def message_page(self, request: web.Request) -> web.Response:
        return self._html("Message lookup", await lookup.render(self._admin, request.query))

    # -- write actions ------------------------------------------------------------------------------

    @staticmethod
    def _describe(q: Any) -> str:
        action = q.get("action", "")
        if action in ("drain", "undrain"):
            verb = "wipe the write permission of" if action == "drain" else \
                "give the write permission back to"
            return f"{verb} broker group {q.get('broker', '')} on this NameServer"
        if action == "reset":
            return (f"reset the offsets of consumer group {q.get('group', '')} on topic {q.get('topic', '')} "
                    f"to {q.get('to', '')} {q.get('value', '')}").strip()
        if action == "config":
            return f"set {q.get('kv', '')} on every member of broker group {q.get('broker', '')}"
        raise ValueError(f"unknown action {action!r}")

    async def confirm_page(self, request: web.Request) -> web.Response:
        fields = {k: v for k, v in request.query.items()}
        what = self._describe(fields)
        confirm = form("/action", {**fields, "token": self.token}, "Confirm", method="post",
                       form_id="confirm")
        body = f'<div class="note">You are about to <b>{esc(what)}</b>.</div>{confirm} {link("/", "Cancel")}'
        return self._html("Confirm", body)

    async def action(self, request: web.Request) -> web.Response:
        data = await request.post()
        if not secrets.compare_digest(str(data.get("token", "")), self.token):
            return self._html("Refused", '<div class="error">The confirmation token is missing or stale: '
                                         'start again from the page.</div>', status=403)
        q = {k: str(v) for k, v in data.items() if k != "token"}
        what = self._describe(q)
        result = await self._run(q)
        log.info("console action", extra={"action": q.get("action"), "what": what, "peer": request.remote})
        return self._html("Result", f'<div class="note" id="result">Requested: {esc(what)}.</div>{result}'
                                    f'<p>{link("/", "Back to the cluster")}</p>')

    async def _run(self, q: dict[str, str]) -> str:
        admin, action = self._admin, q["action"]
        if action in ("drain", "undrain"):
            outcome = await (admin.drain_broker if action == "drain" else admin.undrain_broker)(q["broker"])
            return table(["broker", "address", "brokerPermission", "error"], (
                [b.target.broker_name, b.target.addr, "" if b.value is None else
                 next((e.value for e in b.value.entries if e.key == "brokerPermission"), ""), b.error or ""]
                for b in outcome.brokers)) + table(
                ["NameServer", "topics changed", "error"],
                ([d.namesrv, d.topics_changed, d.error or ""] for d in outcome.namesrvs))
        if action == "reset":
            to, value = q.get("to", ""), q.get("value", "").strip()
            kwargs: dict[str, Any] = {}
            if to == "time":
                kwargs["timestamp_ms"] = int(value) if value.isdigit() else int(
                    datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            elif to == "offset":
                kwargs["offset"] = int(value)
            elif to in ("earliest", "latest"):
                kwargs[to] = True
            else:
                raise ValueError(f"unknown reset target {to!r}")
            resets = await admin.reset_offsets(q["group"], q["topic"], **kwargs)
            done = table(["broker", "queue", "old offset", "new offset"], (
                [r.target.broker_name, c.queue_id, c.old_offset, c.new_offset]
                for r in resets if r.value is not None for c in r.value.queues), numeric=["queue"])
            return done + "".join(_error_box(r.error) for r in resets if r.error is not None)
        if action == "config":
            key, sep, value = q.get("kv", "").partition("=")
            if not sep:
                raise ValueError("expected key=value")
            results = await admin.set_broker_config(q["broker"], {key.strip(): value.strip()})
            errors = [r for r in results if r.error is not None]
            if errors:
                return "".join(_error_box(r.error) for r in errors if r.error is not None)
            return table(["broker", "address", "key", "value"], (
                [r.target.broker_name, r.target.addr, e.key, e.value]
                for r in results if r.value is not None for e in r.value.entries))
        raise ValueError(f"unknown action {action!r}")

"""HTML building blocks of the console: every value passes through :func:`esc`; pages are a
title, a navigation bar and sections of tables and forms. No scripts: the pages work with any
browser (and in text-mode ones)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlencode

__all__ = ["esc", "form", "link", "page", "table"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header b{font-size:1.1em}
main{padding:1em 1.4em}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;background:#fff;margin:.4em 0 1em}
th,td{border:1px solid #d6dae1;padding:.3em .6em;text-align:left;font-size:.92em}
th{background:#eceff4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#17733b}.bad{color:#b3261e;font-weight:600}.muted{color:#6b7280}
.note{background:#fff8e1;border:1px solid #f0d58a;padding:.6em;margin:.6em 0}
.error{background:#fdecea;border:1px solid #f1aeb5;padding:.6em;margin:.6em 0}
form.inline{display:inline}input,select,button{font-size:.92em;margin:.1em .3em .1em 0}
pre{background:#fff;border:1px solid #d6dae1;padding:.6em;white-space:pre-wrap;word-break:break-all}
"""

NAV = (("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/message", "Message lookup"))


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def link(path: str, text: object, **params: object) -> str:
    query = ("?" + urlencode({k: v for k, v in params.items() if v is not None})) if params else ""
    return f'<a href="{esc(path + query)}">{esc(text)}</a>'


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, raw: Iterable[str] = (),
          numeric: Iterable[str] = (), table_id: str = "") -> str:
    """A table; cells of columns in ``raw`` are trusted HTML (built with esc/link), all others
    are escaped. ``numeric`` columns are right-aligned."""
    raw_set, num_set = set(raw), set(numeric)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    out = [f"<table{ident}><thead><tr>", *(f"<th>{esc(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    count = 0
    for row in rows:
        count += 1
        out.append("<tr>")
        for header, cell in zip(headers, row, strict=True):
            cls = ' class="num"' if header in num_set else ""
            out.append(f"<td{cls}>{cell if header in raw_set else esc(cell)}</td>")
        out.append("</tr>")
    if not count:
        out.append(f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def form(action: str, fields: Mapping[str, object], button: str, *, method: str = "get",
         visible: Sequence[tuple[str, str, str]] = (), form_id: str = "") -> str:
    """A form with hidden ``fields`` and ``visible`` (name, label, html input) rows."""
    ident = f' id="{esc(form_id)}"' if form_id else ""
    parts = [f'<form class="inline" method="{method}" action="{esc(action)}"{ident}>']
    parts += [f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items()]
    parts += [f"<label>{esc(label)} {control}</label>" for _name, label, control in visible]
    parts.append(f'<button type="submit">{esc(button)}</button></form>')
    return "".join(parts)


def page(title: str, body: str, *, cluster_name: str = "") -> str:
    nav = "".join(f'<a href="{p}">{esc(t)}</a>' for p, t in NAV)
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)} - PocketMQ"
            f"</title><style>{_CSS}</style></head><body><header><b>PocketMQ console</b>{nav}"
            f"<span class=\"muted\">{esc(cluster_name)}</span></header><main><h1>{esc(title)}</h1>"
            f"{body}</main></body></html>")

"""How the CLI prints: rich tables for people (``--output table``), JSON for programs
(``--output json``: one document on stdout, or one object per line for streams)."""

from __future__ import annotations

import datetime as dt
import enum
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf.message import Message as ProtoMessage
from rich.console import Console
from rich.table import Table


class Output(enum.StrEnum):
    table = "table"
    json = "json"


def stdout_console() -> Console:
    # Wide enough for addresses and message ids when stdout is not a terminal (pipes, tests).
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200, highlight=False)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def proto_dict(message: ProtoMessage) -> dict[str, Any]:
    """A protobuf message as a JSON-friendly dict: field names as in the .proto, every field
    present (defaults included), int64 as numbers, enums by name, bytes as hex."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): _value(value_field, v) for k, v in sorted(value.items())}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field: Any, value: Any) -> Any:
    if isinstance(value, ProtoMessage):
        return proto_dict(value)
    if field.enum_type is not None:
        number = field.enum_type.values_by_number.get(value)
        return number.name if number is not None else value
    if isinstance(value, bytes):
        return value.hex()
    return value


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          right: Iterable[str] = ()) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    right_cols = set(right)
    for col in columns:
        t.add_column(col, justify="right" if col in right_cols else "left", overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def ms_to_iso(ms: int) -> str:
    """Milliseconds since the epoch -> ``2026-11-22T01:56:49.912Z`` (``-`` for 0)."""
    if ms <= 0:
        return "-"
    text = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

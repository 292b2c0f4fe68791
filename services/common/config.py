"""Configuration as frozen dataclasses, loaded RocketMQ-style.

A service's configuration is one or more frozen dataclasses ("sections") whose snake_case field
names are the camelCase keys of RocketMQ's ``broker.conf`` (``listen_port`` <-> ``listenPort``).
Values come from, lowest precedence first:

1. the dataclass defaults,
2. a ``key=value`` properties file (``-c broker.conf``),
3. environment variables ``POCKETMQ_<UPPER_SNAKE_KEY>`` (``POCKETMQ_LISTEN_PORT=10911``),
4. command-line flags, one per key (``--listen-port 10911``).

An unknown key or an invalid value raises :class:`ConfigError` naming the key, so a typo in
``broker.conf`` stops the service at start instead of being silently ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pocketmq.wire.address import AddressError, parse_host_port

T = TypeVar("T")

ENV_PREFIX = "POCKETMQ_"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ConfigError(ValueError):
    """An invalid configuration; ``key`` is the camelCase key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key '{key}': {message}")
        self.key = key


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_to_snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def parse_properties(text: str, source: str = "<config>") -> dict[str, str]:
    """Parse ``key=value`` lines (Java properties subset): ``#``/``!`` comments, blank lines,
    whitespace around key and value ignored. A line without ``=`` is an error."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ConfigError(line, f"{source}:{lineno}: expected key=value")
        values[key.strip()] = value.strip()
    return values


def load_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("configFile", f"cannot read {p}: {exc.strerror}") from exc
    return parse_properties(text, str(p))


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def convert(key: str, raw: str, tp: Any) -> Any:
    """Convert the string ``raw`` to type ``tp`` (str, int, float, bool, Enum, Optional)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if raw == "" or raw.lower() == "none":
            return None
        return convert(key, raw, args[0])
    try:
        if tp is bool:
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError
        if tp is int:
            return int(raw.strip().replace("_", ""), 0)
        if tp is float:
            return float(raw)
        if tp is str:
            return raw
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp[raw.strip().upper()]
    except (ValueError, KeyError):
        expected = (
            " | ".join(m.name for m in tp) if isinstance(tp, type) and issubclass(tp, enum.Enum)
            else getattr(tp, "__name__", str(tp))
        )
        raise ConfigError(key, f"invalid value {raw!r} (expected {expected})") from None
    raise ConfigError(key, f"unsupported type {tp!r}")


def config_key(field: dataclasses.Field[Any]) -> str:
    """The config key of a field: ``metadata["key"]`` when RocketMQ's spelling is not the plain
    camelCase of the field name (``brokerIP1``), else the camelCase name."""
    key: str = field.metadata.get("key") or snake_to_camel(field.name)
    return key


def known_keys(sections: Sequence[type]) -> dict[str, tuple[type, str]]:
    """Config key -> (section, field name) for every field of every section."""
    keys: dict[str, tuple[type, str]] = {}
    for section in sections:
        for f in dataclasses.fields(section):
            if f.init:
                keys[config_key(f)] = (section, f.name)
    return keys


def build_sections(sections: Sequence[type], values: Mapping[str, str]) -> list[Any]:
    """Instantiate every section from camelCase ``values`` (strings); unknown keys fail."""
    keys = known_keys(sections)
    per_section: dict[type, dict[str, Any]] = {s: {} for s in sections}
    for key, raw in values.items():
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(key, f"unknown key{hint}")
        section, name = keys[key]
        per_section[section][name] = convert(key, raw, _field_types(section)[name])
    built = []
    for section in sections:
        try:
            built.append(section(**per_section[section]))
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(section.__name__, str(exc)) from exc
    return built


def env_values(sections: Sequence[type], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for key, (_, name) in known_keys(sections).items():
        var = ENV_PREFIX + name.upper()
        if var in environ:
            found[key] = environ[var]
    return found


def add_arguments(parser: argparse.ArgumentParser, sections: Sequence[type]) -> None:
    """Add ``-c/--config`` and one ``--kebab-key`` flag per configuration key."""
    parser.add_argument("-c", "--config", metavar="FILE", help="RocketMQ-style key=value config file")
    group = parser.add_argument_group("configuration keys (also POCKETMQ_<KEY> env variables)")
    for key, (section, name) in known_keys(sections).items():
        default = next(f.default for f in dataclasses.fields(section) if f.name == name)
        shown = default.name if isinstance(default, enum.Enum) else default
        group.add_argument(
            "--" + name.replace("_", "-"), dest=f"cfg__{key}", metavar="VALUE",
            help=f"{key} (default: {shown})",
        )


def from_arguments(
    args: argparse.Namespace, sections: Sequence[type], environ: Mapping[str, str] | None = None
) -> list[Any]:
    """Merge defaults < config file < environment < flags and build the sections."""
    values: dict[str, str] = {}
    if getattr(args, "config", None):
        values.update(load_properties_file(args.config))
    values.update(env_values(sections, environ))
    for dest, raw in vars(args).items():
        if dest.startswith("cfg__") and raw is not None:
            values[dest[len("cfg__"):]] = raw
    return build_sections(sections, values)


def to_properties(objs: Iterable[Any]) -> str:
    """Render sections back to ``key=value`` text (for logs and generated config files)."""
    lines = []
    for obj in objs:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            text = value.name if isinstance(value, enum.Enum) else ("" if value is None else value)
            if isinstance(value, bool):
                text = str(value).lower()
            lines.append(f"{config_key(f)}={text}")
    return "\n".join(lines) + "\n"


def require(condition: bool, key: str, message: str) -> None:
    """Validation helper for ``__post_init__``: raise ConfigError naming ``key``."""
    if not condition:
        raise ConfigError(key, message)


def parse_address(value: str, key: str = "address", default_host: str = "0.0.0.0") -> tuple[str, int]:
    """``host:port`` (or ``:port``/``port``) -> (host, port), with a ConfigError naming ``key``
    (the parsing is :func:`pocketmq.wire.address.parse_host_port`)."""
    try:
        return parse_host_port(value, default_host=default_host)
    except AddressError as exc:
        raise ConfigError(key, str(exc)) from None

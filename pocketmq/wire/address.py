"""``host:port`` addresses and address lists (RocketMQ's ``namesrvAddr``): the one parser."""

from __future__ import annotations

from collections.abc import Iterable

from pocketmq.wire.errors import AddressError, InvalidPortError

__all__ = [
    "DEFAULT_NAMESRV", "AddressError", "InvalidPortError", "join_host_port", "parse_address_list",
    "parse_host_port", "split_addresses",
]

#: Where clients, the CLI and brokers look for a NameServer when told nothing (RocketMQ's port).
DEFAULT_NAMESRV = "127.0.0.1:9876"


def parse_host_port(text: str, *, default_host: str | None = None,
                    allow_port_zero: bool = False) -> tuple[str, int]:
    """``"host:port"`` / ``"[v6]:port"`` -> ``(host, port)`` with the brackets removed.

    With ``default_host``, ``":port"`` and ``"port"`` mean that host. Port 0 ("any free port")
    only with ``allow_port_zero``. An unbracketed IPv6 address is ambiguous (which colon starts
    the port?) and refused. Raises :class:`AddressError`.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = "", text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"invalid address {text!r} (write an IPv6 host in brackets: [::1]:9876)")
    if not host:
        if default_host is None:
            raise AddressError(f"invalid address {text!r} (expected host:port)")
        host = default_host
    if not port_text.isdigit():
        raise InvalidPortError(f"invalid address {text!r} (expected host:port)")
    port = int(port_text)
    if not (0 if allow_port_zero else 1) <= port <= 65535:
        raise InvalidPortError(f"port out of range in {text!r}")
    return host, port


def join_host_port(host: str, port: int) -> str:
    """The ``host:port`` of ``host`` and ``port``: IPv6 addresses in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_addresses(value: str | Iterable[str]) -> list[str]:
    """``"a:9876;b:9876"`` (``,`` also separates) or a list -> ``["a:9876", "b:9876"]``;
    blanks and duplicates are dropped, order is kept. No validation (see
    :func:`parse_address_list`)."""
    items = value.replace(",", ";").split(";") if isinstance(value, str) else value
    return list(dict.fromkeys(a.strip() for a in items if a and a.strip()))


def parse_address_list(value: str | Iterable[str], what: str = "address") -> list[str]:
    """:func:`split_addresses`, each entry a valid ``host:port``; at least one. Raises
    :class:`AddressError` naming ``what`` (e.g. "namesrv")."""
    addrs = split_addresses(value)
    if not addrs:
        raise AddressError(f"no {what} address given")
    for addr in addrs:
        try:
            parse_host_port(addr)
        except AddressError:
            raise AddressError(f"invalid {what} address {addr!r} (expected host:port)") from None
    return addrs

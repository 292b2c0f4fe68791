"""RocketMQ's offset message id (store host + commit-log offset) and the IPv4 host bytes in it."""

from __future__ import annotations

import functools
import socket
import struct

from pocketmq.wire.errors import RecordError

__all__ = ["Host", "host_bytes", "offset_msg_id", "parse_offset_msg_id"]

Host = tuple[str, int]

#: store IPv4 4 · port 4 · commit-log offset 8.
_OFFSET_MSG_ID = struct.Struct(">4siq")


@functools.lru_cache(maxsize=4096)
def host_bytes(ip: str) -> bytes:
    """Dotted IPv4 -> 4 bytes. Raises RecordError for anything else (IPv6 is not supported)."""
    try:
        return socket.inet_aton(ip) if ip.count(".") == 3 else _bad_host(ip)
    except OSError:
        return _bad_host(ip)


def _bad_host(ip: str) -> bytes:
    raise RecordError(f"host {ip!r} is not a dotted IPv4 address")


def offset_msg_id(store_host: Host, physical_offset: int) -> str:
    """RocketMQ's offset message id: upper-case hex of store IPv4 4 · port 4 · commit log offset 8."""
    return _OFFSET_MSG_ID.pack(host_bytes(store_host[0]), store_host[1], physical_offset).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """Inverse of :func:`offset_msg_id`: ``((ip, port), physical offset)``."""
    try:
        ip, port, offset = _OFFSET_MSG_ID.unpack(bytes.fromhex(msg_id))
    except (ValueError, struct.error):
        raise RecordError(f"not an offset message id: {msg_id!r}") from None
    return (socket.inet_ntoa(ip), port), offset


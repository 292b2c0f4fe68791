"""RocketMQ's offset message id (store host + commit-log offset) and the IPv4 host bytes in it;
the time a RocketMQ 5 SDK's unique message id carries."""

from __future__ import annotations

import functools
import socket
import struct

from pocketmq.wire.errors import RecordError

__all__ = ["Host", "host_bytes", "offset_msg_id", "parse_offset_msg_id", "uniq_id_time_ms"]

Host = tuple[str, int]

#: store IPv4 4 · port 4 · commit-log offset 8.
_OFFSET_MSG_ID = struct.Struct(">4siq")
#: RocketMQ 5 SDK message ids (MessageIdCodec, version "01"): version 1 · MAC 6 · pid 2 · seconds
#: since 2021-01-01 4 · sequence 4, as 34 upper-case hex digits.
_UNIQ_V1_PREFIX = "01"
_UNIQ_V1_LEN = 34
_UNIQ_V1_SECONDS = slice(18, 26)
#: 2021-01-01T00:00:00Z in epoch ms (the Java SDK counts from that day in its local zone).
_UNIQ_V1_EPOCH_MS = 1_609_459_200_000


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



def uniq_id_time_ms(msg_id: str) -> int | None:
    """The time (epoch ms, to the second) encoded in a RocketMQ 5 SDK message id, None for any
    other id. The Java SDK counts seconds from 2021-01-01 in its own time zone: allow a day."""
    if len(msg_id) != _UNIQ_V1_LEN or not msg_id.startswith(_UNIQ_V1_PREFIX):
        return None
    try:
        seconds = int(msg_id[_UNIQ_V1_SECONDS], 16)
        int(msg_id, 16)
    except ValueError:
        return None
    return _UNIQ_V1_EPOCH_MS + seconds * 1000

"""The identity handshake ("hello") of the replication (HA) channel, sans-I/O.

A PocketMQ slave opens the stream (after the ``haAuthSecret`` answer, if any) with a hello that
names it (cluster, broker name, brokerId, gRPC address) and gives its epoch list; the master
answers with its own epoch list and max offset before the first frame.  An original RocketMQ
peer never sends or expects either, and each side recognises the other's kind from the first
8 or 12 bytes, so old and new brokers still replicate (without identity and epochs).  Wire
format and rules: ``docs/replication.md`` ("Identity and epochs").
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from services.broker.replication.epochs import EpochEntry, EpochError, check_entries
from services.broker.replication.errors import MalformedFrameError
from services.broker.replication.framing import HELLO_MAGIC_HIGH, HELLO_VERSION, Buffer, byte_view

__all__ = [
    "HELLO_HEAD_SIZE",
    "HELLO_MAX_BODY",
    "MasterHello",
    "SlaveHello",
    "decode_hello_head",
    "decode_master_hello",
    "decode_reply_head",
    "decode_slave_hello",
    "encode_master_hello",
    "encode_slave_hello",
]

#: Slave -> master head: magic (4 bytes), version (uint16), body length (uint16).
_SLAVE_HEAD: Final = struct.Struct(">IHH")
HELLO_HEAD_SIZE: Final = _SLAVE_HEAD.size
#: A hello body (JSON, UTF-8) is at most this long; a longer one is garbage.
HELLO_MAX_BODY: Final = 16 * 1024
#: Epoch entries one hello carries at most.
_MAX_EPOCHS: Final = 512


@dataclass(frozen=True)
class SlaveHello:
    """Who the slave is, and which terms wrote its log."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    epochs: tuple[EpochEntry, ...] = field(default=())

    @property
    def epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0


@dataclass(frozen=True)
class MasterHello:
    """The master's answer: its terms, its max offset when it answered, its brokerId."""

    broker_name: str
    broker_id: int
    max_offset: int
    epochs: tuple[EpochEntry, ...] = field(default=())

    @property
    def epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0


def _body(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    if len(body) > HELLO_MAX_BODY:
        raise ValueError(f"hello body of {len(body)} bytes exceeds {HELLO_MAX_BODY}")
    return body


def _epochs_out(entries: tuple[EpochEntry, ...]) -> list[list[int]]:
    return [[e.epoch, e.start_offset] for e in entries[-_MAX_EPOCHS:]]


def encode_slave_hello(hello: SlaveHello) -> bytes:
    body = _body({"cluster": hello.cluster, "brokerName": hello.broker_name, "brokerId": hello.broker_id,
                  "brokerAddr": hello.broker_addr, "epochs": _epochs_out(hello.epochs)})
    return _SLAVE_HEAD.pack(HELLO_MAGIC_HIGH, HELLO_VERSION, len(body)) + body


def encode_master_hello(hello: MasterHello) -> bytes:
    """Master -> slave: a 12-byte transfer-style header (offset = magic << 32 | version, size =
    body length) and the JSON body."""
    body = _body({"brokerName": hello.broker_name, "brokerId": hello.broker_id,
                  "maxOffset": hello.max_offset, "epochs": _epochs_out(hello.epochs)})
    return struct.pack(">qi", (HELLO_MAGIC_HIGH << 32) | HELLO_VERSION, len(body)) + body


def decode_hello_head(head: Buffer) -> int | None:
    """The first 8 bytes a slave sent: the hello body length, or None when they are not a hello
    (an original slave's request offset)."""
    view = byte_view(head)
    if len(view) != HELLO_HEAD_SIZE:
        raise ValueError(f"a hello head is {HELLO_HEAD_SIZE} bytes")
    magic, version, size = _SLAVE_HEAD.unpack(view)
    if magic != HELLO_MAGIC_HIGH:
        return None
    if version != HELLO_VERSION:
        raise MalformedFrameError(f"hello version {version} is not supported (this broker speaks "
                                  f"{HELLO_VERSION}): upgrade the older broker")
    if size > HELLO_MAX_BODY:
        raise MalformedFrameError(f"hello body of {size} bytes exceeds {HELLO_MAX_BODY}")
    return int(size)


def decode_reply_head(offset: int, size: int) -> int | None:
    """A master's first header (offset, size): the hello body length, or None when it is an
    ordinary frame (an original master)."""
    if offset >> 32 != HELLO_MAGIC_HIGH:
        return None
    version = offset & 0xFFFFFFFF
    if version != HELLO_VERSION:
        raise MalformedFrameError(f"master hello version {version} is not supported (this broker "
                                  f"speaks {HELLO_VERSION}): upgrade the older broker")
    if not 0 <= size <= HELLO_MAX_BODY:
        raise MalformedFrameError(f"master hello body of {size} bytes is outside 0..{HELLO_MAX_BODY}")
    return size


def _load(body: Buffer, who: str) -> dict[str, Any]:
    try:
        obj = json.loads(bytes(body).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedFrameError(f"{who} hello is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedFrameError(f"{who} hello is not a JSON object")
    return obj


def _str(obj: dict[str, Any], key: str, who: str) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str) or len(value) > 512:
        raise MalformedFrameError(f"{who} hello: {key} must be a short string")
    return value


def _int(obj: dict[str, Any], key: str, who: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise MalformedFrameError(f"{who} hello: {key} must be a non-negative integer")
    return value


def _epochs_in(obj: dict[str, Any], who: str) -> tuple[EpochEntry, ...]:
    raw = obj.get("epochs", [])
    if not isinstance(raw, list) or len(raw) > _MAX_EPOCHS:
        raise MalformedFrameError(f"{who} hello: epochs must be a list of at most {_MAX_EPOCHS}")
    entries = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in item)):
            raise MalformedFrameError(f"{who} hello: bad epoch entry {item!r}")
        entries.append(EpochEntry(item[0], item[1]))
    try:
        check_entries(entries)
    except EpochError as exc:
        raise MalformedFrameError(f"{who} hello: {exc}") from None
    return tuple(entries)


def decode_slave_hello(body: Buffer) -> SlaveHello:
    obj = _load(body, "slave")
    return SlaveHello(_str(obj, "cluster", "slave"), _str(obj, "brokerName", "slave"),
                      _int(obj, "brokerId", "slave"), _str(obj, "brokerAddr", "slave"),
                      _epochs_in(obj, "slave"))


def decode_master_hello(body: Buffer) -> MasterHello:
    obj = _load(body, "master")
    return MasterHello(_str(obj, "brokerName", "master"), _int(obj, "brokerId", "master"),
                       _int(obj, "maxOffset", "master"), _epochs_in(obj, "master"))

"""Byte layout of the replication (HA) channel: sizes, limits and frame encoders.

See ``docs/replication.md`` for the wire format.  Pure functions; nothing here keeps state.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "ACK",
    "ACK_SIZE",
    "AUTH_CHALLENGE_SIZE",
    "AUTH_CONTEXT",
    "AUTH_MAC_SIZE",
    "AUTH_MAGIC",
    "AUTH_MAGIC_HIGH",
    "AUTH_NONCE_SIZE",
    "AUTH_VERSION",
    "CATCHUP_BATCH_SIZE",
    "DEFAULT_MAX_BODY_SIZE",
    "HARD_MAX_BODY_SIZE",
    "HEADER",
    "HELLO_MAGIC",
    "HELLO_MAGIC_HIGH",
    "HELLO_VERSION",
    "MAX_OFFSET",
    "TRANSFER_HEADER_SIZE",
    "Buffer",
    "byte_view",
    "check_offset",
    "encode_ack",
    "encode_heartbeat",
    "encode_transfer_header",
]

ACK_SIZE: Final = 8
TRANSFER_HEADER_SIZE: Final = 12
#: Default decoder limit on the slave.  Deliberately larger than the default
#: ``haTransferBatchSize``: the batch size is the *master's* setting and the slave cannot know
#: it, so a master configured with a bigger batch must still be understood (the original slave
#: reads into a 4 MiB buffer, which is the same limit).
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
#: No configuration may allow bodies larger than this; a size above the configured limit
#: is treated as garbage rather than buffered.
HARD_MAX_BODY_SIZE: Final = 64 * 1024 * 1024
#: While at least this many bytes wait to be sent (a slave catching up), the master's frames
#: carry up to this many (or ``haTransferBatchSize``, if larger): well within every slave's
#: limit (``DEFAULT_MAX_BODY_SIZE``, RocketMQ's 4 MiB read buffer), and few enough frames that
#: the slave can receive each body straight into its dispatch ring.
CATCHUP_BATCH_SIZE: Final = 1024 * 1024
MAX_OFFSET: Final = 2**63 - 1
_MAX_INT32: Final = 2**31 - 1

#: Authentication (only with ``haAuthSecret``): the challenge's magic and version, the nonce and
#: answer sizes, and the context string appended to the challenge under the MAC.
AUTH_MAGIC: Final = b"PMQC"
AUTH_VERSION: Final = 1
AUTH_NONCE_SIZE: Final = 16
AUTH_CHALLENGE_SIZE: Final = len(AUTH_MAGIC) + 1 + AUTH_NONCE_SIZE
AUTH_MAC_SIZE: Final = 32
AUTH_CONTEXT: Final = b"pocketmq-ha"
#: A transfer header whose offset has these top 32 bits is the master's challenge.
AUTH_MAGIC_HIGH: Final = int.from_bytes(AUTH_MAGIC, "big")

#: The identity handshake (``hello.py``): its magic and version.  An 8-byte ack or a transfer
#: header whose top 32 bits are the magic is a hello (no real offset comes near 2**62).
HELLO_MAGIC: Final = b"PMQH"
HELLO_MAGIC_HIGH: Final = int.from_bytes(HELLO_MAGIC, "big")
HELLO_VERSION: Final = 1

#: The ack: int64 offset.
ACK: Final = struct.Struct(">q")
#: The transfer header: int64 offset, int32 body size.
HEADER: Final = struct.Struct(">qi")

Buffer = bytes | bytearray | memoryview


def check_offset(offset: int) -> None:
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} is outside 0..{MAX_OFFSET}")


def encode_ack(offset: int) -> bytes:
    """Slave -> master: the slave's max commit-log offset (8 bytes)."""
    check_offset(offset)
    return ACK.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """Master -> slave: the 12-byte header of a frame with a ``size``-byte body at ``offset``."""
    check_offset(offset)
    if not 0 <= size <= _MAX_INT32:
        raise ValueError(f"body size {size} is outside 0..{_MAX_INT32}")
    if offset > MAX_OFFSET - size:
        raise ValueError(f"frame at {offset} with {size} bytes overflows int64 offsets")
    return HEADER.pack(offset, size)


def encode_heartbeat(offset: int) -> bytes:
    """Master -> slave: a heartbeat (size-0 frame) carrying the next transfer offset."""
    return encode_transfer_header(offset, 0)


def byte_view(data: Buffer) -> memoryview:
    """``data`` as a flat memoryview of bytes (no copy)."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view

"""The ``checkpoint`` file and the ``abort`` marker (RocketMQ's ``StoreCheckpoint``).

``checkpoint`` is one 4 KiB page, rewritten in place and synced::

    0   8  physicMsgTimestamp   store timestamp of the last record flushed in the commit log
    8   8  logicsMsgTimestamp   store timestamp when consume queues were last flushed
    16  8  indexMsgTimestamp    (reserved for an index service; 0)
    24  8  physicOffset         commit log offset known to be flushed (max offset at clean shutdown)
    32  8  logicsOffset         commit log offset below which every record's consume queue entry
                                was flushed
    40  4  CRC32 of bytes 0..40

The first three fields sit where RocketMQ keeps them. A missing file or a bad CRC reads as "no
checkpoint" and recovery scans from the first segment.

``abort`` exists while a store is open; finding it at start-up means the previous process did
not shut down cleanly.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from typing import NamedTuple

_LAYOUT = struct.Struct(">qqqqq")
_CRC = struct.Struct(">I")
FILE_SIZE = 4096


class Checkpoint(NamedTuple):
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    physic_offset: int = 0
    logics_offset: int = 0

    def encode(self) -> bytes:
        body = _LAYOUT.pack(*self)
        return (body + _CRC.pack(zlib.crc32(body))).ljust(FILE_SIZE, b"\0")

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint | None:
        """None if ``data`` is short or its CRC does not match."""
        end = _LAYOUT.size + _CRC.size
        if len(data) < end:
            return None
        body = data[:_LAYOUT.size]
        if _CRC.unpack_from(data, _LAYOUT.size)[0] != zlib.crc32(body):
            return None
        return cls(*_LAYOUT.unpack(body))


class CheckpointFile:
    """Reads and durably rewrites the checkpoint; thread-safe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None

    def load(self) -> Checkpoint | None:
        try:
            with open(self.path, "rb") as f:
                return Checkpoint.decode(f.read(FILE_SIZE))
        except FileNotFoundError:
            return None

    def save(self, checkpoint: Checkpoint) -> None:
        data = checkpoint.encode()
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            os.pwrite(self._fd, data, 0)
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def create_abort_file(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_abort_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

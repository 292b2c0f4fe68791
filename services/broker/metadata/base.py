"""Versioned metadata tables persisted as JSON files, written atomically.

Each table (topic config, consumer offsets, delay offsets, subscription groups) carries a
:class:`DataVersion` that changes on every modification; a slave compares versions to decide
whether to replace its copy. Files are written to a temporary file in the same directory,
fsynced, renamed over the old file, and the directory is fsynced: a crash leaves either the old
or the new file, never a torn one.

Tables are mutated on the event loop thread only. :meth:`MetadataTable.persist_async` encodes
the snapshot on the loop and does the file I/O in a worker thread.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from pocketmq.common.v1 import common_pb2

log = logging.getLogger(__name__)

_tmp_counter = itertools.count()


class MetadataFileError(RuntimeError):
    """A metadata file exists but cannot be read or parsed (the broker refuses to start rather
    than silently forget offsets or topics)."""


@dataclasses.dataclass(frozen=True, order=True)
class DataVersion:
    """RocketMQ's DataVersion: (timestamp ms, counter); any difference means "changed"."""

    timestamp: int = 0
    counter: int = 0

    @classmethod
    def initial(cls) -> DataVersion:
        return cls(int(time.time() * 1000), 0)

    def next(self) -> DataVersion:
        return DataVersion(max(int(time.time() * 1000), self.timestamp), self.counter + 1)

    def to_proto(self) -> common_pb2.DataVersion:
        return common_pb2.DataVersion(timestamp=self.timestamp, counter=self.counter)

    @classmethod
    def from_proto(cls, msg: common_pb2.DataVersion) -> DataVersion:
        return cls(msg.timestamp, msg.counter)

    def to_json(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_json(cls, doc: Any) -> DataVersion:
        if not isinstance(doc, dict):
            return cls.initial()
        return cls(int(doc.get("timestamp", 0)), int(doc.get("counter", 0)))


def write_file_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_tmp_counter)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class MetadataTable(abc.ABC):
    """One persisted table. Subclasses define :attr:`file_name`, :meth:`encode_table` and
    :meth:`decode_table`; every mutation calls :meth:`changed`."""

    file_name: ClassVar[str]

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self.path = Path(config_dir) / self.file_name
        self.data_version = DataVersion.initial()
        self._dirty = False
        self._io_lock = threading.Lock()
        #: Local modification count: orders snapshots (data versions from a master need not
        #: increase).
        self._seq = 0
        self._written_seq = -1

    # -- subclass hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def encode_table(self) -> dict[str, Any]:
        """The table as JSON-ready data (without the data version)."""

    @abc.abstractmethod
    def decode_table(self, doc: dict[str, Any]) -> None:
        """Replace the in-memory table from :meth:`encode_table`'s output."""

    # -- state ------------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True when the table changed since it was last persisted."""
        return self._dirty

    def changed(self) -> None:
        """Record a modification: new data version, needs persisting."""
        self.data_version = self.data_version.next()
        self._seq += 1
        self._dirty = True

    def replace_version(self, version: DataVersion) -> None:
        """Adopt another table's version (slave sync) and mark for persisting."""
        self.data_version = version
        self._seq += 1
        self._dirty = True

    # -- persistence ------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc = {**self.encode_table(), "dataVersion": self.data_version.to_json()}
        return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"

    def load(self) -> bool:
        """Read the file if present; returns False (table left empty) when it does not exist."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise MetadataFileError(f"cannot read {self.path}: {exc.strerror}") from exc
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("top level is not an object")
            self.decode_table(doc)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MetadataFileError(f"corrupt metadata file {self.path}: {exc}") from exc
        self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        self._dirty = False
        return True

    def persist(self) -> None:
        """Write the table now (blocking). Safe to call from any thread that owns the table."""
        seq = self._seq
        self._write(self.encode(), seq)
        self._mark_clean(seq)

    def _write(self, data: bytes, seq: int) -> None:
        with self._io_lock:
            # A later snapshot may already be on disk (two overlapping async persists).
            if seq < self._written_seq:
                return
            write_file_atomic(self.path, data)
            self._written_seq = seq

    def _mark_clean(self, seq: int) -> None:
        if self._seq == seq:
            self._dirty = False

    async def persist_async(self) -> None:
        """Snapshot on the loop, write in a worker thread."""
        data, seq = self.encode(), self._seq
        await asyncio.to_thread(self._write, data, seq)
        self._mark_clean(seq)

    async def persist_if_dirty(self) -> None:
        if self._dirty:
            await self.persist_async()

"""Versioned metadata tables persisted as JSON files, written atomically.

Each table (topic config, consumer offsets, delay offsets, subscription groups) carries a
:class:`DataVersion` that changes on every modification; a slave compares versions to decide
whether to replace its copy. Files are written to a temporary file in the same directory,
fsynced, renamed over the old file, and the directory is fsynced: a crash leaves either the old
or the new file, never a torn one.

Tables are mutated on the event loop thread only. :meth:`MetadataTable.persist_async` takes
the changes on the loop and does the file I/O in a worker thread; concurrent persists are
written in order, the later ones riding on the earlier writer (group commit). Journaled tables
(the topic table) append changed entries to ``<file>.journal`` and rewrite the file only
when the journal has grown to half the size of the table.
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
from services.broker.metadata.journal import JOURNAL_GENERATION_KEY, Journal

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
    :meth:`decode_table`; every mutation calls :meth:`changed`.

    A subclass that sets :attr:`journaled` (and implements :meth:`encode_entry` /
    :meth:`apply_entry`) passes the key of each change to :meth:`changed`; a persist then
    appends just those entries to the table's journal instead of rewriting the whole file (see
    :mod:`services.broker.metadata.journal`), and the file is rewritten (the journal emptied)
    only once the journal holds half as many entries as the table.
    """

    file_name: ClassVar[str]
    #: Changes are journaled per key (see the class docstring).
    journaled: ClassVar[bool] = False
    #: The journal is compacted into the file once it has this many entries and at least half
    #: as many as the table has (so rewrites cost O(1) per change, amortised).
    journal_compact_min: ClassVar[int] = 1024

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self.path = Path(config_dir) / self.file_name
        self.data_version = DataVersion.initial()
        self._dirty = False
        self._io_lock = threading.Lock()
        #: Local modification count: orders snapshots (data versions from a master need not
        #: increase).
        self._seq = 0
        #: Keys changed since the last persist job (journaled tables), in change order.
        self._changed_keys: dict[str, None] = {}
        #: The next persist must rewrite the whole file (a change without a key, a slave's
        #: table replacement, a failed write, no file yet).
        self._full = True
        self._journal = Journal(self.path) if self.journaled else None
        #: Generation of the last snapshot job taken (journaled tables): the file records it and
        #: the journal that continues it starts with it.
        self._generation = 0
        #: Persist jobs taken on the loop, written in order by whichever writer runs next.
        self._jobs: list[_Job] = []
        self._jobs_lock = threading.Lock()

    # -- subclass hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def encode_table(self) -> dict[str, Any]:
        """The table as JSON-ready data (without the data version)."""

    @abc.abstractmethod
    def decode_table(self, doc: dict[str, Any]) -> None:
        """Replace the in-memory table from :meth:`encode_table`'s output."""

    def encode_entry(self, key: str) -> Any:
        """Journaled tables: the JSON-ready value of ``key`` now (None: it was deleted)."""
        raise NotImplementedError

    def apply_entry(self, key: str, value: Any) -> None:
        """Journaled tables: replay one journal entry (``value`` None: delete ``key``)."""
        raise NotImplementedError

    def entry_count(self) -> int:
        """Number of entries of the table (sets the journal's compaction point)."""
        return 0

    # -- state ------------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True when the table changed since it was last persisted."""
        return self._dirty

    def changed(self, key: str | None = None) -> None:
        """Record a modification: new data version, needs persisting. ``key``: the entry that
        changed (journaled tables journal just that entry)."""
        self.data_version = self.data_version.next()
        self._seq += 1
        self._dirty = True
        if key is not None and self._journal is not None:
            self._changed_keys[key] = None
        else:
            self._full = True

    def replace_version(self, version: DataVersion) -> None:
        """Adopt another table's version (slave sync) and mark for persisting."""
        self.data_version = version
        self._seq += 1
        self._dirty = True
        self._full = True

    # -- persistence ------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc = {**self.encode_table(), "dataVersion": self.data_version.to_json()}
        if self._journal is not None:
            doc[JOURNAL_GENERATION_KEY] = self._generation
        return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"

    def load(self) -> bool:
        """Read the file (and replay its journal) if present; returns False (table left empty)
        when neither exists."""
        try:
            raw: bytes | None = self.path.read_bytes()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raise MetadataFileError(f"cannot read {self.path}: {exc.strerror}") from exc
        generation = 0
        if raw is not None:
            try:
                doc = json.loads(raw)
                if not isinstance(doc, dict):
                    raise ValueError("top level is not an object")
                self.decode_table(doc)
                generation = int(doc.get(JOURNAL_GENERATION_KEY, 0))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise MetadataFileError(f"corrupt metadata file {self.path}: {exc}") from exc
            self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        replayed = False
        if self._journal is not None:
            try:
                self._generation = generation
                for key, value, version in self._journal.load(generation):
                    self.apply_entry(key, value)
                    self.data_version = DataVersion.from_json(version)
                    replayed = True
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise MetadataFileError(f"corrupt metadata journal {self._journal.path}: {exc}") from exc
            except OSError as exc:
                raise MetadataFileError(f"cannot read {self._journal.path}: {exc.strerror}") from exc
        self._dirty = False
        self._full = raw is None
        return raw is not None or replayed

    def _take_job(self, *, full: bool = False) -> _Job:
        """Snapshot what must be written (on the loop thread, which owns the table) and queue
        it behind the jobs taken before."""
        journal = self._journal
        if (journal is None or full or self._full
                or journal.entries >= max(self.journal_compact_min, self.entry_count() // 2)):
            self._generation += 1
            job = _Job(self._seq, snapshot=self.encode(), generation=self._generation)
            self._full = False
        else:
            version = self.data_version.to_json()
            job = _Job(self._seq, lines=[journal.encode_line(key, self.encode_entry(key), version)
                                         for key in self._changed_keys])
        self._changed_keys.clear()
        with self._jobs_lock:
            self._jobs.append(job)
        return job

    def _run_jobs(self, job: _Job) -> None:
        """Write every queued job in order (any thread); raise ``job``'s error, if any."""
        with self._io_lock:
            with self._jobs_lock:
                jobs, self._jobs = self._jobs, []
            # A snapshot covers everything queued before it.
            last_snapshot = max((i for i, j in enumerate(jobs) if j.snapshot is not None), default=0)
            error: BaseException | None = None
            for queued in jobs[last_snapshot:]:
                if error is None:
                    try:
                        self._write_job(queued)
                    except BaseException as exc:
                        error = exc
                        # A later write must start from a whole file again.
                        self._full = self._dirty = True
                        if self._journal is not None:
                            self._journal.invalidate()
                queued.error = error
            for covered in jobs[:last_snapshot]:  # durable exactly when the snapshot is
                covered.error = jobs[last_snapshot].error
        if job.error is not None:
            raise job.error

    def _write_job(self, job: _Job) -> None:
        if job.snapshot is not None:
            write_file_atomic(self.path, job.snapshot)
            if self._journal is not None:
                self._journal.reset(job.generation)
        else:
            assert self._journal is not None and job.lines is not None
            self._journal.append(job.lines)

    def persist(self) -> None:
        """Rewrite the whole file now (blocking; on the thread that owns the table)."""
        job = self._take_job(full=True)
        self._run_jobs(job)
        self._mark_clean(job.seq)

    def _mark_clean(self, seq: int) -> None:
        if self._seq == seq:
            self._dirty = False

    async def persist_async(self) -> None:
        """Take the changes on the loop, write them in a worker thread; returns once they are
        durable."""
        job = self._take_job()
        await asyncio.to_thread(self._run_jobs, job)
        self._mark_clean(job.seq)

    async def persist_if_dirty(self) -> None:
        if self._dirty:
            await self.persist_async()


@dataclasses.dataclass
class _Job:
    """One persist: a whole file (``snapshot``) or journal ``lines``."""

    seq: int
    snapshot: bytes | None = None
    lines: list[bytes] | None = None
    generation: int = 0
    error: BaseException | None = None

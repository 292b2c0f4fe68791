"""Append-only journal of a metadata table's changes (``<file>.journal``, e.g. ``topics.json.journal``).

A change to a journaled table appends one line per changed entry instead of rewriting the
whole JSON file, so the cost of a change does not grow with the table. Each line is
``<crc32 of the JSON, 8 hex digits> <JSON>\\n``; the JSON is ``{"k": key, "v": value or null
(deleted), "dv": data version}``. The first line is a header ``{"generation": g}``.

The table file records the generation of the journal that continues it
(``journalGeneration``). Compaction writes the whole table into the file (atomically, with the
next generation) and then starts a new journal with that generation; a journal whose
generation differs from the file's is left over from before the file was rewritten and is
ignored. So a crash at any point leaves either the old file plus its journal or the new file
(plus an empty or stale journal).

Appends are ``fdatasync``\\ ed before the change is acknowledged. A crash can leave a torn last
line (never acknowledged): loading drops bad lines at the end of the journal and truncates
them away; a bad line followed by good ones is corruption and refuses the load.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.broker.storage.segment import fsync_dir

JOURNAL_GENERATION_KEY = "journalGeneration"
_HEADER_KEY = "generation"


def _line(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _parse(line: bytes) -> dict[str, Any] | None:
    """The JSON object of a well-formed line (with its newline), or None."""
    if len(line) < 11 or line[8:9] != b" " or not line.endswith(b"\n"):
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


class Journal:
    """The journal file of one table (used under the table's I/O lock)."""

    def __init__(self, table_path: Path) -> None:
        self.path = table_path.with_name(table_path.name + ".journal")
        #: Generation of the journal on disk (the file's ``journalGeneration``).
        self.generation = 0
        #: Entries in the current journal (sets when to compact).
        self.entries = 0
        #: "ok": appends go at the end; "absent": the next append starts a new journal;
        #: "broken": a write failed part way, only :meth:`reset` may write again.
        self._state = "absent"

    @staticmethod
    def encode_line(key: str, value: Any, version: dict[str, int]) -> bytes:
        return _line({"k": key, "v": value, "dv": version})

    def load(self, generation: int) -> Iterator[tuple[str, Any, dict[str, int]]]:
        """Yield (key, value, data version) of each entry of the journal continuing the file
        of ``generation``; cut a torn tail off."""
        self.generation = generation
        self.entries = 0
        self._state = "absent"
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        lines = raw.splitlines(keepends=True)
        header = _parse(lines[0]) if lines else None
        if header is None or header.get(_HEADER_KEY) != generation:
            return  # stale (the file was rewritten after it) or never completed: ignore
        good = len(lines[0])
        docs: list[dict[str, Any]] = []
        for number, line in enumerate(lines[1:], start=2):
            doc = _parse(line)
            if doc is None:
                if any(_parse(rest) is not None for rest in lines[number:]):
                    raise ValueError(f"line {number} is damaged and later lines are not")
                break
            docs.append(doc)
            good += len(line)
        for doc in docs:
            key, value, version = doc["k"], doc["v"], doc["dv"]
            if not isinstance(key, str) or not isinstance(version, dict):
                raise ValueError(f"bad entry {doc!r}")
            yield key, value, version
        if good < len(raw):
            os.truncate(self.path, good)  # a torn, never acknowledged append
        self.entries = len(docs)
        self._state = "ok"

    def append(self, lines: list[bytes]) -> None:
        """Append entries durably (fdatasync) before returning."""
        if not lines:
            return
        if self._state == "broken":
            raise OSError(f"journal {self.path} needs a rewrite after a failed write")
        if self._state == "absent":
            self._create([_line({_HEADER_KEY: self.generation}), *lines])
        else:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                self._write_all(fd, b"".join(lines))
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.entries += len(lines)

    def reset(self, generation: int) -> None:
        """Start an empty journal of ``generation`` (after the file of that generation is
        durable)."""
        self.generation = generation
        self.entries = 0
        self._create([_line({_HEADER_KEY: generation})])

    def invalidate(self) -> None:
        self._state = "broken"

    def _create(self, lines: list[bytes]) -> None:
        self._state = "broken"  # until the new journal is durable
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self._write_all(fd, b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(str(self.path.parent))
        self._state = "ok"

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

"""The epoch file of a store: ``<storePathRootDir>/epochs``, one ``<epoch> <startOffset>`` line
per master term, oldest first (see :mod:`.epochs` and ``docs/replication.md``).

Rewritten whole on every change (temporary file, fsync, rename, fsync of the directory), so a
crash leaves either the old or the new list.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from services.broker.replication.epochs import EpochEntry, EpochError, check_entries, trimmed

__all__ = ["EPOCH_FILE_NAME", "EpochFile"]

log = logging.getLogger(__name__)

EPOCH_FILE_NAME = "epochs"


class EpochFile:
    """The epoch list of one store, loaded at construction (thread-safe)."""

    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, EPOCH_FILE_NAME)
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] = self._load()

    def _load(self) -> tuple[EpochEntry, ...]:
        try:
            with open(self.path, encoding="ascii") as f:
                lines = [line.split() for line in f if line.strip()]
        except FileNotFoundError:
            return ()
        try:
            entries = [EpochEntry(int(a), int(b)) for a, b in lines]
            check_entries(entries)
        except (ValueError, EpochError) as exc:
            raise EpochError(f"{self.path}: {exc}") from None
        return tuple(entries)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def epoch(self) -> int:
        """The newest term this store knows (0 = none)."""
        return self._entries[-1].epoch if self._entries else 0

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Adopt ``entries`` (a master's list, on a slave)."""
        check_entries(entries)
        with self._lock:
            if tuple(entries) != self._entries:
                self._write(tuple(entries))

    def start_epoch(self, epoch: int, start_offset: int) -> None:
        """A new term begins writing at ``start_offset`` (this store's max offset); terms that
        wrote nothing below it are dropped.  ``epoch`` must exceed every known one."""
        with self._lock:
            entries = [*trimmed(self._entries, start_offset), EpochEntry(epoch, start_offset)]
            check_entries(entries)
            self._write(tuple(entries))
        log.info("new epoch recorded", extra={"epoch": epoch, "start_offset": start_offset})

    def truncate(self, max_offset: int) -> None:
        """The log was cut back to ``max_offset``: forget terms that start at or beyond it."""
        with self._lock:
            entries = tuple(trimmed(self._entries, max_offset))
            if entries != self._entries:
                self._write(entries)

    def _write(self, entries: tuple[EpochEntry, ...]) -> None:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.writelines(f"{e.epoch} {e.start_offset}\n" for e in entries)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._entries = entries

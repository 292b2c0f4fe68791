"""The commit log's own errors (raised by :mod:`.commitlog`, :mod:`.replica` and the store)."""

from __future__ import annotations


class CommitLogError(Exception):
    """Base of the commit log's own errors."""


class StoreClosedError(CommitLogError):
    """The commit log was closed."""


class OffsetMismatchError(CommitLogError, ValueError):
    """Replicated data does not start at this log's max offset."""

    def __init__(self, start_offset: int, max_offset: int, detail: str = "") -> None:
        super().__init__(detail or f"replicated data starts at {start_offset} but the commit log ends at "
                         f"{max_offset}; data must be appended contiguously")
        self.start_offset = start_offset
        self.max_offset = max_offset


class CorruptDataError(CommitLogError, ValueError):
    """Replicated data contained an invalid record; the log was cut back to before it."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid record at commit log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class CreateSegmentError(CommitLogError, OSError):
    """A new segment file could not be created (disk full, permissions)."""

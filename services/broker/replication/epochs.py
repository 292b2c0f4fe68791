"""Epochs of a broker group's commit log, sans-I/O.

Every master term is an *epoch*: a number that only grows (taken from the coordination service,
or 1 for a static master) and the commit-log offset where the term's first byte went.  A store's
epoch list says which term wrote which byte range; comparing two lists finds the last byte both
logs agree on (RocketMQ 5's "last consistent point").  The file that holds the list is owned by
:mod:`.epochfile`; the rules are in ``docs/replication.md`` ("Epochs").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = ["EpochEntry", "EpochError", "check_entries", "epoch_end", "last_common_offset", "trimmed"]


class EpochError(ValueError):
    """An epoch list that breaks the ordering rules."""


class EpochEntry(NamedTuple):
    """Term ``epoch`` wrote the commit log from ``start_offset`` (up to the next entry's start)."""

    epoch: int
    start_offset: int


def check_entries(entries: Sequence[EpochEntry]) -> None:
    """Epochs strictly increase and start offsets never decrease; all are non-negative."""
    previous: EpochEntry | None = None
    for entry in entries:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise EpochError(f"negative epoch entry {tuple(entry)}")
        if previous is not None:
            if entry.epoch <= previous.epoch:
                raise EpochError(f"epoch {entry.epoch} does not follow epoch {previous.epoch}")
            if entry.start_offset < previous.start_offset:
                raise EpochError(f"epoch {entry.epoch} starts at {entry.start_offset}, before epoch "
                                 f"{previous.epoch} ({previous.start_offset})")
        previous = entry


def epoch_end(entries: Sequence[EpochEntry], index: int, max_offset: int) -> int:
    """Where the term at ``entries[index]`` stopped writing in a log that ends at ``max_offset``."""
    end = entries[index + 1].start_offset if index + 1 < len(entries) else max_offset
    return min(end, max_offset)


def last_common_offset(mine: Sequence[EpochEntry], my_max: int,
                       theirs: Sequence[EpochEntry], their_max: int) -> int | None:
    """The end of the longest prefix both logs got from the same terms, or None when the lists
    share no term (nothing can be said from epochs: fall back to offsets).

    The newest term present in both lists with the same start offset is the last common one; both
    logs agree up to where the first of them stopped writing it."""
    theirs_by_epoch = {entry.epoch: (i, entry) for i, entry in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        entry = mine[i]
        found = theirs_by_epoch.get(entry.epoch)
        if found is None:
            continue
        j, other = found
        if other.start_offset != entry.start_offset:
            # the same number for two different terms cannot happen with a real DCS; trust the
            # earlier start only
            return min(entry.start_offset, other.start_offset)
        return min(epoch_end(mine, i, my_max), epoch_end(theirs, j, their_max))
    return None


def trimmed(entries: Iterable[EpochEntry], max_offset: int) -> list[EpochEntry]:
    """``entries`` without the terms that wrote nothing below ``max_offset`` (those starting at or
    beyond it); used before a store starts a new term at ``max_offset``, and after a truncation."""
    return [entry for entry in entries if entry.start_offset < max_offset]

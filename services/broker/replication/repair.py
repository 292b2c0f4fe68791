"""Divergence repair of a slave's commit log: cut it back to the master's point, keeping the cut
bytes under ``ha-diverged/``, but only when that is safe.  Rules: ``docs/replication.md``
("Divergence repair", "Epochs").
"""

from __future__ import annotations

import asyncio
import logging
import os

from services.broker.replication.epochfile import EpochFile
from services.broker.storage.record import CheckKind, check_record
from services.broker.storage.store import MessageStore

__all__ = ["DivergenceRepair", "is_record_boundary"]

log = logging.getLogger("services.broker.replication.slave")  # (the slave's log, as before)


class DivergenceRepair:
    """Cuts ``store``'s log back (see the module doc)."""

    def __init__(self, store: MessageStore, *, max_truncate: int, diverged_dir: str, segment_size: int,
                 epochs: EpochFile | None = None) -> None:
        self.store = store
        #: At most this many bytes are dropped (haSlaveFallbehindMax).
        self.max_truncate = max_truncate
        #: Where the dropped bytes are saved ("" = not saved).
        self.diverged_dir = diverged_dir
        self.segment_size = segment_size
        self.epochs = epochs

    async def repair(self, target: int) -> bool:
        """Cut the log back to ``target`` (the master's max offset, or the last common epoch
        point) if that is safe (see the module doc); True when it was cut."""
        store = self.store
        current = store.max_offset
        drop = current - target
        extra = {"master_max_offset": target, "slave_max_offset": current, "drop_bytes": drop}
        if target <= 0:
            log.error("the master's commit log is empty but this slave's is not; NOT truncating "
                      "automatically (a wiped master?): fix the master or empty this slave", extra=extra)
            return False
        if drop > self.max_truncate:
            log.error("this slave's commit log is ahead of the master's by more than "
                      "haSlaveFallbehindMax; NOT truncating automatically", extra=extra)
            return False
        if target < store.min_offset:
            log.error("the master's max offset is below this slave's retained range; NOT truncating",
                      extra=extra)
            return False
        ok = await asyncio.to_thread(self._truncate, target)
        if ok:
            log.error("DIVERGED: this slave's commit log was ahead of the master's; truncated it to the "
                      "master's max offset and resuming (dropped bytes saved)", extra={
                          **extra, "saved_to": self._saved_path(target, current) or "-"})
        return ok

    def _saved_path(self, start: int, end: int) -> str:
        if not self.diverged_dir:
            return ""
        return os.path.join(self.diverged_dir, f"{start:020d}-{end:020d}.bin")

    def _truncate(self, target: int) -> bool:
        store = self.store
        current = store.max_offset
        if not is_record_boundary(store, target, self.segment_size):
            log.error("the master's max offset is not a record boundary in this slave's commit log: the "
                      "logs differ before it; NOT truncating automatically", extra={
                          "master_max_offset": target, "slave_max_offset": current})
            return False
        path = self._saved_path(target, current)
        if path:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as out:
                    offset = target
                    while offset < current:
                        data = store.get_data(offset, current - offset)
                        if data is None:
                            break
                        with data:
                            out.write(data.data)
                            offset += data.size
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as err:
                log.error("cannot save the diverged bytes; NOT truncating", extra={"path": path,
                                                                                  "error": str(err)})
                return False
        store.truncate_dirty(target)
        if self.epochs is not None:
            self.epochs.truncate(target)
        return True



def is_record_boundary(store: MessageStore, offset: int, segment_size: int) -> bool:
    """Whether a record starts (or the log ends) at ``offset`` in ``store``'s commit log: walks
    the records of the segment holding it from the segment start (no CRC checks)."""
    if offset == store.max_offset:
        return True
    if not store.min_offset <= offset < store.max_offset:
        return False
    segment_start = offset - offset % segment_size
    if offset == segment_start:
        return True
    data = store.get_data(segment_start, offset - segment_start)
    if data is None:
        return False
    with data:
        view = data.data
        end = len(view)
        if end != offset - segment_start:
            return False
        pos = 0
        while pos < end:
            check = check_record(view, pos, end - pos, expected_offset=segment_start + pos, check_crc=False)
            if check.kind is not CheckKind.RECORD:
                return False
            pos += check.size
        return pos == end

"""When the master's commit log reached which offset: the history a slave's lag in seconds is
computed from (:class:`ProgressHistory`)."""

from __future__ import annotations

import bisect
from typing import Final

__all__ = ["ProgressHistory"]

#: Progress history used for the lag in seconds: one point per millisecond at most.
_HISTORY_RESOLUTION_S: Final = 0.001
_HISTORY_MAX: Final = 65_536


class ProgressHistory:
    """When the master's log reached which offset (for the lag in seconds): points (offset,
    wall-clock seconds), at most one per :data:`_HISTORY_RESOLUTION_S`, bounded."""

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._times: list[float] = []

    def note(self, offset: int, now: float) -> None:
        offsets = self._offsets
        if offsets and offset <= offsets[-1]:
            return
        if offsets and now - self._times[-1] < _HISTORY_RESOLUTION_S:
            offsets[-1] = offset  # the same millisecond: the bytes look at most 1 ms older
            return
        offsets.append(offset)
        self._times.append(now)
        if len(offsets) > 2 * _HISTORY_MAX:
            del offsets[:_HISTORY_MAX]
            del self._times[:_HISTORY_MAX]

    def arrival_time(self, offset: int) -> float | None:
        """The time by which the byte at ``offset`` had been written (None if unknown)."""
        i = bisect.bisect_right(self._offsets, offset)
        if i >= len(self._offsets):
            return None
        return self._times[i]

    @property
    def floor(self) -> int:
        """The lowest offset the history knows (0 when empty)."""
        return self._offsets[0] if self._offsets else 0

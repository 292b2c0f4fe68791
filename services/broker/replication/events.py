"""Events of the replication (HA) channel, as the sans-I/O protocol objects return them."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["AckReceived", "DataReceived", "Event", "HeartbeatReceived", "SlaveEvent", "TransferPlan"]


class AckReceived(NamedTuple):
    """The slave reported its max commit-log offset (master side)."""

    offset: int


class DataReceived(NamedTuple):
    """A slice of the master's commit log starting at ``offset`` (slave side).

    ``body`` is a read-only bytes-like object: ``bytes`` or a read-only ``memoryview``
    (zero-copy over the received chunk when a frame arrived whole).  Append it as is;
    call ``bytes(body)`` only if you need to keep an owned copy.
    """

    offset: int
    body: bytes | memoryview

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.body)


class HeartbeatReceived(NamedTuple):
    """A size-0 frame: ``offset`` is the master's next transfer offset (slave side)."""

    offset: int




class TransferPlan(NamedTuple):
    """The next data frame the master should send: ``size`` bytes at ``offset``."""

    offset: int
    size: int

    @property
    def end_offset(self) -> int:
        return self.offset + self.size


#: What the slave side decodes.
SlaveEvent = DataReceived | HeartbeatReceived
#: What either side decodes.
Event = AckReceived | DataReceived | HeartbeatReceived

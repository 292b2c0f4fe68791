"""Errors of the replication (HA) channel: every one is a :class:`ProtocolError`, and the only
correct reaction to one is to log it and close the connection."""

from __future__ import annotations

from collections.abc import Collection

from services.broker.replication.events import Event
from services.broker.replication.framing import AUTH_MAGIC

__all__ = [
    "AckBeyondMaxOffsetError",
    "AckBeyondSentOffsetError",
    "AckRegressionError",
    "AuthRequiredError",
    "AuthVersionError",
    "AuthenticationError",
    "AuthenticationFailedError",
    "ContinuityError",
    "FrameTooLargeError",
    "MalformedFrameError",
    "MasterNotAuthenticatingError",
    "ProtocolError",
    "RequestBeyondMaxOffsetError",
    "RequestOffsetUnavailableError",
]


class ProtocolError(Exception):
    """The peer broke the replication protocol; close the connection.

    ``events`` holds the events decoded from the same ``receive_data`` call before the
    offending frame (they are valid, but the connection is going away anyway).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.events: tuple[Event, ...] = ()


class MalformedFrameError(ProtocolError):
    """A frame that cannot be valid: negative offset or size, offset overflow."""


class FrameTooLargeError(ProtocolError):
    """A transfer header announced a body larger than the decoder accepts."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"transfer frame announces a {size}-byte body, more than the {limit}-byte limit "
            "(garbage on the stream, or the master's haTransferBatchSize exceeds the slave's limit)"
        )
        self.size = size
        self.limit = limit


class AckBeyondMaxOffsetError(ProtocolError):
    """The slave acknowledged an offset the master does not have."""

    def __init__(self, ack_offset: int, master_max_offset: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"slave acknowledged offset {ack_offset}, beyond the master's max offset "
            f"{master_max_offset}; ignoring it and closing the connection"
        )
        self.ack_offset = ack_offset
        self.master_max_offset = master_max_offset


class RequestBeyondMaxOffsetError(AckBeyondMaxOffsetError):
    """The slave's *first* ack (request offset) is beyond the master's max offset.

    The slave holds data the master does not: typically its log diverged after a master
    change.  It needs truncation/repair; resending will not help.
    """

    def __init__(self, ack_offset: int, master_max_offset: int) -> None:
        super().__init__(
            ack_offset,
            master_max_offset,
            f"slave requested offset {ack_offset}, beyond the master's max offset "
            f"{master_max_offset}: the slave's commit log is ahead of (diverged from) the master's",
        )


class AckBeyondSentOffsetError(ProtocolError):
    """The slave acknowledged data this connection has not sent yet."""

    def __init__(self, ack_offset: int, sent_offset: int) -> None:
        super().__init__(
            f"slave acknowledged offset {ack_offset}, but this connection has only sent up to {sent_offset}"
        )
        self.ack_offset = ack_offset
        self.sent_offset = sent_offset


class AckRegressionError(ProtocolError):
    """An ack lower than the previous ack on the same connection."""

    def __init__(self, ack_offset: int, previous_offset: int) -> None:
        super().__init__(
            f"slave ack went backwards from {previous_offset} to {ack_offset} on one connection "
            "(a slave that truncated its log must reconnect)"
        )
        self.ack_offset = ack_offset
        self.previous_offset = previous_offset


class RequestOffsetUnavailableError(ProtocolError):
    """The slave asked to resume below the master's earliest retained offset."""

    def __init__(self, request_offset: int, min_offset: int) -> None:
        super().__init__(
            f"slave requested offset {request_offset}, but the master only retains data from "
            f"{min_offset}; the slave must be rebuilt"
        )
        self.request_offset = request_offset
        self.min_offset = min_offset


class ContinuityError(ProtocolError):
    """A frame did not start where the slave's log ends."""

    def __init__(self, expected: int, received: int, *, heartbeat: bool) -> None:
        kind = "heartbeat" if heartbeat else "data frame"
        super().__init__(
            f"master {kind} at offset {received} does not continue the slave's log, which ends at "
            f"{expected}; reconnect"
        )
        self.expected = expected
        self.received = received
        self.heartbeat = heartbeat


class AuthenticationError(ProtocolError):
    """The authentication handshake failed (or one side has a secret and the other has none)."""


class AuthenticationFailedError(AuthenticationError):
    """Master side: the peer's answer is not the MAC of this connection's challenge."""

    def __init__(self) -> None:
        super().__init__("wrong authentication answer: the peer's haAuthSecret differs from this "
                         "master's (or the peer is not a PocketMQ slave)")


class MasterNotAuthenticatingError(AuthenticationError):
    """Slave side (with a secret): the master's first bytes are not a challenge."""

    def __init__(self, received: bytes) -> None:
        super().__init__(f"master does not authenticate; check haAuthSecret on both sides (its first bytes "
                         f"0x{received.hex()} are not an authentication challenge, which starts with "
                         f"{AUTH_MAGIC!r})")
        self.received = received


class AuthVersionError(AuthenticationError):
    """Slave side: the master's challenge has a version this slave does not speak."""

    def __init__(self, version: int, supported: Collection[int]) -> None:
        super().__init__(f"the master's authentication challenge has version {version}; this broker speaks "
                         f"{', '.join(str(v) for v in sorted(supported))}: upgrade the older broker")
        self.version = version


class AuthRequiredError(AuthenticationError):
    """Slave side (without a secret): the master sent an authentication challenge."""

    def __init__(self) -> None:
        super().__init__("the master requires haAuthSecret (it sent an authentication challenge); set the "
                         "master's haAuthSecret on this slave too")

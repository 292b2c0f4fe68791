"""The two ends of one replication (HA) connection as sans-I/O state machines.

:class:`MasterConnectionProtocol` decodes a slave's acks and plans the frames to send;
:class:`SlaveConnectionProtocol` decodes the master's frames.  Neither touches sockets, threads
or clocks: the I/O layers (``master.py``, ``slave.py``) feed them bytes and pass in what depends
on the outside world (the master's max and min offsets).  The rules they enforce are in
``docs/replication.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.broker.config import BrokerConfig
from services.broker.replication.errors import (
    AckBeyondMaxOffsetError,
    AckBeyondSentOffsetError,
    AckRegressionError,
    AuthRequiredError,
    ContinuityError,
    FrameTooLargeError,
    MalformedFrameError,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
)
from services.broker.replication.events import (
    AckReceived,
    DataReceived,
    Event,
    HeartbeatReceived,
    SlaveEvent,
    TransferPlan,
)
from services.broker.replication.framing import (
    ACK,
    ACK_SIZE,
    AUTH_MAGIC_HIGH,
    CATCHUP_BATCH_SIZE,
    DEFAULT_MAX_BODY_SIZE,
    HARD_MAX_BODY_SIZE,
    HEADER,
    MAX_OFFSET,
    TRANSFER_HEADER_SIZE,
    Buffer,
    byte_view,
    check_offset,
    encode_heartbeat,
)
from services.broker.storage.config import StoreConfig

__all__ = ["MasterConnectionProtocol", "SlaveConnectionProtocol", "first_transfer_offset"]

def first_transfer_offset(
    request_offset: int,
    master_max_offset: int,
    *,
    segment_size: int = StoreConfig.mapped_file_size_commit_log,
    min_offset: int = 0,
    sync_from_earliest: bool = False,
) -> int:
    """Where the master starts streaming to a slave that asked for ``request_offset``.

    * ``request_offset > 0``: resume exactly there (it must lie within
      ``min_offset..master_max_offset``).
    * ``request_offset == 0`` (empty slave): the start of the master's last segment,
      ``master_max_offset - master_max_offset % segment_size`` (the original's rule), or
      ``min_offset`` (the earliest retained offset) when ``sync_from_earliest`` is set.
    """
    if request_offset < 0:
        raise ValueError(f"request offset {request_offset} is negative")
    if segment_size <= 0:
        raise ValueError(f"segment size {segment_size} must be positive")
    if not 0 <= min_offset <= master_max_offset:
        raise ValueError(f"min offset {min_offset} is outside 0..{master_max_offset}")
    if request_offset > master_max_offset:
        raise RequestBeyondMaxOffsetError(request_offset, master_max_offset)
    if request_offset > 0:
        if request_offset < min_offset:
            raise RequestOffsetUnavailableError(request_offset, min_offset)
        return request_offset
    if sync_from_earliest:
        return min_offset
    return max(min_offset, master_max_offset - master_max_offset % segment_size)


class MasterConnectionProtocol:
    """Master side of one slave connection: decodes acks and plans outgoing frames.

    Typical use by the I/O layer::

        events = proto.receive_data(chunk, commit_log.max_offset)   # acks
        plan = proto.next_transfer(commit_log.max_offset, commit_log.min_offset)
        if plan is not None:
            body = commit_log.read(plan.offset, plan.size)          # may be shorter
            proto.advance(len(body))                                # before awaiting the write
            writer.write(encode_transfer_header(plan.offset, len(body)))
            writer.write(body)
        elif idle_for >= heartbeat_interval and (hb := proto.heartbeat_frame()) is not None:
            writer.write(hb)

    Call :meth:`advance` as soon as a frame is handed to the transport (before awaiting a
    drain): acks are checked against the sent position.
    """

    def __init__(
        self,
        *,
        batch_size: int = BrokerConfig.ha_transfer_batch_size,
        segment_size: int = StoreConfig.mapped_file_size_commit_log,
        sync_from_earliest: bool = False,
        catchup_batch_size: int = CATCHUP_BATCH_SIZE,
    ) -> None:
        if not 1 <= catchup_batch_size <= DEFAULT_MAX_BODY_SIZE:
            raise ValueError(f"catch-up batch size {catchup_batch_size} is outside "
                             f"1..{DEFAULT_MAX_BODY_SIZE}")
        if not 1 <= batch_size <= HARD_MAX_BODY_SIZE:
            raise ValueError(f"batch size {batch_size} is outside 1..{HARD_MAX_BODY_SIZE}")
        if segment_size <= 0:
            raise ValueError(f"segment size {segment_size} must be positive")
        self._batch_size = batch_size
        self._catchup_batch_size = max(batch_size, catchup_batch_size)
        self._segment_size = segment_size
        self._sync_from_earliest = sync_from_earliest
        self._partial = bytearray()
        self._request_offset: int | None = None
        self._ack_offset: int | None = None
        self._next_transfer: int | None = None
        self._plan_end = 0
        self._failure: ProtocolError | None = None

    # -- state
    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def request_offset(self) -> int | None:
        """The slave's first ack (None until it arrived)."""
        return self._request_offset

    @property
    def ack_offset(self) -> int | None:
        """The slave's latest ack (None until the first one arrived)."""
        return self._ack_offset

    @property
    def next_transfer_offset(self) -> int | None:
        """Where the next data frame starts (None until the first transfer is planned).

        This is also the end of everything sent on this connection so far.
        """
        return self._next_transfer

    @property
    def failed(self) -> ProtocolError | None:
        return self._failure

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ProtocolError(f"replication connection already failed: {self._failure}") from self._failure

    def _fail(self, exc: ProtocolError, events: Sequence[Event]) -> None:
        exc.events = tuple(events)
        self._failure = exc

    # -- receiving
    def receive_data(self, data: Buffer, master_max_offset: int) -> list[AckReceived]:
        """Decode acks from any chunk of the stream (partial acks are buffered).

        ``master_max_offset`` is the master's current max commit-log offset, used to
        reject acks beyond it.  Every valid ack yields one :class:`AckReceived`.
        """
        self._raise_if_failed()
        if master_max_offset < 0:
            raise ValueError(f"master max offset {master_max_offset} is negative")
        events: list[AckReceived] = []
        try:
            self._decode(byte_view(data), master_max_offset, events)
        except ProtocolError as exc:
            self._fail(exc, events)
            raise
        return events

    def _decode(self, view: memoryview, master_max_offset: int, events: list[AckReceived]) -> None:
        n = len(view)
        pos = 0
        partial = self._partial
        if partial:
            need = ACK_SIZE - len(partial)
            if n < need:
                partial += view
                return
            partial += view[:need]
            pos = need
            (offset,) = ACK.unpack(partial)
            partial.clear()
            self._accept(offset, master_max_offset, events)
        end = n - (n - pos) % ACK_SIZE
        for (offset,) in ACK.iter_unpack(view[pos:end]):
            self._accept(offset, master_max_offset, events)
        if end < n:
            partial += view[end:]

    def _accept(self, offset: int, master_max_offset: int, events: list[AckReceived]) -> None:
        if offset < 0:
            raise MalformedFrameError(f"slave reported a negative offset {offset}")
        if self._request_offset is None:
            if offset > master_max_offset:
                raise RequestBeyondMaxOffsetError(offset, master_max_offset)
            self._request_offset = offset
        else:
            if offset > master_max_offset:
                raise AckBeyondMaxOffsetError(offset, master_max_offset)
            previous = self._ack_offset
            assert previous is not None
            if offset < previous:
                raise AckRegressionError(offset, previous)
            sent = self._next_transfer if self._next_transfer is not None else self._request_offset
            if offset > sent:
                raise AckBeyondSentOffsetError(offset, sent)
        self._ack_offset = offset
        events.append(AckReceived(offset))

    # -- sending
    def next_transfer(self, master_max_offset: int, min_offset: int = 0) -> TransferPlan | None:
        """Plan the next data frame, or None when there is nothing to send.

        Returns None until the request offset arrived.  The first call decides the start
        with :func:`first_transfer_offset` (``min_offset`` = the master's earliest retained
        offset; it matters only then).  A plan never exceeds the batch size (the catch-up batch
        size while at least that much waits: ``CATCHUP_BATCH_SIZE``) and never
        crosses a segment boundary, so its bytes come from one segment file.  Planning does
        not move the transfer position; :meth:`advance` does.
        """
        self._raise_if_failed()
        if self._request_offset is None:
            return None
        if self._next_transfer is None:
            try:
                start = first_transfer_offset(
                    self._request_offset,
                    master_max_offset,
                    segment_size=self._segment_size,
                    min_offset=min_offset,
                    sync_from_earliest=self._sync_from_earliest,
                )
            except ProtocolError as exc:
                self._fail(exc, [])
                raise
            self._next_transfer = start
        offset = self._next_transfer
        if master_max_offset < offset:
            raise ValueError(f"master max offset {master_max_offset} is below the transfer offset {offset}")
        segment_end = (offset // self._segment_size + 1) * self._segment_size
        backlog = master_max_offset - offset
        batch = self._catchup_batch_size if backlog >= self._catchup_batch_size else self._batch_size
        size = min(batch, backlog, segment_end - offset)
        if size <= 0:
            return None
        self._plan_end = offset + size
        return TransferPlan(offset, size)

    def advance(self, size: int) -> None:
        """Record that a ``size``-byte frame at :attr:`next_transfer_offset` was sent.

        ``size`` may be smaller than the last plan's size but must fit in it.
        """
        self._raise_if_failed()
        offset = self._next_transfer
        if offset is None:
            raise RuntimeError("advance() before any transfer was planned")
        if size <= 0 or offset + size > self._plan_end:
            raise ValueError(
                f"cannot advance {size} bytes from {offset}: the last plan ends at {self._plan_end}"
            )
        self._next_transfer = offset + size

    def heartbeat_frame(self) -> bytes | None:
        """A heartbeat carrying the next transfer offset, or None before the first plan."""
        self._raise_if_failed()
        if self._next_transfer is None:
            return None
        return encode_heartbeat(self._next_transfer)


# --------------------------------------------------------------------------- slave side


class SlaveConnectionProtocol:
    """Slave side of the connection: decodes transfer frames from any chunks.

    ``initial_offset`` is the slave's max commit-log offset when the connection opened
    (the request offset it sends first).  The protocol tracks :attr:`next_offset`, the
    slave's max offset once every emitted :class:`DataReceived` has been appended; it
    advances as data events are emitted, so the I/O layer must append each one in order
    (or close the connection).

    Continuity: once the slave has data (``initial_offset > 0`` or a data frame was
    received), every data frame must start at :attr:`next_offset`, else
    :class:`ContinuityError`.  Heartbeats carry the master's next transfer offset, which in
    an in-order stream equals :attr:`next_offset` too, so they are checked the same way
    (this catches divergence even while no data flows); pass ``check_heartbeats=False`` to
    accept any heartbeat offset.  An empty slave accepts the first data frame at any
    offset, because an empty slave may be started at the master's last segment.

    Body bytes come out as soon as they arrive: a frame split across chunks comes out as
    several :class:`DataReceived` pieces, each continuing the previous one, and every body is a
    read-only view of the chunk passed in (nothing is copied or buffered but a partial header).
    The caller must consume the events before it reuses that buffer, which is what lets the
    slave receive into preallocated buffers with ``recv_into``.
    """

    def __init__(
        self,
        initial_offset: int,
        *,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        check_heartbeats: bool = True,
    ) -> None:
        check_offset(initial_offset)
        if not 1 <= max_body_size <= HARD_MAX_BODY_SIZE:
            raise ValueError(f"max body size {max_body_size} is outside 1..{HARD_MAX_BODY_SIZE}")
        self._initial_offset = initial_offset
        self._next_offset = initial_offset
        self._has_data = initial_offset > 0
        self._max_body_size = max_body_size
        self._check_heartbeats = check_heartbeats
        self._header = bytearray()  # a partial header (< 12 bytes)
        self._remaining = 0  # body bytes of the current frame still to come
        self._frame_size = 0  # body bytes of the last data frame
        self._failure: ProtocolError | None = None

    @property
    def initial_offset(self) -> int:
        return self._initial_offset

    @property
    def next_offset(self) -> int:
        """Where the next data frame must start: the slave's max offset after applying all
        data events emitted so far."""
        return self._next_offset

    @property
    def has_data(self) -> bool:
        return self._has_data

    @property
    def max_body_size(self) -> int:
        return self._max_body_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete header held back (bodies are never held)."""
        return len(self._header)

    @property
    def frame_remaining(self) -> int:
        """Body bytes of the current frame not received yet."""
        return self._remaining

    @property
    def frame_size(self) -> int:
        """Body bytes of the last data frame whose header was decoded (0 before any)."""
        return self._frame_size

    @property
    def failed(self) -> ProtocolError | None:
        return self._failure

    def receive_data(self, data: Buffer) -> list[SlaveEvent]:
        """Decode frames from any chunk of the stream; returns the events it completed."""
        if self._failure is not None:
            raise ProtocolError(f"replication connection already failed: {self._failure}") from self._failure
        events: list[SlaveEvent] = []
        try:
            self._decode(byte_view(data).toreadonly(), events)
        except ProtocolError as exc:
            exc.events = tuple(events)
            self._failure = exc
            raise
        return events

    def body_received(self, size: int) -> int:
        """Record that the next ``size`` body bytes of the current frame were received
        elsewhere than through :meth:`receive_data` (straight into the slave's dispatch ring);
        returns the offset they start at. The same as the :class:`DataReceived` that
        :meth:`receive_data` would have emitted for them."""
        if self._failure is not None:
            raise ProtocolError(f"replication connection already failed: {self._failure}") from self._failure
        if not 0 < size <= self._remaining:
            raise ValueError(f"{size} body bytes received, {self._remaining} expected")
        offset = self._next_offset
        self._next_offset = offset + size
        self._remaining -= size
        return offset

    def _decode(self, view: memoryview, events: list[SlaveEvent]) -> None:
        n = len(view)
        pos = 0
        header = self._header
        while pos < n:
            remaining = self._remaining
            if remaining:
                take = min(remaining, n - pos)
                offset = self._next_offset
                self._next_offset = offset + take
                self._remaining = remaining - take
                events.append(DataReceived(offset, view[pos:pos + take]))
                pos += take
                continue
            if header or n - pos < TRANSFER_HEADER_SIZE:
                take = min(TRANSFER_HEADER_SIZE - len(header), n - pos)
                header += view[pos:pos + take]
                pos += take
                if len(header) < TRANSFER_HEADER_SIZE:
                    return
                offset, size = HEADER.unpack(header)
                header.clear()
            else:
                offset, size = HEADER.unpack_from(view, pos)
                pos += TRANSFER_HEADER_SIZE
            self._check_header(offset, size)
            if size == 0:
                events.append(HeartbeatReceived(offset))
            else:
                self._next_offset = offset
                self._has_data = True
                self._remaining = size
                self._frame_size = size

    def _check_header(self, offset: int, size: int) -> None:
        if offset >> 32 == AUTH_MAGIC_HIGH:
            raise AuthRequiredError()
        if offset < 0:
            raise MalformedFrameError(f"transfer frame has a negative offset {offset}")
        if size < 0:
            raise MalformedFrameError(f"transfer frame has a negative body size {size}")
        if size > self._max_body_size:
            raise FrameTooLargeError(size, self._max_body_size)
        if offset > MAX_OFFSET - size:
            raise MalformedFrameError(f"transfer frame at {offset} with {size} bytes overflows int64")
        heartbeat = size == 0
        if self._has_data and (self._check_heartbeats or not heartbeat) and offset != self._next_offset:
            raise ContinuityError(self._next_offset, offset, heartbeat=heartbeat)

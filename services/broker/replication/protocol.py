"""Sans-I/O framing of the commit-log replication channel (the HA port).

Nothing in this module touches sockets, asyncio, threads or clocks: the I/O layer
(``master.py`` / ``slave.py``) feeds received bytes into a protocol object and gets
events back, and asks the protocol object what to send next.  Everything that depends
on the outside world (the master's max offset, its earliest retained offset) is passed
in as an argument.

Wire format (all integers big-endian, signed, as the original writes them)::

    slave -> master   ack        int64 offset                      (8 bytes)
    master -> slave   transfer   int64 offset · int32 size · body  (12-byte header)

The slave's ack is its max commit-log offset.  The first ack on a connection is the
*request offset* (where the slave wants the stream to start); later acks are sent after
every append and as a heartbeat.  A transfer with ``size == 0`` is a heartbeat from the
master; its offset is the master's *next transfer offset* on this connection, i.e. the
offset the next data frame will start at.  Because frames arrive in order, a slave that
has applied every earlier frame has exactly that offset as its max offset, so the slave
can check heartbeats for continuity just like data frames (see
:class:`SlaveConnectionProtocol`).

Optional authentication (``haAuthSecret``; see :class:`MasterAuthenticator` and
:class:`SlaveAuthenticator`).  With a secret, the master speaks first, right after accept, and
nothing else flows until the slave has answered::

    master -> slave   challenge  b"PMQC" · uint8 version · 16-byte nonce          (21 bytes)
    slave -> master   answer     HMAC-SHA256(secret, challenge · b"pocketmq-ha")  (32 bytes)

and then the stream above, unchanged (the answer and the request offset usually travel in one
segment).  Without a secret nothing of this is on the wire: the stream is byte for byte the
original's.  The nonce comes from the I/O layer (``secrets.token_bytes``), so this module stays
deterministic.  A transfer header can never start with the magic (its offset would exceed
``0x504D5143 << 32``, about 5.8 EiB), so a slave without a secret recognises a challenge in
place of its first frame (:class:`AuthRequiredError`) instead of decoding it as garbage.

Decisions worth knowing (each is tested):

* Errors are :class:`ProtocolError` subclasses.  After a ``receive_data`` call raised,
  the protocol object is dead: every later call raises again.  The I/O layer's only
  correct reaction is to log the error and close the connection (the slave then
  reconnects with a fresh request offset).  Events decoded from the same chunk before
  the bad frame are attached to the error as ``error.events``.
* Master side: an ack beyond the master's max offset is rejected
  (:class:`AckBeyondMaxOffsetError`; the original accepted one as a request offset, and a
  bogus ack could mark unreplicated data as replicated).  Within one connection acks must
  not go backwards (:class:`AckRegressionError`): a slave's max offset only grows while it
  is connected, and a slave that truncated its log must reconnect, because the master's
  transfer position would otherwise leave a gap.  An ack beyond what this connection has
  sent so far is rejected too (:class:`AckBeyondSentOffsetError`): a slave cannot hold
  data it was never sent.
* Slave side: the protocol advances its own expected offset as it emits each
  :class:`DataReceived`, so the I/O layer must append every data event, in order, before
  handling the next one, or close the connection.  An empty slave (initial offset 0) takes
  the first data frame at any offset (the master may start at its last segment); from
  then on every frame must start exactly where the previous one ended.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Collection, Sequence
from typing import Final, NamedTuple

__all__ = [
    "ACK_SIZE",
    "AUTH_CHALLENGE_SIZE",
    "AUTH_CONTEXT",
    "AUTH_MAC_SIZE",
    "AUTH_MAGIC",
    "AUTH_NONCE_SIZE",
    "AUTH_VERSION",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_SEGMENT_SIZE",
    "DEFAULT_TRANSFER_BATCH_SIZE",
    "HARD_MAX_BODY_SIZE",
    "MAX_OFFSET",
    "TRANSFER_HEADER_SIZE",
    "AckBeyondMaxOffset",
    "AckBeyondMaxOffsetError",
    "AckBeyondSentOffsetError",
    "AckReceived",
    "AckRegressionError",
    "AuthRequiredError",
    "AuthVersionError",
    "AuthenticationError",
    "AuthenticationFailedError",
    "ContinuityError",
    "DataReceived",
    "Event",
    "FrameTooLargeError",
    "HeartbeatReceived",
    "MalformedFrameError",
    "MasterAuthenticator",
    "MasterConnectionProtocol",
    "MasterNotAuthenticatingError",
    "ProtocolError",
    "RequestBeyondMaxOffsetError",
    "RequestOffsetUnavailableError",
    "SlaveAuthenticator",
    "SlaveConnectionProtocol",
    "SlaveEvent",
    "TransferPlan",
    "auth_mac",
    "encode_ack",
    "encode_challenge",
    "encode_heartbeat",
    "encode_transfer_header",
    "first_transfer_offset",
]

ACK_SIZE: Final = 8
TRANSFER_HEADER_SIZE: Final = 12
#: ``haTransferBatchSize``: the largest body the master puts in one frame.
DEFAULT_TRANSFER_BATCH_SIZE: Final = 32 * 1024
#: Default decoder limit on the slave.  Deliberately larger than the default batch size:
#: the batch size is the *master's* setting and the slave cannot know it, so a master
#: configured with a bigger batch must still be understood (the original slave reads
#: into a 4 MiB buffer, which is the same limit).
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
#: No configuration may allow bodies larger than this; a size above the configured limit
#: is treated as garbage rather than buffered.
HARD_MAX_BODY_SIZE: Final = 64 * 1024 * 1024
#: Commit-log segment size (one mmap'd file).
DEFAULT_SEGMENT_SIZE: Final = 1024 * 1024 * 1024
MAX_OFFSET: Final = 2**63 - 1
_MAX_INT32: Final = 2**31 - 1

#: Authentication (only with ``haAuthSecret``): the challenge's magic and version, the nonce and
#: answer sizes, and the context string appended to the challenge under the MAC.
AUTH_MAGIC: Final = b"PMQC"
AUTH_VERSION: Final = 1
AUTH_NONCE_SIZE: Final = 16
AUTH_CHALLENGE_SIZE: Final = len(AUTH_MAGIC) + 1 + AUTH_NONCE_SIZE
AUTH_MAC_SIZE: Final = 32
AUTH_CONTEXT: Final = b"pocketmq-ha"
#: A transfer header whose offset has these top 32 bits is the master's challenge.
_AUTH_MAGIC_HIGH: Final = int.from_bytes(AUTH_MAGIC, "big")

_ACK: Final = struct.Struct(">q")
_HEADER: Final = struct.Struct(">qi")

Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------- events


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


SlaveEvent = DataReceived | HeartbeatReceived
Event = AckReceived | DataReceived | HeartbeatReceived


class TransferPlan(NamedTuple):
    """The next data frame the master should send: ``size`` bytes at ``offset``."""

    offset: int
    size: int

    @property
    def end_offset(self) -> int:
        return self.offset + self.size


# --------------------------------------------------------------------------- errors


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


#: Alias with the name used in design discussions.
AckBeyondMaxOffset = AckBeyondMaxOffsetError


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


# --------------------------------------------------------------------------- encoding


def _check_offset(offset: int) -> None:
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} is outside 0..{MAX_OFFSET}")


def encode_ack(offset: int) -> bytes:
    """Slave -> master: the slave's max commit-log offset (8 bytes)."""
    _check_offset(offset)
    return _ACK.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """Master -> slave: the 12-byte header of a frame with a ``size``-byte body at ``offset``."""
    _check_offset(offset)
    if not 0 <= size <= _MAX_INT32:
        raise ValueError(f"body size {size} is outside 0..{_MAX_INT32}")
    if offset > MAX_OFFSET - size:
        raise ValueError(f"frame at {offset} with {size} bytes overflows int64 offsets")
    return _HEADER.pack(offset, size)


def encode_heartbeat(offset: int) -> bytes:
    """Master -> slave: a heartbeat (size-0 frame) carrying the next transfer offset."""
    return encode_transfer_header(offset, 0)


def encode_challenge(nonce: Buffer, version: int = AUTH_VERSION) -> bytes:
    """Master -> slave: the 21-byte challenge (magic, version, ``nonce``)."""
    nonce = bytes(nonce)
    if len(nonce) != AUTH_NONCE_SIZE:
        raise ValueError(f"the nonce must be {AUTH_NONCE_SIZE} bytes, not {len(nonce)}")
    if not 0 <= version <= 255:
        raise ValueError(f"version {version} is outside 0..255")
    return AUTH_MAGIC + bytes((version,)) + nonce


def auth_mac(secret: bytes, challenge: Buffer) -> bytes:
    """Slave -> master: the 32-byte answer to ``challenge``,
    HMAC-SHA256(secret, challenge · ``b"pocketmq-ha"``)."""
    if not secret:
        raise ValueError("an empty secret authenticates nothing")
    return hmac.new(secret, bytes(challenge) + AUTH_CONTEXT, hashlib.sha256).digest()


def first_transfer_offset(
    request_offset: int,
    master_max_offset: int,
    *,
    segment_size: int = DEFAULT_SEGMENT_SIZE,
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


def _byte_view(data: Buffer) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# --------------------------------------------------------------------------- authentication


class MasterAuthenticator:
    """Master side of the handshake on one connection (only with a secret).

    Send :attr:`challenge` right after accept, then feed received bytes to :meth:`receive_data`
    until it returns something other than None; only then create the
    :class:`MasterConnectionProtocol` and feed it what was returned.  Nothing the peer sent is
    interpreted, and nothing may be sent to it, before the answer is verified.  When the peer
    closes or the handshake deadline passes first, close with :meth:`incomplete_error`.
    """

    def __init__(self, secret: bytes, nonce: Buffer, *, version: int = AUTH_VERSION) -> None:
        self._challenge = encode_challenge(nonce, version)
        self._expected = auth_mac(secret, self._challenge)
        self._answer = bytearray()
        self._authenticated = False
        self._failure: AuthenticationError | None = None

    @property
    def challenge(self) -> bytes:
        return self._challenge

    @property
    def authenticated(self) -> bool:
        return self._authenticated

    @property
    def remaining(self) -> int:
        """Bytes of the answer still missing (read at most this many to never over-read)."""
        return AUTH_MAC_SIZE - len(self._answer)

    def receive_data(self, data: Buffer) -> memoryview | None:
        """Feed bytes of the answer: None while it is incomplete; once complete and correct, the
        bytes that followed it in ``data`` (a view of ``data``, possibly empty), which belong to
        the replication stream.  A wrong answer raises :class:`AuthenticationFailedError` (the
        comparison takes constant time)."""
        if self._failure is not None:
            raise ProtocolError(f"authentication already failed: {self._failure}") from self._failure
        view = _byte_view(data)
        if self._authenticated:
            return view
        take = min(self.remaining, len(view))
        self._answer += view[:take]
        if len(self._answer) < AUTH_MAC_SIZE:
            return None
        if not hmac.compare_digest(self._answer, self._expected):
            self._failure = AuthenticationFailedError()
            raise self._failure
        self._authenticated = True
        return view[take:]

    def incomplete_error(self, why: str) -> AuthenticationError:
        """The error for a peer that did not complete its answer (``why``: it closed, timed out)."""
        got = len(self._answer)
        return AuthenticationError(f"no authentication answer ({why} after {got} of {AUTH_MAC_SIZE} bytes): "
                                   "the peer has no haAuthSecret, or is not a PocketMQ slave")


class SlaveAuthenticator:
    """Slave side of the handshake (only with a secret).

    Before sending anything, read the master's challenge (at most :attr:`remaining` bytes at a
    time: the master sends nothing else until it has the answer) and feed it to
    :meth:`receive_data`; once it returns the 32-byte answer, send the answer followed by the
    request offset.  The first bytes are checked as they arrive, so a peer that is not an
    authenticating master is recognised without waiting for 21 bytes.
    """

    def __init__(self, secret: bytes, *, versions: Collection[int] = (AUTH_VERSION,)) -> None:
        if not secret:
            raise ValueError("an empty secret authenticates nothing")
        self._secret = secret
        self._versions = frozenset(versions)
        self._challenge = bytearray()
        self._answer: bytes | None = None

    @property
    def remaining(self) -> int:
        return AUTH_CHALLENGE_SIZE - len(self._challenge)

    @property
    def answer(self) -> bytes | None:
        return self._answer

    def receive_data(self, data: Buffer) -> bytes | None:
        """Feed bytes of the challenge: None while it is incomplete, then the answer to send.

        Raises :class:`MasterNotAuthenticatingError` as soon as the bytes cannot be a challenge,
        :class:`AuthVersionError` for a version not in ``versions``, and
        :class:`MalformedFrameError` for bytes beyond the challenge."""
        if self._answer is not None:
            raise ProtocolError("the challenge was already answered")
        view = _byte_view(data)
        take = min(self.remaining, len(view))
        challenge = self._challenge
        challenge += view[:take]
        magic = len(AUTH_MAGIC)
        head = bytes(challenge[:magic])
        if head != AUTH_MAGIC[:len(head)]:
            raise MasterNotAuthenticatingError(bytes(challenge[:8]))
        if len(challenge) > magic and challenge[magic] not in self._versions:
            raise AuthVersionError(challenge[magic], self._versions)
        if take < len(view):
            raise MalformedFrameError(f"the master sent {len(view) - take} bytes after its authentication "
                                      "challenge before it was answered")
        if len(challenge) < AUTH_CHALLENGE_SIZE:
            return None
        self._answer = auth_mac(self._secret, challenge)
        return self._answer


# --------------------------------------------------------------------------- master side


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
        batch_size: int = DEFAULT_TRANSFER_BATCH_SIZE,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        sync_from_earliest: bool = False,
    ) -> None:
        if not 1 <= batch_size <= HARD_MAX_BODY_SIZE:
            raise ValueError(f"batch size {batch_size} is outside 1..{HARD_MAX_BODY_SIZE}")
        if segment_size <= 0:
            raise ValueError(f"segment size {segment_size} must be positive")
        self._batch_size = batch_size
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
            self._decode(_byte_view(data), master_max_offset, events)
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
            (offset,) = _ACK.unpack(partial)
            partial.clear()
            self._accept(offset, master_max_offset, events)
        end = n - (n - pos) % ACK_SIZE
        for (offset,) in _ACK.iter_unpack(view[pos:end]):
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
        offset; it matters only then).  A plan never exceeds the batch size and never
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
        size = min(self._batch_size, master_max_offset - offset, segment_end - offset)
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

    Frames that arrive whole in one ``bytes`` chunk are delivered as zero-copy read-only
    memoryviews of it; a frame split across chunks is assembled once into its own buffer.
    Other buffer types are copied first, since the caller may reuse them.

    ``stream_bodies=True`` (what the slave's receive loop uses) delivers body bytes as soon as
    they arrive instead: a frame split across chunks comes out as several
    :class:`DataReceived` pieces, each continuing the previous one, and every body is a view
    of the chunk passed in, whatever its type (nothing is copied or buffered but a partial
    header).  The caller must consume the events before it reuses that buffer, which is what
    lets it receive into one preallocated buffer with ``recv_into``.
    """

    def __init__(
        self,
        initial_offset: int,
        *,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        check_heartbeats: bool = True,
        stream_bodies: bool = False,
    ) -> None:
        _check_offset(initial_offset)
        if not 1 <= max_body_size <= HARD_MAX_BODY_SIZE:
            raise ValueError(f"max body size {max_body_size} is outside 1..{HARD_MAX_BODY_SIZE}")
        self._initial_offset = initial_offset
        self._next_offset = initial_offset
        self._has_data = initial_offset > 0
        self._max_body_size = max_body_size
        self._check_heartbeats = check_heartbeats
        self._header = bytearray()  # a partial header (< 12 bytes)
        self._pending: TransferPlan | None = None  # header of a frame whose body is incomplete
        self._body = bytearray()
        self._filled = 0
        self._stream_bodies = stream_bodies
        self._remaining = 0  # (stream_bodies) body bytes of the current frame still to come
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
        """Bytes received of the incomplete frame, if any (header included)."""
        if self._pending is not None:
            return TRANSFER_HEADER_SIZE + self._filled
        return len(self._header)

    @property
    def frame_remaining(self) -> int:
        """(``stream_bodies``) Body bytes of the current frame not received yet."""
        return self._remaining

    @property
    def failed(self) -> ProtocolError | None:
        return self._failure

    def receive_data(self, data: Buffer) -> list[SlaveEvent]:
        """Decode frames from any chunk of the stream; returns the completed frames' events."""
        if self._failure is not None:
            raise ProtocolError(f"replication connection already failed: {self._failure}") from self._failure
        if self._stream_bodies:
            view = _byte_view(data).toreadonly()
            decode = self._decode_stream
        else:
            view = memoryview(data) if isinstance(data, bytes) else memoryview(bytes(_byte_view(data)))
            decode = self._decode
        events: list[SlaveEvent] = []
        try:
            decode(view, events)
        except ProtocolError as exc:
            exc.events = tuple(events)
            self._failure = exc
            raise
        return events

    def _decode(self, view: memoryview, events: list[SlaveEvent]) -> None:
        n = len(view)
        pos = 0
        if self._header or self._pending is not None:
            pos = self._continue_partial(view, events)
            if pos < 0:
                return
        # Fast path: frames lying whole in this chunk are sliced out without copying.
        while n - pos >= TRANSFER_HEADER_SIZE:
            offset, size = _HEADER.unpack_from(view, pos)
            self._check_header(offset, size)
            start = pos + TRANSFER_HEADER_SIZE
            end = start + size
            if end > n:
                self._start_body(offset, size, view[start:])
                return
            self._emit(offset, size, view[start:end], events)
            pos = end
        if pos < n:
            self._header += view[pos:]

    def _decode_stream(self, view: memoryview, events: list[SlaveEvent]) -> None:
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
                offset, size = _HEADER.unpack(header)
                header.clear()
            else:
                offset, size = _HEADER.unpack_from(view, pos)
                pos += TRANSFER_HEADER_SIZE
            self._check_header(offset, size)
            if size == 0:
                events.append(HeartbeatReceived(offset))
            else:
                self._next_offset = offset
                self._has_data = True
                self._remaining = size

    def _continue_partial(self, view: memoryview, events: list[SlaveEvent]) -> int:
        """Complete the buffered frame from ``view``; returns the bytes used, or -1 if the
        whole chunk was used and the frame is still incomplete."""
        pos = 0
        if self._pending is None:
            take = min(TRANSFER_HEADER_SIZE - len(self._header), len(view))
            self._header += view[:take]
            pos = take
            if len(self._header) < TRANSFER_HEADER_SIZE:
                return -1
            offset, size = _HEADER.unpack(self._header)
            self._header.clear()
            self._check_header(offset, size)
            if size == 0:
                self._emit(offset, 0, b"", events)
                return pos
            self._start_body(offset, size, view[pos:pos])
        pending = self._pending
        assert pending is not None
        take = min(pending.size - self._filled, len(view) - pos)
        self._body[self._filled : self._filled + take] = view[pos : pos + take]
        self._filled += take
        pos += take
        if self._filled < pending.size:
            return -1
        body = memoryview(self._body).toreadonly()
        self._body = bytearray()
        self._filled = 0
        self._pending = None
        self._emit(pending.offset, pending.size, body, events)
        return pos

    def _start_body(self, offset: int, size: int, available: memoryview) -> None:
        self._pending = TransferPlan(offset, size)
        self._body = bytearray(size)
        self._filled = len(available)
        self._body[: self._filled] = available

    def _check_header(self, offset: int, size: int) -> None:
        if offset >> 32 == _AUTH_MAGIC_HIGH:
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

    def _emit(self, offset: int, size: int, body: bytes | memoryview, events: list[SlaveEvent]) -> None:
        if size == 0:
            events.append(HeartbeatReceived(offset))
            return
        self._next_offset = offset + size
        self._has_data = True
        events.append(DataReceived(offset, body))

"""The optional ``haAuthSecret`` handshake of the replication (HA) channel, sans-I/O.

The master challenges, the slave answers with an HMAC of the challenge; see
``docs/ha-authentication.md`` for what it protects against and what it does not.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection
from typing import Final

from services.broker.replication.errors import (
    AuthenticationError,
    AuthenticationFailedError,
    AuthVersionError,
    MalformedFrameError,
    MasterNotAuthenticatingError,
    ProtocolError,
)
from services.broker.replication.framing import (
    AUTH_CHALLENGE_SIZE,
    AUTH_CONTEXT,
    AUTH_MAC_SIZE,
    AUTH_MAGIC,
    AUTH_NONCE_SIZE,
    AUTH_VERSION,
    Buffer,
    byte_view,
)

__all__ = [
    "AUTH_TIMEOUT_S",
    "MasterAuthenticator",
    "SlaveAuthenticator",
    "auth_mac",
    "encode_challenge",
    "handshake_timeout_s",
]

#: Deadline of the handshake on both sides (or haHousekeepingInterval if that is shorter).
AUTH_TIMEOUT_S: Final = 5.0


def handshake_timeout_s(housekeeping_interval_s: float) -> float:
    """How long either side waits for the other's part of the handshake."""
    return min(AUTH_TIMEOUT_S, housekeeping_interval_s)


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
        view = byte_view(data)
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
        view = byte_view(data)
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

"""The haAuthSecret handshake, sans I/O: challenge encoding, the answer (HMAC-SHA256 computed
independently here), verification in any chunking, wrong and truncated answers, version
mismatches, and how each side recognises a peer that does not speak it."""

from __future__ import annotations

import hashlib
import hmac
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.replication import (
    AUTH_CHALLENGE_SIZE,
    AUTH_MAC_SIZE,
    AUTH_MAGIC,
    AUTH_NONCE_SIZE,
    AUTH_VERSION,
    AckReceived,
    AuthenticationError,
    AuthenticationFailedError,
    AuthRequiredError,
    AuthVersionError,
    DataReceived,
    MalformedFrameError,
    MasterAuthenticator,
    MasterConnectionProtocol,
    MasterNotAuthenticatingError,
    ProtocolError,
    SlaveAuthenticator,
    SlaveConnectionProtocol,
    auth_mac,
    encode_ack,
    encode_challenge,
    encode_heartbeat,
    encode_transfer_header,
)

SECRET = b"correct horse battery staple"
NONCE = bytes(range(16))


def reference_mac(secret: bytes, version: int, nonce: bytes) -> bytes:
    """The answer as the design states it, computed without the module under test."""
    return hmac.new(secret, b"PMQC" + bytes([version]) + nonce + b"pocketmq-ha", hashlib.sha256).digest()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# ------------------------------------------------------------------------------------ encoding


def test_challenge_layout() -> None:
    challenge = encode_challenge(NONCE)
    assert challenge == b"PMQC\x01" + NONCE
    assert len(challenge) == AUTH_CHALLENGE_SIZE == 21
    assert AUTH_MAGIC == b"PMQC" and AUTH_VERSION == 1 and AUTH_NONCE_SIZE == 16


@pytest.mark.parametrize(("nonce", "version"), [(b"short", 1), (bytes(17), 1), (NONCE, 256), (NONCE, -1)])
def test_challenge_rejects_bad_arguments(nonce: bytes, version: int) -> None:
    with pytest.raises(ValueError):
        encode_challenge(nonce, version)


def test_answer_is_hmac_sha256_of_challenge_and_context() -> None:
    answer = auth_mac(SECRET, encode_challenge(NONCE))
    assert len(answer) == AUTH_MAC_SIZE == 32
    assert answer == reference_mac(SECRET, 1, NONCE)
    assert auth_mac(SECRET, encode_challenge(bytes(16))) != answer, "the nonce is under the MAC"
    assert auth_mac(SECRET + b"!", encode_challenge(NONCE)) != answer
    with pytest.raises(ValueError):
        auth_mac(b"", encode_challenge(NONCE))


# ------------------------------------------------------------------------------------ handshake


def test_full_handshake_then_the_request_offset_reaches_the_replication_protocol() -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    slave = SlaveAuthenticator(SECRET)
    answer = slave.receive_data(master.challenge)
    assert answer == reference_mac(SECRET, 1, NONCE)
    rest = master.receive_data(answer + encode_ack(0))
    assert master.authenticated and rest is not None
    proto = MasterConnectionProtocol()
    assert proto.receive_data(rest, 1000) == [AckReceived(0)]
    assert proto.request_offset == 0


def test_exact_answer_leaves_nothing_for_the_stream() -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    rest = master.receive_data(auth_mac(SECRET, master.challenge))
    assert rest is not None and len(rest) == 0 and master.remaining == 0


def test_wrong_secret_is_rejected_and_the_authenticator_stays_failed() -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    wrong = auth_mac(b"another secret of enough length", master.challenge)
    with pytest.raises(AuthenticationFailedError, match="haAuthSecret differs"):
        master.receive_data(wrong + encode_ack(0))
    assert not master.authenticated
    with pytest.raises(ProtocolError, match="already failed"):
        master.receive_data(auth_mac(SECRET, master.challenge))


@given(bit=st.integers(0, AUTH_MAC_SIZE * 8 - 1))
def test_any_flipped_bit_fails(bit: int) -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    answer = bytearray(auth_mac(SECRET, master.challenge))
    answer[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(AuthenticationFailedError):
        master.receive_data(bytes(answer))


def test_an_answer_to_another_nonce_is_a_failed_replay() -> None:
    recorded = auth_mac(SECRET, encode_challenge(bytes(16)))
    with pytest.raises(AuthenticationFailedError):
        MasterAuthenticator(SECRET, NONCE).receive_data(recorded)


def test_a_bare_request_offset_is_not_an_answer() -> None:
    """What a slave without a secret (or the raw client of the old protocol) sends first."""
    master = MasterAuthenticator(SECRET, NONCE)
    assert master.receive_data(encode_ack(0)) is None
    assert not master.authenticated and master.remaining == AUTH_MAC_SIZE - 8
    error = master.incomplete_error("the peer closed the connection")
    assert isinstance(error, AuthenticationError)
    assert "8 of 32 bytes" in str(error) and "closed" in str(error)


@settings(max_examples=200)
@given(cuts=st.lists(st.integers(0, 64), max_size=12), offset=st.integers(0, 2**40),
       more=st.binary(max_size=20))
def test_answer_in_any_chunks_authenticates_exactly_at_byte_32(cuts: list[int], offset: int,
                                                               more: bytes) -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    stream = auth_mac(SECRET, master.challenge) + encode_ack(offset) + more
    after = bytearray()
    fed = 0
    for chunk in split(stream, cuts):
        rest = master.receive_data(chunk)
        fed += len(chunk)
        assert master.authenticated == (fed >= AUTH_MAC_SIZE)
        if rest is None:
            assert fed < AUTH_MAC_SIZE
        else:
            after += rest
    assert master.authenticated
    assert bytes(after) == encode_ack(offset) + more


@settings(max_examples=200)
@given(cuts=st.lists(st.integers(0, 40), max_size=10), length=st.integers(0, AUTH_MAC_SIZE - 1))
def test_truncated_answer_in_any_chunks_never_authenticates(cuts: list[int], length: int) -> None:
    master = MasterAuthenticator(SECRET, NONCE)
    truncated = auth_mac(SECRET, master.challenge)[:length]
    for chunk in split(truncated, cuts):
        assert master.receive_data(chunk) is None
    assert not master.authenticated
    assert master.remaining == AUTH_MAC_SIZE - length
    assert f"{length} of 32 bytes" in str(master.incomplete_error("timed out"))


@settings(max_examples=200)
@given(cuts=st.lists(st.integers(0, 30), max_size=10), nonce=st.binary(min_size=16, max_size=16))
def test_slave_reads_the_challenge_in_any_chunks(cuts: list[int], nonce: bytes) -> None:
    slave = SlaveAuthenticator(SECRET)
    chunks = split(encode_challenge(nonce), cuts)
    answers = [slave.receive_data(chunk) for chunk in chunks]
    assert answers[:-1] == [None] * (len(chunks) - 1)
    assert answers[-1] == slave.answer == reference_mac(SECRET, 1, nonce)
    with pytest.raises(ProtocolError):
        slave.receive_data(b"x")


def test_slave_rejects_bytes_beyond_the_challenge() -> None:
    with pytest.raises(MalformedFrameError, match="after its authentication challenge"):
        SlaveAuthenticator(SECRET).receive_data(encode_challenge(NONCE) + b"\x00")


# ------------------------------------------------------------------------------------ versions


def test_slave_refuses_a_challenge_version_it_does_not_speak() -> None:
    slave = SlaveAuthenticator(SECRET)
    with pytest.raises(AuthVersionError, match="version 2") as info:
        slave.receive_data(encode_challenge(NONCE, version=2))
    assert info.value.version == 2
    # recognised from the 5th byte on, before the nonce arrived
    with pytest.raises(AuthVersionError):
        SlaveAuthenticator(SECRET).receive_data(b"PMQC\x00")


def test_the_version_is_under_the_mac() -> None:
    master = MasterAuthenticator(SECRET, NONCE, version=2)
    slave = SlaveAuthenticator(SECRET, versions=(1, 2))
    answer = slave.receive_data(master.challenge)
    assert answer == reference_mac(SECRET, 2, NONCE)
    assert master.receive_data(answer) is not None and master.authenticated
    # an answer computed for version 1 does not pass a version-2 challenge
    with pytest.raises(AuthenticationFailedError):
        MasterAuthenticator(SECRET, NONCE, version=2).receive_data(reference_mac(SECRET, 1, NONCE))


# ------------------------------------------------------------------------------------ mismatched peers


@pytest.mark.parametrize("first", [
    encode_heartbeat(0),            # a master without a secret (what it would send)
    encode_transfer_header(4096, 3) + b"abc",
    b"\x00",                        # one byte is enough to tell
    b"PMQ!",
    b"GET / HTTP/1.1\r\n",
])
def test_slave_with_a_secret_recognises_a_master_that_does_not_authenticate(first: bytes) -> None:
    with pytest.raises(MasterNotAuthenticatingError,
                       match="master does not authenticate; check haAuthSecret on both sides"):
        SlaveAuthenticator(SECRET).receive_data(first[:AUTH_CHALLENGE_SIZE])


@pytest.mark.parametrize("initial_offset", [0, 4096])
@settings(max_examples=50)
@given(cuts=st.lists(st.integers(0, 30), max_size=6))
def test_slave_without_a_secret_recognises_the_challenge_instead_of_decoding_it(
        initial_offset: int, cuts: list[int]) -> None:
    proto = SlaveConnectionProtocol(initial_offset)
    events: list[object] = []
    with pytest.raises(AuthRequiredError, match="the master requires haAuthSecret") as info:
        for chunk in split(encode_challenge(NONCE), cuts):
            events += proto.receive_data(chunk)
    assert not [e for e in [*events, *info.value.events] if isinstance(e, DataReceived)]
    assert proto.next_offset == initial_offset, "nothing was taken for data"
    assert isinstance(info.value, ProtocolError)


def test_real_headers_never_look_like_the_magic() -> None:
    proto = SlaveConnectionProtocol(0)
    big = (0x504D5143 << 32) - 1  # the largest offset below the magic's range
    events = proto.receive_data(encode_transfer_header(big - 2, 2) + b"ok")
    assert [(type(e), e.offset) for e in events] == [(DataReceived, big - 2)]

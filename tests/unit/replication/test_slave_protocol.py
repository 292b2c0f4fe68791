from __future__ import annotations

import contextlib
import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.replication import (
    DEFAULT_MAX_BODY_SIZE,
    HARD_MAX_BODY_SIZE,
    MAX_OFFSET,
    TRANSFER_HEADER_SIZE,
    ContinuityError,
    DataReceived,
    FrameTooLargeError,
    HeartbeatReceived,
    MalformedFrameError,
    ProtocolError,
    SlaveConnectionProtocol,
    SlaveEvent,
    encode_heartbeat,
    encode_transfer_header,
)


def frame(offset: int, body: bytes) -> bytes:
    return encode_transfer_header(offset, len(body)) + body


def normalized(events: list[SlaveEvent]) -> list[tuple[str, int, bytes]]:
    out = []
    for event in events:
        if isinstance(event, DataReceived):
            out.append(("data", event.offset, bytes(event.body)))
        else:
            out.append(("heartbeat", event.offset, b""))
    return out


def build_stream(start: int, items: list[bytes | None]) -> tuple[bytes, list[tuple[str, int, bytes]], int]:
    """Frames (``None`` = a heartbeat) from ``start``: (the stream, its normalized events, end offset)."""
    stream = b""
    expected: list[tuple[str, int, bytes]] = []
    offset = start
    for body in items:
        if body is None:
            stream += encode_heartbeat(offset)
            expected.append(("heartbeat", offset, b""))
        else:
            stream += frame(offset, body)
            expected.append(("data", offset, body))
            offset += len(body)
    return stream, expected, offset


class TestDecoding:
    def test_one_frame(self) -> None:
        proto = SlaveConnectionProtocol(100)
        (event,) = proto.receive_data(frame(100, b"hello"))
        assert event == DataReceived(100, b"hello")
        assert isinstance(event, DataReceived)
        assert event.end_offset == proto.next_offset == 105

    def test_whole_frames_are_zero_copy_views(self) -> None:
        chunk = frame(0, b"abc") + frame(3, b"defg")
        events = SlaveConnectionProtocol(0).receive_data(chunk)
        bodies = [e.body for e in events if isinstance(e, DataReceived)]
        assert all(isinstance(b, memoryview) and b.readonly for b in bodies)
        assert [bytes(b) for b in bodies] == [b"abc", b"defg"]

    def test_many_frames_and_heartbeats_in_one_chunk(self) -> None:
        proto = SlaveConnectionProtocol(10)
        chunk = encode_heartbeat(10) + frame(10, b"ab") + encode_heartbeat(12) + frame(12, b"c")
        assert normalized(proto.receive_data(chunk)) == [
            ("heartbeat", 10, b""),
            ("data", 10, b"ab"),
            ("heartbeat", 12, b""),
            ("data", 12, b"c"),
        ]
        assert proto.next_offset == 13
        assert proto.buffered == 0

    def test_header_split_everywhere(self) -> None:
        data = frame(7, b"xyz")
        for cut in range(1, len(data)):
            proto = SlaveConnectionProtocol(7)
            first = proto.receive_data(data[:cut])
            if cut <= TRANSFER_HEADER_SIZE:
                assert first == []
                assert proto.buffered == cut % TRANSFER_HEADER_SIZE
            assert merged(normalized(first + proto.receive_data(data[cut:]))) == [("data", 7, b"xyz")]
            assert proto.buffered == 0

    def test_one_byte_at_a_time(self) -> None:
        stream = frame(0, b"abc") + encode_heartbeat(3) + frame(3, b"d" * 40)
        proto = SlaveConnectionProtocol(0)
        events: list[SlaveEvent] = []
        for byte in stream:
            events += proto.receive_data(bytes([byte]))
        expected = [("data", 0, b"abc"), ("heartbeat", 3, b""), ("data", 3, b"d" * 40)]
        assert merged(normalized(events)) == expected

    @settings(max_examples=200)
    @given(
        start=st.integers(0, 2**40),
        items=st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=64)), max_size=12),
        cuts=st.lists(st.integers(0, 2000), max_size=20),
        as_bytearray=st.booleans(),
    )
    def test_random_splits_give_the_same_events(
        self, start: int, items: list[bytes | None], cuts: list[int], as_bytearray: bool
    ) -> None:
        stream, expected, offset = build_stream(start, items)
        proto = SlaveConnectionProtocol(start, max_body_size=64)
        events: list[SlaveEvent] = []
        bounds = sorted({0, len(stream), *(min(c, len(stream)) for c in cuts)})
        for lo, hi in itertools.pairwise(bounds):
            chunk = stream[lo:hi]
            events += proto.receive_data(bytearray(chunk) if as_bytearray else chunk)
        assert merged(normalized(events)) == merged(expected)
        assert proto.next_offset == offset
        assert proto.buffered == 0

    def test_large_stream_in_small_chunks_is_linear(self) -> None:
        # 64 MiB in 1000-byte chunks with 32 KiB frames: would take minutes if each
        # chunk re-copied the buffered partial frame.
        body = bytes(range(256)) * 128  # 32 KiB
        frames = b"".join(frame(i * len(body), body) for i in range(2048))
        proto = SlaveConnectionProtocol(0)
        total = 0
        view = memoryview(frames)
        for pos in range(0, len(frames), 1000):
            for event in proto.receive_data(bytes(view[pos : pos + 1000])):
                assert isinstance(event, DataReceived)
                total += len(event.body)
        assert total == proto.next_offset == 2048 * len(body)


class TestStreamBodies:
    def test_body_bytes_come_out_as_they_arrive(self) -> None:
        data = frame(100, b"abcdef") + frame(106, b"gh")
        proto = SlaveConnectionProtocol(100)
        assert normalized(proto.receive_data(data[:14])) == [("data", 100, b"ab")]
        assert proto.next_offset == 102 and proto.frame_remaining == 4 and proto.buffered == 0
        assert normalized(proto.receive_data(data[14:20])) == [("data", 102, b"cdef")]
        assert normalized(proto.receive_data(data[20:])) == [("data", 106, b"gh")]
        assert proto.next_offset == 108 and proto.frame_remaining == 0

    def test_bodies_are_views_of_the_buffer_passed_in(self) -> None:
        buf = bytearray(frame(0, b"abc") + frame(3, b"defg"))
        events = SlaveConnectionProtocol(0).receive_data(memoryview(buf))
        bodies = [e.body for e in events if isinstance(e, DataReceived)]
        assert all(isinstance(b, memoryview) and b.readonly for b in bodies)
        buf[12:15] = b"xyz"  # nothing was copied: the caller owns the buffer until it reuses it
        assert [bytes(b) for b in bodies] == [b"xyz", b"defg"]

    def test_continuity_is_checked_at_each_header(self) -> None:
        proto = SlaveConnectionProtocol(0)
        with pytest.raises(ContinuityError) as info:
            proto.receive_data(frame(0, b"abc") + encode_heartbeat(3) + frame(4, b"d"))
        assert (info.value.expected, info.value.received) == (3, 4)
        assert normalized(list(info.value.events)) == [("data", 0, b"abc"), ("heartbeat", 3, b"")]
        with pytest.raises(ProtocolError):
            proto.receive_data(frame(3, b"d"))  # dead after an error

    def test_oversized_header_is_rejected_before_any_body(self) -> None:
        proto = SlaveConnectionProtocol(0, max_body_size=64)
        with pytest.raises(FrameTooLargeError):
            proto.receive_data(encode_transfer_header(0, 65) + b"x" * 65)

    @settings(max_examples=200)
    @given(
        start=st.integers(0, 2**40),
        items=st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=64)), max_size=12),
        cuts=st.lists(st.integers(0, 2000), max_size=20),
    )
    def test_random_splits_give_the_same_bytes_at_the_same_offsets(
        self, start: int, items: list[bytes | None], cuts: list[int]
    ) -> None:
        stream, expected, offset = build_stream(start, items)
        proto = SlaveConnectionProtocol(start, max_body_size=64)
        buf = bytearray(len(stream))  # one reused receive buffer, as the slave uses it
        events: list[tuple[str, int, bytes]] = []
        bounds = sorted({0, len(stream), *(min(c, len(stream)) for c in cuts)})
        for lo, hi in itertools.pairwise(bounds):
            buf[: hi - lo] = stream[lo:hi]
            got = proto.receive_data(memoryview(buf)[: hi - lo])
            assert all(len(e.body) > 0 for e in got if isinstance(e, DataReceived))
            events += normalized(got)  # consumed before the buffer is reused
            buf[: hi - lo] = bytes(hi - lo)
        assert merged(events) == merged(expected)
        assert proto.next_offset == offset
        assert proto.buffered == 0 and proto.frame_remaining == 0


class TestManyFramesPerRead:
    """The slave reads what the socket holds (up to a 2 MiB buffer) and decodes every whole
    frame of it in one call: each read gives the bytes it carries as contiguous data events
    (one append per read), whatever the read boundaries."""

    STREAM_ITEMS: tuple[bytes | None, ...] = (b"a", None, b"bcdefgh", b"ij", None, None, b"klmnopqrstu", b"v")

    @staticmethod
    def read_all(proto: SlaveConnectionProtocol, stream: bytes,
                 bounds: list[int]) -> list[tuple[str, int, bytes]]:
        buf = bytearray(len(stream))  # one reused receive buffer, as the slave's
        events: list[tuple[str, int, bytes]] = []
        for lo, hi in itertools.pairwise(bounds):
            buf[: hi - lo] = stream[lo:hi]
            got = proto.receive_data(memoryview(buf)[: hi - lo])
            data = [e for e in got if isinstance(e, DataReceived)]
            # One read = one run of the log: the pieces continue each other, as the slave
            # appends them with a single append_data(first offset, bodies).
            for before, after in itertools.pairwise(data):
                assert after.offset == before.end_offset
            if data:
                assert data[-1].end_offset == proto.next_offset
            events += normalized(got)  # consumed before the buffer is reused
            buf[: hi - lo] = bytes(hi - lo)
        return events

    def test_two_reads_split_at_every_byte(self) -> None:
        stream, expected, end = build_stream(40, list(self.STREAM_ITEMS))
        for cut in range(len(stream) + 1):
            proto = SlaveConnectionProtocol(40)
            events = self.read_all(proto, stream, sorted({0, cut, len(stream)}))
            assert merged(events) == merged(expected), cut
            assert proto.next_offset == end and proto.buffered == 0 and proto.frame_remaining == 0

    def test_three_reads_split_at_every_pair_of_bytes(self) -> None:
        stream, expected, end = build_stream(0, list(self.STREAM_ITEMS))
        for first, second in itertools.combinations_with_replacement(range(len(stream) + 1), 2):
            proto = SlaveConnectionProtocol(0)
            events = self.read_all(proto, stream, sorted({0, first, second, len(stream)}))
            assert merged(events) == merged(expected), (first, second)
            assert proto.next_offset == end and proto.buffered == 0

    @settings(max_examples=100)
    @given(
        sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40),
        reads=st.lists(st.integers(1, 4000), min_size=1, max_size=8),
    )
    def test_catch_up_sized_frames_in_reads_of_any_size(self, sizes: list[int], reads: list[int]) -> None:
        # Many frames per read (size 0 = a heartbeat), reads of varying sizes cycling until
        # the stream is consumed: the log bytes come out once each, in order.
        items = [None if n == 0 else bytes((i + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
        stream, expected, end = build_stream(1 << 33, items)
        bounds = [0]
        for size in itertools.cycle(reads):
            if bounds[-1] >= len(stream):
                break
            bounds.append(min(len(stream), bounds[-1] + size))
        proto = SlaveConnectionProtocol(1 << 33, max_body_size=300)
        assert merged(self.read_all(proto, stream, bounds)) == merged(expected)
        assert proto.next_offset == end and proto.buffered == 0 and proto.frame_remaining == 0


def merged(items: list[tuple[str, int, bytes]]) -> list[tuple[str, int, bytes]]:
    """Data events with the contiguous pieces joined (streamed frames split anywhere)."""
    out: list[tuple[str, int, bytes]] = []
    for kind, offset, body in items:
        last = out[-1] if out else None
        if kind == "data" and last is not None and last[0] == "data" and last[1] + len(last[2]) == offset:
            out[-1] = ("data", last[1], last[2] + body)
        else:
            out.append((kind, offset, body))
    return out


class TestValidation:
    def test_negative_offset(self) -> None:
        with pytest.raises(MalformedFrameError, match="negative offset"):
            SlaveConnectionProtocol(0).receive_data(struct.pack(">qi", -5, 1) + b"x")

    def test_negative_size(self) -> None:
        with pytest.raises(MalformedFrameError, match="negative body size"):
            SlaveConnectionProtocol(0).receive_data(struct.pack(">qi", 0, -1))

    def test_oversized_body_is_rejected_at_the_header(self) -> None:
        proto = SlaveConnectionProtocol(0, max_body_size=1024)
        # Only the header arrives: the error must not wait for a 2 GiB body.
        with pytest.raises(FrameTooLargeError) as info:
            proto.receive_data(struct.pack(">qi", 0, 1025))
        assert (info.value.size, info.value.limit) == (1025, 1024)

    def test_body_at_the_limit_is_fine(self) -> None:
        proto = SlaveConnectionProtocol(0, max_body_size=1024)
        (event,) = proto.receive_data(frame(0, b"x" * 1024))
        assert event == DataReceived(0, b"x" * 1024)

    def test_default_limit_tolerates_a_bigger_master_batch(self) -> None:
        assert DEFAULT_MAX_BODY_SIZE >= 1024 * 1024
        proto = SlaveConnectionProtocol(0)
        (event,) = proto.receive_data(frame(0, b"y" * (1024 * 1024)))
        assert isinstance(event, DataReceived)
        with pytest.raises(FrameTooLargeError):
            SlaveConnectionProtocol(0).receive_data(struct.pack(">qi", 0, DEFAULT_MAX_BODY_SIZE + 1))

    def test_offset_overflow(self) -> None:
        with pytest.raises(MalformedFrameError, match="overflows"):
            SlaveConnectionProtocol(0).receive_data(struct.pack(">qi", MAX_OFFSET, 1))

    def test_garbage_after_valid_frames_keeps_earlier_events_on_the_error(self) -> None:
        proto = SlaveConnectionProtocol(0)
        with pytest.raises(ProtocolError) as info:
            proto.receive_data(frame(0, b"ok") + b"\xff" * 12)
        assert normalized(list(info.value.events)) == [("data", 0, b"ok")]  # type: ignore[arg-type]
        with pytest.raises(ProtocolError, match="already failed"):
            proto.receive_data(frame(2, b"more"))
        assert proto.failed is info.value

    @pytest.mark.parametrize("max_body_size", [0, HARD_MAX_BODY_SIZE + 1])
    def test_invalid_configuration(self, max_body_size: int) -> None:
        with pytest.raises(ValueError):
            SlaveConnectionProtocol(0, max_body_size=max_body_size)

    def test_invalid_initial_offset(self) -> None:
        with pytest.raises(ValueError):
            SlaveConnectionProtocol(-1)

    @given(st.binary(min_size=12, max_size=200))
    def test_garbage_never_crashes_otherwise(self, garbage: bytes) -> None:
        proto = SlaveConnectionProtocol(123, max_body_size=64)
        with contextlib.suppress(ProtocolError):
            proto.receive_data(garbage)


class TestContinuity:
    def test_data_frame_must_continue_the_log(self) -> None:
        proto = SlaveConnectionProtocol(100)
        with pytest.raises(ContinuityError) as info:
            proto.receive_data(frame(90, b"old"))
        assert (info.value.expected, info.value.received, info.value.heartbeat) == (100, 90, False)

    def test_gap_after_earlier_frames(self) -> None:
        proto = SlaveConnectionProtocol(0)
        with pytest.raises(ContinuityError) as info:
            proto.receive_data(frame(0, b"abc") + frame(4, b"d"))
        assert (info.value.expected, info.value.received) == (3, 4)
        assert len(info.value.events) == 1

    def test_continuity_is_checked_before_the_body_arrives(self) -> None:
        proto = SlaveConnectionProtocol(100)
        with pytest.raises(ContinuityError):
            proto.receive_data(encode_transfer_header(200, 1000))

    def test_empty_slave_accepts_any_first_offset(self) -> None:
        proto = SlaveConnectionProtocol(0)
        assert not proto.has_data
        events = proto.receive_data(encode_heartbeat(5000) + frame(5000, b"seg"))
        assert normalized(events) == [("heartbeat", 5000, b""), ("data", 5000, b"seg")]
        assert proto.has_data
        assert proto.next_offset == 5003
        with pytest.raises(ContinuityError):
            proto.receive_data(frame(5000, b"again"))

    def test_empty_slave_heartbeats_are_not_checked_and_do_not_set_the_start(self) -> None:
        proto = SlaveConnectionProtocol(0)
        assert proto.receive_data(encode_heartbeat(300) + encode_heartbeat(300)) == [
            HeartbeatReceived(300),
            HeartbeatReceived(300),
        ]
        assert proto.next_offset == 0
        assert not proto.has_data

    def test_heartbeats_are_checked_once_the_slave_has_data(self) -> None:
        proto = SlaveConnectionProtocol(100)
        assert proto.receive_data(encode_heartbeat(100)) == [HeartbeatReceived(100)]
        with pytest.raises(ContinuityError) as info:
            proto.receive_data(encode_heartbeat(99))
        assert info.value.heartbeat

    def test_heartbeat_check_can_be_disabled(self) -> None:
        proto = SlaveConnectionProtocol(100, check_heartbeats=False)
        assert proto.receive_data(encode_heartbeat(99) + encode_heartbeat(500)) == [
            HeartbeatReceived(99),
            HeartbeatReceived(500),
        ]
        with pytest.raises(ContinuityError):
            proto.receive_data(frame(101, b"x"))

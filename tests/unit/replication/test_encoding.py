from __future__ import annotations

import struct

import pytest

from services.broker.replication import (
    MAX_OFFSET,
    AckBeyondMaxOffsetError,
    AckReceived,
    DataReceived,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
    TransferPlan,
    encode_ack,
    encode_heartbeat,
    encode_transfer_header,
    first_transfer_offset,
)

GiB = 1024**3


def test_ack_is_8_byte_big_endian() -> None:
    assert encode_ack(0) == b"\x00" * 8
    assert encode_ack(0x0102030405060708) == bytes(range(1, 9))
    assert encode_ack(MAX_OFFSET) == struct.pack(">q", MAX_OFFSET)


def test_transfer_header_is_offset_then_size() -> None:
    assert encode_transfer_header(0x0102030405060708, 0x0A0B0C0D) == bytes(range(1, 9)) + bytes(
        [0x0A, 0x0B, 0x0C, 0x0D]
    )
    assert encode_heartbeat(77) == struct.pack(">qi", 77, 0)


@pytest.mark.parametrize("offset", [-1, MAX_OFFSET + 1])
def test_encode_rejects_out_of_range_offsets(offset: int) -> None:
    with pytest.raises(ValueError):
        encode_ack(offset)
    with pytest.raises(ValueError):
        encode_transfer_header(offset, 1)


@pytest.mark.parametrize("size", [-1, 2**31])
def test_encode_rejects_out_of_range_sizes(size: int) -> None:
    with pytest.raises(ValueError):
        encode_transfer_header(0, size)


def test_encode_rejects_offset_overflow() -> None:
    with pytest.raises(ValueError):
        encode_transfer_header(MAX_OFFSET, 1)
    assert encode_transfer_header(MAX_OFFSET - 1, 1)


def test_events_are_immutable_values() -> None:
    event = DataReceived(10, b"abc")
    assert event.end_offset == 13
    assert event == DataReceived(10, memoryview(b"abc"))
    with pytest.raises(AttributeError):
        event.offset = 3  # type: ignore[misc]
    assert AckReceived(5) == AckReceived(5)
    assert TransferPlan(4, 6).end_offset == 10


def test_error_hierarchy() -> None:
    assert issubclass(RequestBeyondMaxOffsetError, AckBeyondMaxOffsetError)
    assert issubclass(AckBeyondMaxOffsetError, ProtocolError)
    err = AckBeyondMaxOffsetError(10, 5)
    assert "10" in str(err) and "5" in str(err)
    assert err.events == ()


class TestFirstTransferOffset:
    def test_resumes_at_request_offset(self) -> None:
        assert first_transfer_offset(1234, 5 * GiB, segment_size=GiB) == 1234

    def test_resume_at_exactly_the_max_offset(self) -> None:
        assert first_transfer_offset(5000, 5000, segment_size=GiB) == 5000

    def test_empty_slave_starts_at_last_segment(self) -> None:
        assert first_transfer_offset(0, 3 * GiB + 17, segment_size=GiB) == 3 * GiB
        assert first_transfer_offset(0, 17, segment_size=GiB) == 0

    def test_last_segment_start_when_max_is_on_a_boundary(self) -> None:
        # Nothing in the new segment yet: the stream starts at its (empty) start.
        assert first_transfer_offset(0, 2 * GiB, segment_size=GiB) == 2 * GiB

    def test_empty_slave_from_earliest(self) -> None:
        assert first_transfer_offset(0, 3 * GiB + 17, segment_size=GiB, sync_from_earliest=True) == 0
        assert (
            first_transfer_offset(0, 3 * GiB + 17, segment_size=GiB, min_offset=GiB, sync_from_earliest=True)
            == GiB
        )

    def test_never_below_earliest_retained(self) -> None:
        assert first_transfer_offset(0, 250, segment_size=100, min_offset=220) == 220

    def test_request_beyond_master_is_divergence(self) -> None:
        with pytest.raises(RequestBeyondMaxOffsetError) as info:
            first_transfer_offset(101, 100, segment_size=GiB)
        assert info.value.ack_offset == 101
        assert info.value.master_max_offset == 100

    def test_request_below_retained_data(self) -> None:
        with pytest.raises(RequestOffsetUnavailableError) as info:
            first_transfer_offset(50, 1000, segment_size=100, min_offset=100)
        assert (info.value.request_offset, info.value.min_offset) == (50, 100)

    @pytest.mark.parametrize(
        ("request_offset", "max_offset", "segment_size", "min_offset"),
        [(-1, 10, 10, 0), (0, 10, 0, 0), (0, 10, 10, 11), (0, 10, 10, -1)],
    )
    def test_invalid_arguments(
        self, request_offset: int, max_offset: int, segment_size: int, min_offset: int
    ) -> None:
        with pytest.raises(ValueError):
            first_transfer_offset(
                request_offset, max_offset, segment_size=segment_size, min_offset=min_offset
            )

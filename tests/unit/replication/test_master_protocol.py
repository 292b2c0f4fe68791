from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.broker.replication import (
    AckBeyondMaxOffsetError,
    AckBeyondSentOffsetError,
    AckReceived,
    AckRegressionError,
    MalformedFrameError,
    MasterConnectionProtocol,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
    TransferPlan,
    encode_ack,
    encode_heartbeat,
)

BIG = 10**12


def started(request_offset: int = 0, max_offset: int = BIG, **kwargs: int | bool) -> MasterConnectionProtocol:
    proto = MasterConnectionProtocol(**kwargs)  # type: ignore[arg-type]
    assert proto.receive_data(encode_ack(request_offset), max_offset) == [AckReceived(request_offset)]
    return proto


class TestAckDecoding:
    def test_nothing_before_the_first_ack(self) -> None:
        proto = MasterConnectionProtocol()
        assert proto.request_offset is None
        assert proto.ack_offset is None
        assert proto.next_transfer(100) is None
        assert proto.heartbeat_frame() is None

    def test_first_ack_is_the_request_offset(self) -> None:
        proto = MasterConnectionProtocol()
        assert proto.receive_data(encode_ack(42), 100) == [AckReceived(42)]
        assert proto.request_offset == 42
        assert proto.ack_offset == 42

    def test_many_acks_in_one_chunk_and_split_acks(self) -> None:
        proto = MasterConnectionProtocol(batch_size=100)
        stream = encode_ack(0) + encode_ack(0)
        assert proto.receive_data(stream + encode_ack(0)[:3], BIG) == [AckReceived(0)] * 2
        assert proto.receive_data(encode_ack(0)[3:7], BIG) == []
        assert proto.receive_data(encode_ack(0)[7:], BIG) == [AckReceived(0)]

    def test_one_byte_at_a_time(self) -> None:
        proto = MasterConnectionProtocol()
        events: list[AckReceived] = []
        for byte in encode_ack(0x0102030405):
            events += proto.receive_data(bytes([byte]), BIG)
        assert events == [AckReceived(0x0102030405)]

    def test_accepts_bytearray_and_memoryview(self) -> None:
        proto = MasterConnectionProtocol()
        assert proto.receive_data(bytearray(encode_ack(3)), 10) == [AckReceived(3)]
        assert proto.receive_data(memoryview(encode_ack(3)), 10) == [AckReceived(3)]
        assert proto.receive_data(b"", 10) == []

    @given(
        request=st.integers(0, 1000),
        steps=st.lists(st.integers(0, 50), max_size=20),
        cuts=st.lists(st.integers(0, 400), max_size=10),
    )
    def test_random_splits_give_the_same_acks(self, request: int, steps: list[int], cuts: list[int]) -> None:
        offsets = [request]
        for step in steps:
            offsets.append(offsets[-1] + step)
        stream = b"".join(encode_ack(o) for o in offsets)
        proto = MasterConnectionProtocol(batch_size=2000)
        assert proto.receive_data(stream[:8], BIG) == [AckReceived(request)]
        plan = proto.next_transfer(BIG)
        assert plan is not None
        proto.advance(plan.size)
        events: list[AckReceived] = []
        bounds = sorted({8, len(stream), *(min(c + 8, len(stream)) for c in cuts)})
        for lo, hi in itertools.pairwise(bounds):
            events += proto.receive_data(stream[lo:hi], BIG)
        assert [AckReceived(o) for o in offsets[1:]] == events
        assert proto.ack_offset == offsets[-1]


class TestAckValidation:
    def test_negative_offset(self) -> None:
        proto = MasterConnectionProtocol()
        with pytest.raises(MalformedFrameError, match="negative"):
            proto.receive_data(b"\xff" * 8, BIG)

    def test_request_beyond_max_offset(self) -> None:
        proto = MasterConnectionProtocol()
        with pytest.raises(RequestBeyondMaxOffsetError) as info:
            proto.receive_data(encode_ack(101), 100)
        assert isinstance(info.value, AckBeyondMaxOffsetError)
        assert proto.request_offset is None

    def test_ack_beyond_max_offset(self) -> None:
        proto = started(0, 1000, batch_size=1000)
        assert proto.next_transfer(1000) == TransferPlan(0, 1000)
        proto.advance(1000)
        with pytest.raises(AckBeyondMaxOffsetError) as info:
            proto.receive_data(encode_ack(500) + encode_ack(1001), 1000)
        err = info.value
        assert not isinstance(err, RequestBeyondMaxOffsetError)
        assert (err.ack_offset, err.master_max_offset) == (1001, 1000)
        assert err.events == (AckReceived(500),)
        assert proto.ack_offset == 500  # the bogus ack never counted

    def test_ack_beyond_sent(self) -> None:
        proto = started(100, 1000, batch_size=50)
        with pytest.raises(AckBeyondSentOffsetError):
            proto.receive_data(encode_ack(101), 1000)

    def test_ack_beyond_sent_after_transfers(self) -> None:
        proto = started(100, 1000, batch_size=50)
        proto.next_transfer(1000)
        proto.advance(50)
        assert proto.receive_data(encode_ack(150), 1000) == [AckReceived(150)]
        with pytest.raises(AckBeyondSentOffsetError) as info:
            proto.receive_data(encode_ack(151), 1000)
        assert (info.value.ack_offset, info.value.sent_offset) == (151, 150)

    def test_repeated_acks_are_fine(self) -> None:
        proto = started(100, 1000)
        assert proto.receive_data(encode_ack(100) * 3, 1000) == [AckReceived(100)] * 3

    def test_ack_regression(self) -> None:
        proto = started(100, 1000)
        proto.next_transfer(1000)
        proto.advance(10)
        proto.receive_data(encode_ack(110), 1000)
        with pytest.raises(AckRegressionError) as info:
            proto.receive_data(encode_ack(105), 1000)
        assert (info.value.ack_offset, info.value.previous_offset) == (105, 110)

    def test_failed_protocol_stays_failed(self) -> None:
        proto = MasterConnectionProtocol()
        with pytest.raises(MalformedFrameError) as info:
            proto.receive_data(b"\x80" + b"\x00" * 7, BIG)
        assert proto.failed is info.value
        with pytest.raises(ProtocolError, match="already failed"):
            proto.receive_data(encode_ack(0), BIG)
        with pytest.raises(ProtocolError, match="already failed"):
            proto.next_transfer(BIG)

    def test_negative_master_max_is_a_caller_bug(self) -> None:
        with pytest.raises(ValueError):
            MasterConnectionProtocol().receive_data(encode_ack(0), -1)

    @pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 2**40}, {"segment_size": 0}])
    def test_invalid_configuration(self, kwargs: dict[str, int]) -> None:
        with pytest.raises(ValueError):
            MasterConnectionProtocol(**kwargs)  # type: ignore[arg-type]


class TestTransferPlanning:
    def test_resume_at_request_offset_in_batches(self) -> None:
        proto = started(100, 1000, batch_size=300)
        assert proto.next_transfer(1000) == TransferPlan(100, 300)
        assert proto.next_transfer(1000) == TransferPlan(100, 300), "planning is idempotent"
        proto.advance(300)
        assert proto.next_transfer_offset == 400
        assert proto.next_transfer(1000) == TransferPlan(400, 300)
        proto.advance(300)
        assert proto.next_transfer(1000) == TransferPlan(700, 300)
        proto.advance(300)
        assert proto.next_transfer(1000) is None
        assert proto.next_transfer(1010) == TransferPlan(1000, 10)

    def test_empty_slave_starts_at_last_segment(self) -> None:
        proto = started(0, 2550, batch_size=1000, segment_size=1000)
        assert proto.next_transfer(2550) == TransferPlan(2000, 550)

    def test_empty_slave_from_earliest_retained(self) -> None:
        proto = started(0, 2550, batch_size=1000, segment_size=1000, sync_from_earliest=True)
        assert proto.next_transfer(2550, min_offset=1000) == TransferPlan(1000, 1000)

    def test_min_offset_only_matters_for_the_first_plan(self) -> None:
        proto = started(0, 2550, batch_size=100, segment_size=1000, sync_from_earliest=True)
        assert proto.next_transfer(2550, min_offset=0) == TransferPlan(0, 100)
        proto.advance(100)
        assert proto.next_transfer(2550, min_offset=2000) == TransferPlan(100, 100)

    def test_request_below_retained_fails_the_connection(self) -> None:
        proto = started(50, 2550)
        with pytest.raises(RequestOffsetUnavailableError):
            proto.next_transfer(2550, min_offset=1000)
        assert isinstance(proto.failed, RequestOffsetUnavailableError)

    def test_plans_never_cross_a_segment_boundary(self) -> None:
        proto = started(900, 5000, batch_size=300, segment_size=1000)
        plans = []
        while (plan := proto.next_transfer(5000)) is not None and plan.offset < 2000:
            plans.append(plan)
            proto.advance(plan.size)
        assert plans == [
            TransferPlan(900, 100),
            TransferPlan(1000, 300),
            TransferPlan(1300, 300),
            TransferPlan(1600, 300),
            TransferPlan(1900, 100),
        ]

    def test_advance_may_send_less_than_planned(self) -> None:
        proto = started(0, 100, batch_size=64)
        assert proto.next_transfer(100) == TransferPlan(0, 64)
        proto.advance(10)
        assert proto.next_transfer(100) == TransferPlan(10, 64)

    def test_advance_validation(self) -> None:
        proto = MasterConnectionProtocol()
        with pytest.raises(RuntimeError):
            proto.advance(1)
        proto = started(0, 100, batch_size=64)
        proto.next_transfer(100)
        for bad in (0, -1, 65):
            with pytest.raises(ValueError):
                proto.advance(bad)
        proto.advance(64)
        with pytest.raises(ValueError):
            proto.advance(1)  # beyond the last plan

    def test_master_max_below_transfer_offset_is_a_caller_bug(self) -> None:
        proto = started(100, 1000)
        assert proto.next_transfer(1000) == TransferPlan(100, 900)
        with pytest.raises(ValueError):
            proto.next_transfer(99)

    def test_heartbeat_carries_next_transfer_offset(self) -> None:
        proto = started(100, 1000, batch_size=50)
        assert proto.heartbeat_frame() is None
        proto.next_transfer(1000)
        assert proto.heartbeat_frame() == encode_heartbeat(100)
        proto.advance(50)
        assert proto.heartbeat_frame() == encode_heartbeat(150)

    def test_heartbeat_when_nothing_to_send(self) -> None:
        proto = started(0, 0)
        assert proto.next_transfer(0) is None
        assert proto.heartbeat_frame() == encode_heartbeat(0)

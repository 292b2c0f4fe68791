from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.broker.replication import AckBeyondMaxOffsetError
from services.broker.replication.waiter import DEFAULT_SLAVE_FALLBEHIND_MAX, SlaveAckTracker


def test_per_slave_acks_and_push2slave_max() -> None:
    tracker = SlaveAckTracker()
    assert tracker.push2slave_max_offset == 0
    assert tracker.best_ack_offset is None
    assert tracker.update("a", 100, 1000) is True
    assert tracker.update("b", 40, 1000) is False
    assert tracker.update("b", 300, 1000) is True
    assert tracker.update("a", 200, 1000) is False
    assert (tracker.ack_offset("a"), tracker.ack_offset("b"), tracker.ack_offset("c")) == (200, 300, None)
    assert tracker.push2slave_max_offset == tracker.best_ack_offset == 300
    assert tracker.lags(1000) == {"a": 800, "b": 700}
    assert tracker.lag("a", 1000) == 800
    assert len(tracker) == 2 and "a" in tracker and tracker.slave_ids == ("a", "b")


def test_invalid_acks_change_nothing() -> None:
    tracker = SlaveAckTracker()
    tracker.update("a", 100, 1000)
    with pytest.raises(AckBeyondMaxOffsetError):
        tracker.update("a", 1001, 1000)
    with pytest.raises(ValueError):
        tracker.update("a", -1, 1000)
    with pytest.raises(AckBeyondMaxOffsetError):
        tracker.update("new", 5000, 1000)
    assert tracker.push2slave_max_offset == 100
    assert tracker.ack_offset("a") == 100
    assert "new" not in tracker


def test_push2slave_max_survives_disconnects_and_lower_reconnects() -> None:
    tracker = SlaveAckTracker()
    tracker.update("a", 900, 1000)
    tracker.remove("a")
    tracker.remove("never-connected")
    assert tracker.push2slave_max_offset == 900
    assert tracker.best_ack_offset is None
    tracker.update("a", 500, 1000)  # reconnected after truncating its log
    assert tracker.ack_offset("a") == 500
    assert tracker.push2slave_max_offset == 900
    assert tracker.best_ack_offset == 500


def test_lag_of_unknown_slave() -> None:
    with pytest.raises(KeyError):
        SlaveAckTracker().lag("x", 10)


def test_lag_is_never_negative() -> None:
    tracker = SlaveAckTracker()
    tracker.update("a", 100, 100)
    assert tracker.lag("a", 100) == 0


def test_slave_available() -> None:
    tracker = SlaveAckTracker()
    assert not tracker.slave_available(10), "no slave connected"
    tracker.update("a", 1000, 1000)
    assert tracker.slave_available(1000 + DEFAULT_SLAVE_FALLBEHIND_MAX - 1)
    assert not tracker.slave_available(1000 + DEFAULT_SLAVE_FALLBEHIND_MAX)
    assert tracker.slave_available(1500, fall_behind_max=501)
    assert not tracker.slave_available(1500, fall_behind_max=500)
    tracker.remove("a")
    assert not tracker.slave_available(1000), "a departed slave does not count, whatever push2slave says"


def test_negative_start() -> None:
    with pytest.raises(ValueError):
        SlaveAckTracker(-1)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 10_000), st.booleans()), max_size=50))
def test_push2slave_max_is_monotonic_and_the_max_ever_acked(ops: list[tuple[str, int, bool]]) -> None:
    tracker = SlaveAckTracker()
    previous = 0
    valid: list[int] = []
    for slave, ack, disconnect in ops:
        if disconnect:
            tracker.remove(slave)
            continue
        master_max = 5_000
        try:
            tracker.update(slave, ack, master_max)
            valid.append(ack)
        except AckBeyondMaxOffsetError:
            assert ack > master_max
        assert tracker.push2slave_max_offset >= previous
        previous = tracker.push2slave_max_offset
    assert tracker.push2slave_max_offset == max(valid, default=0)

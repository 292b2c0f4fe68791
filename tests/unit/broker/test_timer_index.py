"""The timer index and its snapshot format (pure), checked against a model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.config import BrokerConfig
from services.broker.timer.index import (
    Snapshot,
    TimerEntry,
    TimerIndex,
    decode_done,
    decode_snapshot,
    encode_done,
    encode_snapshot,
)
from services.common.config import ConfigError, build_sections

_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 200), st.integers(0, 60)),
    st.tuples(st.just("remove"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("pop"), st.integers(0, 200), st.integers(1, 5)),
), max_size=300)


@given(_OPS)
@settings(max_examples=300, deadline=None)
def test_index_matches_a_model(ops: list[tuple[str, int, int]]) -> None:
    index = TimerIndex()
    model: dict[int, TimerEntry] = {}
    for op, a, b in ops:
        if op == "add":
            entry = TimerEntry(a, b, 100 + b)
            assert index.add(entry) == (b not in model)
            model.setdefault(b, entry)
        elif op == "remove":
            assert index.remove(a) == (a in model)
            model.pop(a, None)
        else:
            popped = index.pop_due(a, b)
            expected = sorted(e for e in model.values() if e.deliver_ms <= a)[:b]
            assert popped == expected
            for entry in popped:
                del model[entry.offset]
        assert len(index) == len(model)
        assert index.next_due() == (min(e.deliver_ms for e in model.values()) if model else None)
        assert sorted(index.entries()) == sorted(model.values())


def test_pop_due_is_time_ordered_and_leaves_future_entries() -> None:
    index = TimerIndex([TimerEntry(30, 1, 10), TimerEntry(10, 2, 10), TimerEntry(20, 3, 10),
                        TimerEntry(99, 4, 10)])
    assert [e.offset for e in index.pop_due(50, 10)] == [2, 3, 1]
    assert index.pop_due(50, 10) == []
    assert index.next_due() == 99 and 4 in index


def test_removed_entries_are_compacted_away() -> None:
    index = TimerIndex(TimerEntry(i, i, 1) for i in range(1000))
    for i in range(1000):
        if i % 5:
            index.remove(i)
    assert len(index) == 200
    assert len(index._heap) < 1000  # compacted, not just marked
    assert [e.offset for e in index.pop_due(10**9, 3)] == [0, 5, 10]


@given(st.integers(0, 2**62), st.integers(0, 2**62),
       st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**31 - 1)),
                max_size=50))
def test_snapshot_round_trip(q0: int, q1: int, entries: list[tuple[int, int, int]]) -> None:
    snap = Snapshot(q0, q1, [TimerEntry(*e) for e in entries])
    assert decode_snapshot(encode_snapshot(snap)) == snap


def test_torn_or_corrupt_snapshots_are_refused() -> None:
    data = encode_snapshot(Snapshot(5, 7, [TimerEntry(1, 2, 3), TimerEntry(4, 5, 6)]))
    for bad in (data[:-1], data[:10], b"", b"XXXXXXXX" + data[8:]):
        with pytest.raises(ValueError):
            decode_snapshot(bad)
    flipped = bytearray(data)
    flipped[40] ^= 0xFF  # inside the first entry
    with pytest.raises(ValueError, match="CRC"):
        decode_snapshot(bytes(flipped))


def test_done_records_list_offsets() -> None:
    assert decode_done(encode_done([0, 7, 2**40])) == [0, 7, 2**40]
    with pytest.raises(ValueError):
        decode_done(b"123")


def test_timer_and_transaction_config_keys() -> None:
    (cfg,) = build_sections([BrokerConfig], {"timerMaxDelaySec": "60", "transactionTimeOut": "1500",
                                             "transactionCheckInterval": "500", "transactionCheckMax": "3"})
    assert (cfg.timer_max_delay_sec, cfg.transaction_time_out, cfg.transaction_check_interval,
            cfg.transaction_check_max) == (60, 1500, 500, 3)
    assert BrokerConfig().timer_max_delay_sec == 259_200
    for key in ("timerMaxDelaySec", "transactionCheckMax", "timerFlushIntervalMs"):
        with pytest.raises(ConfigError, match=key):
            build_sections([BrokerConfig], {key: "0"})

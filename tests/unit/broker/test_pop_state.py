"""The POP in-flight table and its record formats (pure): replaying CK/ACK records rebuilds the
state, a newer checkpoint replaces an older one, an ack only removes the entry it names, FIFO
resets move the cursor back, and receipt handles round-trip or are refused."""

from __future__ import annotations

import pytest

from services.broker.pop.handle import BadHandleError, ReceiptHandle
from services.broker.pop.state import Checkpoint, InFlight, decode_acks, encode_acks


def ck(offsets: tuple[int, ...], deadline: int = 1000, group: str = "g", queue: int = 0) -> Checkpoint:
    return Checkpoint(group, "t", queue, offsets, tuple(1 for _ in offsets), 0, deadline)


def test_checkpoint_round_trips_and_sets_entries_cursor_and_committable_offset() -> None:
    c = ck((5, 6, 7))
    assert Checkpoint.decode(c.encode()) == c
    table = InFlight()
    table.checkpoint(c, 10)
    assert len(table) == 3 and table.cursors[("g", "t", 0)] == 8
    assert table.committable(("g", "t", 0)) == 5
    assert table.remove(("g", "t", 0, 5), 10)
    assert table.committable(("g", "t", 0)) == 6
    table.remove(("g", "t", 0, 6), 10)
    table.remove(("g", "t", 0, 7), 10)
    assert table.committable(("g", "t", 0)) == 8 and not table.busy(("g", "t", 0))


def test_a_newer_checkpoint_replaces_the_old_handle() -> None:
    table = InFlight()
    table.checkpoint(ck((3,)), 1)
    table.checkpoint(ck((3,), deadline=5000), 2)  # ChangeInvisibleDuration (record without "x")
    assert table.get(("g", "t", 0, 3), 1) is None
    assert not table.remove(("g", "t", 0, 3), 1)  # the old handle acks nothing
    entry = table.get(("g", "t", 0, 3), 2)
    assert entry is not None and entry.deadline_ms == 5000


def test_a_checkpoint_naming_the_one_it_replaces_takes_over_only_those_offsets() -> None:
    table = InFlight()
    table.checkpoint(ck((3, 4, 5)), 1)
    new = Checkpoint("g", "t", 0, (4, 5), (1, 1), 0, 9000, replaces=1)
    assert Checkpoint.decode(new.encode()) == new
    table.checkpoint(new, 2)
    assert table.get(("g", "t", 0, 3), 1) is not None and table.get(("g", "t", 0, 4), 1) is None
    assert table.get(("g", "t", 0, 4), 2) is not None and len(table) == 3


def test_ack_records_round_trip_with_fifo_resets_and_read_the_per_message_format() -> None:
    body = encode_acks("g", [("t", 0, 2, [3, 4])], [("t", 0, 3, 2)])
    assert decode_acks(body) == ("g", [("t", 0, 2, [3, 4])], [("t", 0, 3, 2)])
    assert decode_acks(encode_acks("g", [("t", 1, 9, [4])])) == ("g", [("t", 1, 9, [4])], [])
    legacy = b'{"g":"g","k":[["t",1,4,9]]}'
    assert decode_acks(legacy) == ("g", [("t", 1, 9, [4])], [])


def test_a_checkpoint_without_attempts_derives_them_and_acks_remove_only_named_offsets() -> None:
    c = Checkpoint("g", "t", 0, (7, 8, 9), (), 0, 100)
    assert Checkpoint.decode(c.encode()) == c
    table = InFlight()
    live = table.checkpoint(c, 3)
    assert live.pending == {7: 0, 8: 0, 9: 0}
    assert table.discard(live, [8, 8, 42]) == [8]
    assert len(table) == 2 and table.committable(("g", "t", 0)) == 7
    assert table.discard(live, [7, 9]) == [7, 9]
    assert table.cks == {} and table.committable(("g", "t", 0)) == 10


def test_fifo_reset_moves_the_cursor_back_and_keeps_the_attempt() -> None:
    table = InFlight()
    table.checkpoint(ck((0, 1, 2)), 1)
    table.remove(("g", "t", 0, 0), 1)
    for offset in (1, 2):
        table.remove(("g", "t", 0, offset), 1)
        table.reset(("g", "t", 0, offset), 2)
    assert table.cursors[("g", "t", 0)] == 1 and table.fifo_attempts[("g", "t", 0, 2)] == 2


def test_min_checkpoint_id_is_the_replay_start() -> None:
    table = InFlight()
    assert table.min_ck_id() is None
    table.checkpoint(ck((1,)), 7)
    table.checkpoint(ck((2,), queue=1), 4)
    assert table.min_ck_id() == 4


def test_receipt_handles_round_trip_and_garbage_is_refused() -> None:
    handle = ReceiptHandle("%RETRY%g", 0, 12, 34, 1_700_000_000_000, "broker-a")
    assert ReceiptHandle.decode(handle.encode()) == handle
    for bad in ("", "garbage", "t 0 x 1 2 b", "t -1 0 1 2 b", "a b c d e f g", "x" * 2000):
        with pytest.raises(BadHandleError):
            ReceiptHandle.decode(bad)

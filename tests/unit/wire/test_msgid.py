"""The time in a RocketMQ 5 SDK message id (what bounds a topic-less unique id lookup)."""

from __future__ import annotations

from pocketmq.wire.msgid import offset_msg_id, uniq_id_time_ms


def test_sdk_v1_id_carries_its_second() -> None:
    # 2026-01-01T00:00:00Z is 157,766,400 s after 2021-01-01T00:00:00Z.
    msg_id = f"01{0x0242AC110002:012X}{0x1234:04X}{157_766_400:08X}{7:08X}"
    assert len(msg_id) == 34
    assert uniq_id_time_ms(msg_id) == 1_767_225_600_000


def test_other_ids_carry_no_time() -> None:
    assert uniq_id_time_ms(offset_msg_id(("10.0.0.1", 10911), 1234)) is None  # 32 hex digits
    assert uniq_id_time_ms("7F0000010001DEADBEEF000000000001") is None  # a 4.x client id
    assert uniq_id_time_ms("00" + "0" * 32) is None  # version 0
    assert uniq_id_time_ms("01" + "Z" * 32) is None
    assert uniq_id_time_ms("order-17") is None

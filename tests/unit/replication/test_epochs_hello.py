"""Epoch lists, the epoch file and the identity hello (sans-I/O parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.broker.replication.epochfile import EpochFile
from services.broker.replication.epochs import EpochEntry, EpochError, check_entries, last_common_offset
from services.broker.replication.errors import MalformedFrameError
from services.broker.replication.framing import HEADER, TRANSFER_HEADER_SIZE, encode_ack, encode_heartbeat
from services.broker.replication.hello import (
    HELLO_HEAD_SIZE,
    MasterHello,
    SlaveHello,
    decode_hello_head,
    decode_master_hello,
    decode_reply_head,
    decode_slave_hello,
    encode_master_hello,
    encode_slave_hello,
)

E = EpochEntry


def test_entries_must_grow() -> None:
    check_entries([E(1, 0), E(2, 100), E(5, 100)])
    with pytest.raises(EpochError, match="does not follow"):
        check_entries([E(2, 0), E(2, 10)])
    with pytest.raises(EpochError, match="before epoch"):
        check_entries([E(1, 50), E(2, 10)])


@pytest.mark.parametrize(("mine", "my_max", "theirs", "their_max", "expected"), [
    # same history: the shorter log's end
    ([E(1, 0)], 500, [E(1, 0)], 900, 500),
    # the old master wrote 700 in epoch 1, the new master took over at 400 and wrote on to 2000:
    # the old master must cut back to 400 although its log is shorter than the new master's
    ([E(1, 0)], 700, [E(1, 0), E(2, 400)], 2000, 400),
    # this slave already has epoch 2 and is behind: nothing to cut
    ([E(1, 0), E(2, 400)], 600, [E(1, 0), E(2, 400), E(3, 900)], 1200, 600),
    # a member that was master in epoch 2 (from 400) while the other took epoch 3 at 450
    ([E(1, 0), E(2, 400)], 800, [E(1, 0), E(3, 450)], 1000, 400),
    # no term in common
    ([E(4, 0)], 10, [E(1, 0)], 10, None),
    ([], 10, [E(1, 0)], 10, None),
])
def test_last_common_offset(mine: list[EpochEntry], my_max: int, theirs: list[EpochEntry], their_max: int,
                            expected: int | None) -> None:
    assert last_common_offset(mine, my_max, theirs, their_max) == expected


def test_epoch_file_survives_reopen_and_trims(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    assert f.entries == () and f.epoch == 0
    f.start_epoch(1, 0)
    f.start_epoch(2, 400)
    f.start_epoch(3, 400)  # epoch 2 wrote nothing: dropped
    assert EpochFile(str(tmp_path)).entries == (E(1, 0), E(3, 400))
    f.truncate(300)
    assert EpochFile(str(tmp_path)).entries == (E(1, 0),)
    with pytest.raises(EpochError):
        f.start_epoch(1, 500)
    f.replace([E(1, 0), E(7, 900)])
    assert EpochFile(str(tmp_path)).epoch == 7


def test_corrupt_epoch_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "epochs").write_text("2 0\n1 5\n")
    with pytest.raises(EpochError, match="epochs"):
        EpochFile(str(tmp_path))


def test_slave_hello_round_trip() -> None:
    hello = SlaveHello("c", "broker-a", 2, "10.0.0.2:10911", (E(1, 0), E(3, 4096)))
    wire = encode_slave_hello(hello)
    size = decode_hello_head(wire[:HELLO_HEAD_SIZE])
    assert size == len(wire) - HELLO_HEAD_SIZE
    assert decode_slave_hello(wire[HELLO_HEAD_SIZE:]) == hello
    assert hello.epoch == 3


def test_an_original_slaves_request_offset_is_not_a_hello() -> None:
    for offset in (0, 1, 4096, 2**62):
        assert decode_hello_head(encode_ack(offset)) is None


def test_master_hello_round_trip_and_original_frames() -> None:
    hello = MasterHello("broker-a", 0, 123456, (E(1, 0),))
    wire = encode_master_hello(hello)
    offset, size = HEADER.unpack(wire[:TRANSFER_HEADER_SIZE])
    assert decode_reply_head(offset, size) == len(wire) - TRANSFER_HEADER_SIZE
    assert decode_master_hello(wire[TRANSFER_HEADER_SIZE:]) == hello
    offset, size = HEADER.unpack(encode_heartbeat(99))
    assert decode_reply_head(offset, size) is None


@pytest.mark.parametrize("body", [b"not json", b"[1]", b'{"brokerId": -1}', b'{"brokerId": true}',
                                  b'{"brokerId": 1, "epochs": [[2, 0], [1, 5]]}',
                                  b'{"brokerId": 1, "epochs": [[1]]}'])
def test_bad_slave_hello_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        decode_slave_hello(body)


def test_oversized_or_unknown_version_head_is_refused() -> None:
    from services.broker.replication.framing import HELLO_MAGIC
    with pytest.raises(MalformedFrameError, match="exceeds"):
        decode_hello_head(HELLO_MAGIC + b"\x00\x01\xff\xff")
    with pytest.raises(MalformedFrameError, match="version"):
        decode_hello_head(HELLO_MAGIC + b"\x00\x09\x00\x10")

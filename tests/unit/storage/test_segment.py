"""Segments (one mapped file) and segment queues (a directory of them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.broker.storage.segment import (
    Segment,
    SegmentError,
    parse_segment_name,
    segment_name,
)
from services.broker.storage.segment_queue import SegmentQueue

SIZE = 8192


def test_names_are_20_digit_start_offsets() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1073741824) == "00000000001073741824"
    assert parse_segment_name("00000000001073741824") == 1073741824
    assert parse_segment_name("1073741824") is None
    assert parse_segment_name("0000000000107374182x") is None


def test_segment_write_flush_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / segment_name(SIZE))
    synced: list[int] = []
    seg = Segment(path, SIZE, SIZE, create=True)
    assert os.path.getsize(path) == SIZE and seg.end == 2 * SIZE
    assert seg.append(b"hello") == 0 and seg.append(b" world") == 5
    assert seg.write_pos == 11 and seg.write_offset == SIZE + 11 and seg.flushed_pos == 0
    assert seg.flush(synced.append) == 11 and len(synced) == 1
    assert seg.flush(synced.append) == 11 and len(synced) == 1  # nothing dirty: no sync
    seg.append(b"!")
    assert seg.flush(synced.append, least_pages=1) == 11  # less than a page dirty
    with pytest.raises(SegmentError):
        seg.append(bytes(SIZE))
    seg.close()
    again = Segment(path, SIZE, SIZE)
    assert bytes(again.view[:12]) == b"hello world!"
    again.close()
    with pytest.raises(SegmentError, match="expected"):
        Segment(path, SIZE, SIZE * 2)
    with pytest.raises(SegmentError):
        Segment(path, SIZE, SIZE, create=True)  # exists


def test_truncate_zeroes_the_tail(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / segment_name(0)), 0, SIZE, create=True)
    seg.append(b"x" * 5000)
    seg.flush(lambda fd: None)
    seg.truncate_to(100)
    assert seg.write_pos == 100 and seg.flushed_pos == 100
    assert bytes(seg.view[:100]) == b"x" * 100 and not any(seg.view[100:])
    seg.append(b"y" * 3000)
    seg.truncate_to(10, sparse=True)  # recovery flavour: via ftruncate
    assert bytes(seg.view[:10]) == b"x" * 10 and not any(seg.view[10:])
    seg.close()


def test_slices_hold_the_segment(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0)
    seg = Segment(str(path), 0, SIZE, create=True)
    seg.append(b"abcdef")
    piece = seg.slice(2, 3)
    assert piece is not None and bytes(piece.data) == b"cde" and piece.start_offset == 2
    assert seg.is_held
    seg.destroy()  # unlinks now, unmaps when the slice is released
    assert not path.exists() and not seg.available
    assert bytes(piece.data) == b"cde"  # still readable
    assert not seg.hold() and seg.slice(0, 1) is None
    piece.release()
    piece.release()  # idempotent
    assert seg.mm.closed


def test_slice_context_manager(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / segment_name(0)), 0, SIZE, create=True)
    seg.append(b"abc")
    with seg.slice(0, 3) as piece:  # type: ignore[union-attr]
        assert bytes(piece.data) == b"abc" and piece.end_offset == 3
        assert seg.is_held
    assert not seg.is_held
    seg.close()
    assert seg.mm.closed


def test_populate_maps_ahead_without_touching_data(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / segment_name(0)), 0, SIZE, create=True)
    seg.append(b"data")
    assert seg.populate(10, 4096) and seg.populated_pos == 4096
    assert seg.populate(5000, 100) and seg.populated_pos == 5000  # at least up to the end asked for
    assert seg.populate(SIZE + 100, 4096) and seg.populated_pos == SIZE  # never past the file
    assert bytes(seg.view[:4]) == b"data" and not any(seg.view[4:])
    seg.flush(lambda fd: None)
    seg.close()
    assert (tmp_path / segment_name(0)).read_bytes()[:4] == b"data"


# -- segment queue -------------------------------------------------------------------------------

def fill(queue: SegmentQueue, n_segments: int) -> None:
    start = 0
    for _ in range(n_segments):
        seg = queue.create(start)
        seg.append(bytes([len(queue.segments)]) * SIZE)
        start = seg.end


def test_queue_create_find_and_reload(tmp_path: Path) -> None:
    q = SegmentQueue(str(tmp_path / "q"), SIZE)
    assert q.is_empty() and q.max_offset == 0 and q.find(0) is None
    fill(q, 3)
    assert sorted(os.listdir(tmp_path / "q")) == [segment_name(i * SIZE) for i in range(3)]
    assert q.min_offset == 0 and q.max_offset == 3 * SIZE
    assert q.find(SIZE + 5) is q.segments[1] and q.find(3 * SIZE) is None and q.find(-1) is None
    with pytest.raises(SegmentError, match="does not follow"):
        q.create(5 * SIZE)
    assert q.flush() == 3 * SIZE
    q.close()
    again = SegmentQueue(str(tmp_path / "q"), SIZE)
    again.load()
    assert [s.start for s in again.segments] == [0, SIZE, 2 * SIZE]
    assert again.max_offset == 3 * SIZE and again.flushed_where == 3 * SIZE
    again.close()


def test_queue_load_refuses_holes_and_misaligned_files(tmp_path: Path) -> None:
    q = SegmentQueue(str(tmp_path / "q"), SIZE)
    fill(q, 3)
    q.close()
    os.unlink(tmp_path / "q" / segment_name(SIZE))
    with pytest.raises(SegmentError, match="not contiguous"):
        SegmentQueue(str(tmp_path / "q"), SIZE).load()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / segment_name(100)).write_bytes(bytes(SIZE))
    with pytest.raises(SegmentError, match="aligned"):
        SegmentQueue(str(tmp_path / "r"), SIZE).load()


def test_queue_truncate(tmp_path: Path) -> None:
    q = SegmentQueue(str(tmp_path / "q"), SIZE)
    fill(q, 3)
    q.truncate(SIZE + 10)
    assert len(q.segments) == 2 and q.max_offset == SIZE + 10
    assert not (tmp_path / "q" / segment_name(2 * SIZE)).exists()
    assert not any(q.segments[1].view[10:])
    q.truncate(SIZE)  # exactly at a boundary: the later (empty) segment goes
    assert len(q.segments) == 1 and q.max_offset == SIZE
    q.truncate(0)  # everything: an empty first segment keeps max_offset
    assert len(q.segments) == 1 and q.max_offset == 0
    q.close()


def test_delete_head_stops_at_held_and_never_deletes_last(tmp_path: Path) -> None:
    q = SegmentQueue(str(tmp_path / "q"), SIZE)
    fill(q, 4)
    held = q.segments[1].slice(0, 10)
    deleted = q.delete_head(lambda seg: True)
    assert [s.start for s in deleted] == [0]  # stopped at the held one, so no hole
    assert q.min_offset == SIZE
    assert held is not None
    held.release()
    deleted = q.delete_head(lambda seg: True)
    assert [s.start for s in deleted] == [SIZE, 2 * SIZE]
    assert [s.start for s in q.segments] == [3 * SIZE]  # the last one stays
    q.destroy()
    assert not (tmp_path / "q").exists()

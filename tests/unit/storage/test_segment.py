"""Segments (one mapped file) and segment queues (a directory of them)."""

from __future__ import annotations

import errno
import mmap
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.storage import segment as segment_module
from services.broker.storage.segment import (
    DIRECT_ALIGN,
    DIRECT_MIN,
    Segment,
    SegmentError,
    parse_segment_name,
    segment_name,
    split_views,
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


# -- direct writes (a slave's bulk appends) ----------------------------------------------------

BIG = 1024 * 1024


def _stage(size: int = 256 * 1024) -> memoryview:
    """A page-aligned staging buffer, smaller than the largest writes (several rounds each)."""
    return memoryview(mmap.mmap(-1, size))


def _direct_supported(directory: str) -> bool:
    """Whether this file system takes an aligned O_DIRECT write (ext4, xfs: yes)."""
    path = os.path.join(directory, "probe")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.pwrite(fd, _stage(DIRECT_ALIGN), 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)


def _expected_direct(pos: int, n: int) -> int:
    lo = -(-pos // DIRECT_ALIGN) * DIRECT_ALIGN
    hi = (pos + n) // DIRECT_ALIGN * DIRECT_ALIGN
    return hi - lo if hi - lo >= DIRECT_MIN else 0


@given(views=st.lists(st.binary(max_size=40), max_size=8), data=st.data())
def test_split_views_cuts_at_the_given_positions(views: list[bytes], data: st.DataObject) -> None:
    total = sum(map(len, views))
    cuts = sorted(data.draw(st.lists(st.integers(0, total), max_size=3)))
    parts = split_views([memoryview(v) for v in views], *cuts)
    assert len(parts) == len(cuts) + 1
    joined = b"".join(views)
    bounds = [0, *cuts, total]
    for part, start, stop in zip(parts, bounds[:-1], bounds[1:], strict=True):
        assert b"".join(bytes(p) for p in part) == joined[start:stop]
        assert all(len(p) for p in part)  # no empty views


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(1, 300_000), min_size=1, max_size=10), start=st.integers(0, 9000),
       seed=st.integers(0, 2**32))
def test_write_at_direct_and_cached_blocks_make_the_same_file(sizes: list[int], start: int,
                                                              seed: int) -> None:
    """A slave's appends of any sizes from any offset: the whole blocks of large ones go direct,
    the rest through the page cache, and the file and the mapping always hold exactly the bytes
    written, even where the mapping was read (pages cached) before a direct write covered it."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        direct_ok = _direct_supported(tmp)
        path = os.path.join(tmp, segment_name(0))
        seg = Segment(path, 0, BIG, create=True)
        expected = bytearray(BIG)
        stage = _stage()
        pos = start
        seg.write_pos = start
        try:
            for size in sizes:
                size = min(size, BIG - pos)
                if not size:
                    break
                data = rng.randbytes(size)
                cuts = sorted(rng.sample(range(size + 1), 2))
                pieces = [data[:cuts[0]], data[cuts[0]:cuts[1]], data[cuts[1]:]]
                direct = seg.write_at(pos, pieces, stage)
                assert direct == (_expected_direct(pos, size) if direct_ok else 0)
                expected[pos:pos + size] = data
                pos += size
                assert seg.write_pos == pos
                assert seg.view[:pos] == expected[:pos]
                bytes(seg.view[pos:pos + 3 * DIRECT_ALIGN])  # cache pages a later write covers
            seg.flush()
        finally:
            seg.close()
        with open(path, "rb") as f:
            assert f.read() == expected


def test_write_at_without_a_stage_or_below_the_minimum_uses_the_page_cache(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / segment_name(0)), 0, BIG, create=True)
    try:
        assert seg.write_at(0, [b"x" * (2 * DIRECT_MIN)]) == 0  # no stage
        assert seg.write_at(2 * DIRECT_MIN, [b"y" * (DIRECT_MIN - 1)], _stage()) == 0
        assert seg.write_pos == 3 * DIRECT_MIN - 1
        assert seg.view[:seg.write_pos] == b"x" * (2 * DIRECT_MIN) + b"y" * (DIRECT_MIN - 1)
    finally:
        seg.close()


def test_write_at_falls_back_to_the_page_cache_without_o_direct(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_module, "_O_DIRECT", None)
    seg = Segment(str(tmp_path / segment_name(0)), 0, BIG, create=True)
    try:
        data = os.urandom(300_000)
        assert seg.write_at(0, [data], _stage()) == 0
        assert seg.view[:len(data)] == data
    finally:
        seg.close()


def test_write_at_falls_back_when_the_file_system_refuses_direct_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EINVAL from a direct write (a file system that opens O_DIRECT but will not do it): the
    range is written through the page cache, and the segment does not try again."""
    if not _direct_supported(str(tmp_path)):
        pytest.fail("this test needs a file system with O_DIRECT (ext4, xfs) under the temp dir")
    calls = []

    def refuse(fd: int, data: object, offset: int) -> int:
        calls.append(offset)
        raise OSError(errno.EINVAL, "Invalid argument")

    seg = Segment(str(tmp_path / segment_name(0)), 0, BIG, create=True)
    try:
        monkeypatch.setattr(segment_module.os, "pwrite", refuse)
        first = os.urandom(200_000)
        second = os.urandom(200_000)
        assert seg.write_at(0, [first], _stage()) == 0
        assert seg.write_at(len(first), [second], _stage()) == 0
        assert len(calls) == 1
        monkeypatch.undo()
        assert seg.view[:400_000] == first + second
    finally:
        seg.close()
    with open(tmp_path / segment_name(0), "rb") as f:
        assert f.read(400_000) == first + second

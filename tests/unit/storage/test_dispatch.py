"""Batch dispatch of replicated records (storage/dispatch.py): the same consume queues as the
one-record-at-a-time path, and the same refusal, at the same record, of anything invalid."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pocketmq.wire.record import field_offset
from services.broker.storage import dispatch, indexfeed, replica, reput
from services.broker.storage import store as store_module
from services.broker.storage.consumequeue import ConsumeQueue, ConsumeQueueStore
from services.broker.storage.dispatch import DispatchBatch, Scanner
from services.broker.storage.indexfeed import AppendFeed
from services.broker.storage.record import HEADER_SIZE, TRANSACTION_PREPARED_TYPE, Message
from services.broker.storage.segment import Segment
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import StoreFactory, msg

SEGMENT = 1024 * 1024


def put_varied(store: MessageStore, n: int, seed: int) -> list[tuple[Message, int]]:
    """Runs of same-sized records (the stride path) and of random sizes (the walk), over
    three topics (one not ASCII) and four queues, with and without TAGS / UNIQ_KEY, and a few
    prepared transaction messages (stored, never indexed). Returns (message, physical offset)."""
    rng = random.Random(seed)
    sent: list[tuple[Message, int]] = []
    i = 0
    while i < n:
        same = rng.random() < 0.5
        size = rng.randrange(0, 2000)
        batch = []
        for _ in range(min(rng.choice([1, 20, 64]), n - i)):
            props: dict[str, str] = {}
            if rng.random() < 0.4:
                props["TAGS"] = rng.choice(["a", "TagB", "é"])
            if rng.random() < 0.2:
                props["UNIQ_KEY"] = f"K{i}"
            sys_flag = TRANSACTION_PREPARED_TYPE if rng.random() < 0.02 else 0
            body = bytes([i % 251]) * (size if same else rng.randrange(0, 2000))
            batch.append(Message(rng.choice(["TopicA", "TopicB", "Töpic"]), body, rng.randrange(4),
                                 properties=props, sys_flag=sys_flag))
            i += 1
        result = store.put_messages(batch)
        assert result.ok, result
        sent.extend(zip(batch, result.physical_offsets, strict=True))
    return sent


def replicate(master: MessageStore, slave: MessageStore, chunk: int) -> None:
    offset = slave.max_offset
    while offset < master.max_offset:
        with master.get_data(offset, chunk) as piece:  # type: ignore[union-attr]
            offset = slave.append_data(offset, piece.data)
    assert slave.wait_dispatched(master.max_offset, 30), slave.dispatch_error


@pytest.fixture
def batched_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows indexed through the batch interface (so a test knows that path ran)."""
    rows: list[int] = []
    dispatch = ConsumeQueueStore.dispatch_batch

    def counting(self: ConsumeQueueStore, batch: DispatchBatch) -> None:
        rows.append(len(batch))
        dispatch(self, batch)

    monkeypatch.setattr(ConsumeQueueStore, "dispatch_batch", counting)
    return rows


def queue_files(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_batches_index_exactly_as_one_by_one(open_store: StoreFactory, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             batched_rows: list[int]) -> None:
    config = {"mapped_file_size_commit_log": SEGMENT, "mapped_file_size_consume_queue": 300 * 20}
    master = open_store(tmp_path / "master", **config)
    sent = put_varied(master, 3000, seed=3)
    assert master.max_offset > 2 * SEGMENT  # crosses segment ends (blank records)
    batched = open_store(tmp_path / "batched", **config)
    replicate(master, batched, 700_000)
    assert sum(batched_rows) > len(sent) * 0.9
    monkeypatch.setattr(reput, "BATCH_DISPATCH_MIN", 1 << 62)  # one record at a time
    single = open_store(tmp_path / "single", **config)
    replicate(master, single, 700_000)
    for store in (master, batched, single):
        store.flush()
    expected = queue_files(tmp_path / "master")
    assert expected and queue_files(tmp_path / "batched") == expected
    assert queue_files(tmp_path / "single") == expected
    # Prepared messages are stored but not indexed; everything else is readable.
    indexed = [(m, p) for m, p in sent if not m.sys_flag & TRANSACTION_PREPARED_TYPE]
    assert len(indexed) < len(sent)
    assert sum(batched.max_queue_offset(t, q) for t in ("TopicA", "TopicB", "Töpic") for q in range(4)) \
        == len(indexed)
    last, _ = indexed[-1]
    newest = batched.max_queue_offset(last.topic, last.queue_id) - 1
    got = batched.get_messages(last.topic, last.queue_id, newest)
    assert [m.body for m in got.messages] == [last.body]
    assert batched._log.last_store_timestamp == master._log.last_store_timestamp


# Where a byte of record number BAD is spoiled (relative to the record), and the reason the
# dispatcher gives: the batch must stop right before it, like the one-by-one path.
SPOILED = [(4, "bad magic code"), (0, "bad record size"), (28, "PHYSICALOFFSET"),
           (HEADER_SIZE + 10, "body CRC mismatch"), (-1, "field sizes do not add up"),
           ("topic", "topic is not UTF-8"), ("topic_len", "")]
BAD = 150


@pytest.mark.parametrize(("where", "reason"), SPOILED)
def test_an_invalid_record_inside_a_batch_stops_it_there(open_store: StoreFactory, tmp_path: Path,
                                                         where: int | str, reason: str,
                                                         batched_rows: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reput, "BATCH_DISPATCH_MIN", 16 * 1024)
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=SEGMENT)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=SEGMENT)
    results = [master.put_message(msg(i, size=300, tags="t")) for i in range(300)]
    assert all(r.ok for r in results)
    bad_at = results[BAD].physical_offsets[0]
    total = master.max_offset
    with master.get_data(0, total) as piece:  # type: ignore[union-attr]
        data = bytearray(piece.data)
    record = results[BAD].wrote_bytes
    if where == "topic":
        data[bad_at + HEADER_SIZE + 300 + 1] = 0xFF  # first byte of TOPIC
    elif where == "topic_len":
        data[bad_at + HEADER_SIZE + 300] = 0  # TOPICLENGTH 0
    elif where == -1:
        data[bad_at + record - 2] ^= 0x40  # last property byte: PROPERTIESLENGTH no longer fits ...
        data[bad_at + HEADER_SIZE + 300 + 1 + len("TopicA") + 1] ^= 0x01  # ... its low byte changed
    else:
        assert isinstance(where, int)
        data[bad_at + where] ^= 0x7F
    assert len(data) > reput.BATCH_DISPATCH_MIN
    assert slave.append_data(0, data) == total
    assert not slave.wait_dispatched(total, 3)
    error = slave.dispatch_error
    assert error is not None and error[0] == bad_at and reason in error[1], error
    assert slave.dispatched_offset == bad_at
    assert slave.max_queue_offset("TopicA", 0) == BAD  # every record before it, none after
    # (the reput thread's first small batch goes one record at a time)
    assert sum(batched_rows) >= BAD - store_module.REPUT_BATCH_STREAMING
    got = slave.get_messages("TopicA", 0, BAD - 1, 10)
    assert [m.body for m in got.messages] == [msg(BAD - 1, size=300).body]


def put_kib(store: MessageStore, size: int) -> int:
    """1 KiB messages over four queues until the log holds ``size`` bytes; returns how many."""
    n = 0
    while store.max_offset < size:
        batch = [msg(n + i, size=1000, queue_id=(n + i) % 4) for i in range(64)]
        assert store.put_messages(batch).ok
        n += len(batch)
    return n


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes the dispatcher read back from segment files (not from the dispatch ring)."""
    reads: list[int] = []
    read_into, read_direct_into = Segment.read_into, Segment.read_direct_into

    def counting(self: Segment, pos: int, buf: memoryview) -> int:
        reads.append(len(buf))
        return read_into(self, pos, buf)

    def counting_direct(self: Segment, pos: int, size: int, buf: memoryview) -> memoryview | None:
        reads.append(size)
        return read_direct_into(self, pos, size, buf)

    monkeypatch.setattr(Segment, "read_into", counting)
    monkeypatch.setattr(Segment, "read_direct_into", counting_direct)
    return reads


def small_ring_pair(open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    ring_wait_s: float, kib: int) -> tuple[MessageStore, MessageStore, int]:
    """A master holding ``kib`` KiB messages and an empty slave whose dispatch ring is 4 MiB
    (many laps of it) and whose bulk appends wait at most ``ring_wait_s`` for the dispatcher;
    and how many messages the master holds."""
    monkeypatch.setattr(replica, "DISPATCH_RING", 4 * 1024 * 1024)
    monkeypatch.setattr(replica, "RING_WAIT_S", ring_wait_s)
    config = {"mapped_file_size_commit_log": 32 * SEGMENT}
    master = open_store(tmp_path / "master", **config)
    sent = put_kib(master, kib)
    return master, open_store(tmp_path / "slave", **config), sent


def test_a_catch_up_is_validated_in_the_ring_right_behind_the_writer(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        batched_rows: list[int], file_reads: list[int]) -> None:
    """Bulk appends wait for the dispatcher whenever they would overwrite ring bytes it has not
    read, so it validates everything in the ring: nothing is read back from the file."""
    master, slave, sent = small_ring_pair(open_store, tmp_path, monkeypatch, 60.0, 24 * SEGMENT)
    replicate(master, slave, 512 * 1024)
    assert not file_reads
    assert sum(batched_rows) > sent * 0.9
    for store in (master, slave):
        store.flush()
    assert queue_files(tmp_path / "slave") == queue_files(tmp_path / "master")
    assert log_bytes(slave) == log_bytes(master)


def test_a_small_read_between_bulk_ones_keeps_the_ring_going(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        file_reads: list[int]) -> None:
    """A catch-up read of less than 64 KiB (what the socket held at that moment) goes through
    the ring too: the ring never starts again behind the dispatcher's back, so the writer
    goes on waiting for it and nothing is read back from the file (a restart used to let the
    writer run a ring ahead and the dispatcher read the file to the end of the catch-up)."""
    master, slave, _ = small_ring_pair(open_store, tmp_path, monkeypatch, 60.0, 24 * SEGMENT)
    # (a stream that goes on: a loaded machine must not stretch a gap between two reads past
    # the bulk window, after which a small read rightly goes to the file, not the ring)
    monkeypatch.setattr(replica, "BULK_WINDOW_S", 60.0)
    offset = 0
    sizes = [512 * 1024, 3000, 300 * 1024, 20_000]
    while offset < master.max_offset:
        with master.get_data(offset, sizes[0]) as piece:  # type: ignore[union-attr]
            offset = slave.append_data(offset, piece.data)
        sizes.append(sizes.pop(0))
    assert slave.wait_dispatched(master.max_offset, 30), slave.dispatch_error
    assert not file_reads
    assert slave._log._ring_restarts <= 1  # (the first bulk append starts it)
    assert log_bytes(slave) == log_bytes(master)


def log_bytes(store: MessageStore) -> bytes:
    with store.get_data(0, store.max_offset) as data:  # type: ignore[union-attr]
        return bytes(data.data)


def test_a_writer_that_waits_too_long_goes_on_and_the_dispatcher_reads_the_file(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        file_reads: list[int]) -> None:
    master, slave, _ = small_ring_pair(open_store, tmp_path, monkeypatch, 0.05, 12 * SEGMENT)
    slave._reput.stop()  # type: ignore[union-attr]  # no dispatcher: every wait times out
    offset = 0
    while offset < master.max_offset:
        with master.get_data(offset, 512 * 1024) as piece:  # type: ignore[union-attr]
            offset = slave.append_data(offset, piece.data)
    assert slave.dispatched_offset == 0
    while slave._log.reput(8192):
        pass
    assert slave.dispatched_offset == master.max_offset and file_reads
    for store in (master, slave):
        store.flush()
    assert queue_files(tmp_path / "slave") == queue_files(tmp_path / "master")


BODY_CRC_AT = field_offset("body_crc")


def scanned_rows(data: bytes | bytearray, check_crc: bool = True) -> int:
    """Records the batch scan accepts from the start of ``data`` (log offset 0)."""
    batch = Scanner().scan(memoryview(data), 0, len(data), 1 << 40, 1 << 30, check_crc)
    return 0 if batch is None else len(batch)


@pytest.mark.parametrize("chunk", [dispatch.CRC_CHUNK, 8 * 1024])
def test_body_crcs_are_checked_per_run_and_the_first_wrong_record_is_found(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """One CRC call per run of same-sized records (BodyCrcs) must refuse exactly the records a
    CRC per record refuses: a wrong body in a long run, at a chunk's edge, in a run of mixed
    sizes, an empty body, two wrong ones (the first counts)."""
    monkeypatch.setattr(dispatch, "CRC_CHUNK", chunk)
    combined: list[bool] = []
    rows_ok = dispatch.BodyCrcs._rows_ok

    def counting(self: dispatch.BodyCrcs, *args: Any) -> bool:
        combined.append(rows_ok(self, *args))
        return combined[-1]

    monkeypatch.setattr(dispatch.BodyCrcs, "_rows_ok", counting)
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=64 * SEGMENT)
    sent: list[tuple[Message, int]] = []
    for round_, (count, size) in enumerate([(100, 300), (40, 0), (60, 1000), (17, 5), (90, 64)]):
        sent += put_varied(master, 150, seed=11 + round_)  # mixed sizes between the runs
        batch = [msg(len(sent) + i, size=size, queue_id=i % 4) for i in range(count)]
        result = master.put_messages(batch)
        assert result.ok
        sent += zip(batch, result.physical_offsets, strict=True)
    with master.get_data(0, master.max_offset) as piece:  # type: ignore[union-attr]
        data = bytes(piece.data)
    assert scanned_rows(data) == len(sent)
    assert combined and all(combined)  # (the one-call check ran, and passed)
    offsets = [p for _, p in sent]
    sizes = [b - a for a, b in zip(offsets, [*offsets[1:], len(data)], strict=True)]
    runs = [i for i in range(1, len(sent) - 1) if sizes[i - 1] == sizes[i] == sizes[i + 1]]
    mixed = [i for i in range(1, len(sent) - 1) if len({sizes[i - 1], sizes[i], sizes[i + 1]}) == 3]
    empty = [i for i, (m, _) in enumerate(sent) if not m.body]
    assert len(runs) > 250 and mixed and empty
    rng = random.Random(1)
    picks = [0, len(sent) - 1, *rng.sample(runs, 6), *rng.sample(mixed, 3)]
    for bad in picks:
        message, at = sent[bad]
        spoiled = bytearray(data)
        if message.body:
            spoiled[at + HEADER_SIZE + rng.randrange(len(message.body))] ^= 1 << rng.randrange(8)
        else:
            spoiled[at + BODY_CRC_AT] ^= 0x01  # (an empty body's CRC is 0)
        combined.clear()
        assert scanned_rows(spoiled) == bad, (bad, sizes[bad])
        assert bad not in runs or False in combined  # (its run's one-call check failed)
        assert scanned_rows(spoiled, check_crc=False) == len(sent)
        later = rng.choice([i for i in runs if i > bad] or [len(sent) - 1])
        spoiled[offsets[later] + BODY_CRC_AT] ^= 0x10  # a second wrong CRC, after it
        assert scanned_rows(spoiled) == bad
    bad = empty[0]
    spoiled = bytearray(data)
    spoiled[offsets[bad] + BODY_CRC_AT] ^= 0x01
    assert scanned_rows(spoiled) == bad


def test_a_replicated_batch_appends_to_a_new_queues_first_file_in_one_piece(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        batched_rows: list[int]) -> None:
    """A queue's first file lives in memory until the consume queue flush: batches go there
    with one append per queue, not one entry at a time."""
    puts: list[int] = []
    put = ConsumeQueue.put

    def counting(self: ConsumeQueue, *args: int) -> bool:
        puts.append(1)
        return put(self, *args)

    master = open_store(tmp_path / "master", mapped_file_size_commit_log=32 * SEGMENT)
    sent = put_kib(master, 4 * SEGMENT)
    monkeypatch.setattr(ConsumeQueue, "put", counting)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=32 * SEGMENT)
    replicate(master, slave, 1024 * 1024)
    assert sum(batched_rows) > sent * 0.9
    assert len(puts) < sent - sum(batched_rows) + 4 * len(batched_rows)
    for store in (master, slave):
        store.flush()
    assert queue_files(tmp_path / "slave") == queue_files(tmp_path / "master")


def test_the_index_keeps_replicated_batches_by_what_they_hold(open_store: StoreFactory,
                                                              tmp_path: Path) -> None:
    """A batch of keyless records holds a few bytes a record: many MB of such batches stay
    fed to the index (it does not read them back from the log)."""
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=32 * SEGMENT)
    put_kib(master, 2 * SEGMENT)
    with master.get_data(0, master.max_offset) as piece:  # type: ignore[union-attr]
        batch = Scanner().scan(piece.data, 0, piece.size, 1 << 40, 1 << 30, True)
    assert batch is not None
    feed = AppendFeed(lambda: None)
    fed = 0
    while fed < 2 * indexfeed.MAX_CLOSED_BYTES:  # (the same batch again: only its size counts)
        feed.add_batch(batch)
        fed += batch.end_offset
    assert len(feed.take()) == fed // batch.end_offset
    assert indexfeed.batch_weight(batch) < batch.end_offset // 10


def test_tag_codes_of_every_property_shape_match_the_property_parser(open_store: StoreFactory) -> None:
    """A batch's tag codes (cached by properties, or by ``TAGS`` value when a unique id makes
    the properties new) are those of the one-record parser, whatever the properties hold."""
    from pocketmq.wire.record import property_value, tag_hash_code

    shapes: list[dict[str, str]] = [
        {"TAGS": "TagA"}, {"TAGS": "TagA", "UNIQ_KEY": "u"}, {"UNIQ_KEY": "u", "TAGS": "é"},
        {"XTAGS": "no", "UNIQ_KEY": "u"}, {"XTAGS": "no", "TAGS": "yes", "UNIQ_KEY": "u"},
        {"A": "TAGS", "UNIQ_KEY": "u"}, {"TAGS": "", "UNIQ_KEY": "u"}, {"UNIQ_KEY": "u"}, {},
    ]
    store = open_store(message_index_enable=False, mapped_file_size_commit_log=1 << 20)
    messages = []
    for i in range(300):
        props = {k: (f"{v}{i}" if k == "UNIQ_KEY" else v) for k, v in shapes[i % len(shapes)].items()}
        messages.append(msg(i, properties=props))
    store.put_messages(messages)
    data = store.get_data(0, store.max_offset)
    assert data is not None
    with data:
        scanner = Scanner()
        batch = scanner.scan(data.data, 0, data.size, 1 << 30, 10_000, True)
        again = scanner.scan(data.data, 0, data.size, 1 << 30, 10_000, True)  # (from the caches)
    assert batch is not None and again is not None and len(batch) == 300
    expected = []
    for m in messages:
        raw = "".join(f"{k}\x01{v}\x02" for k, v in m.properties.items()).encode()
        tags = property_value(raw, "TAGS")
        expected.append(tag_hash_code(tags) if tags else 0)
    assert batch.tags_codes.tolist() == expected == again.tags_codes.tolist()
    assert len(set(expected)) == 4  # (TagA, é, yes and 0)

"""The message index (services/broker/storage/index.py) through the store: built from local
appends and from replicated data, chains and collisions, time ranges, recovery, retention and
truncation. Small index files (``max_index_num`` 40) so files roll within a few hundred keys."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.storage import bulk, indexfeed, indexkeys
from services.broker.storage import index as index_module
from services.broker.storage.index import IndexFile, record_keys
from services.broker.storage.record import Message, encode_tail
from services.broker.storage.store import MessageStore
from tests.unit.storage.conftest import StoreFactory, msg, small_config

SMALL_INDEX = {"max_hash_slot_num": 8, "max_index_num": 40}


def indexed(store: MessageStore, timeout: float = 5.0) -> None:
    """Wait until the index thread has caught up with the log."""
    assert store.index is not None
    deadline = time.monotonic() + timeout
    while store.index.indexed_offset < store.max_offset:
        assert time.monotonic() < deadline, (store.index.indexed_offset, store.max_offset)
        time.sleep(0.005)


def bodies(records: list[object]) -> list[bytes]:
    return [r.body for r in records]  # type: ignore[attr-defined]


def test_keys_and_unique_ids_are_found_across_rolled_files(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store(**SMALL_INDEX)
    for i in range(150):  # 8 slots: long chains; 40 entries per file: several files
        m = msg(i, keys=[f"k{i}", "every"], properties={"UNIQ_KEY": f"U{i:04d}"}) if i % 3 else msg(i)
        store.put_messages([m]) if i % 2 else store.put_message(m)
    indexed(store)
    files = sorted(os.listdir(tmp_path / "store" / "index"))
    assert len(files) >= 5
    for i in (1, 2, 55, 149):
        assert [r.keys for r in store.query_by_key("TopicA", f"k{i}")] == [[f"k{i}", "every"]]
        assert [r.uniq_key for r in store.query_by_key("TopicA", f"U{i:04d}", unique=True)] == [f"U{i:04d}"]
    assert store.query_by_key("TopicA", "k3") == []  # i % 3 == 0: no keys
    assert store.query_by_key("TopicA", "k1", unique=True) == []  # a business key, not a unique id
    assert store.query_by_key("TopicB", "k1") == []  # another topic
    every = store.query_by_key("TopicA", "every", limit=1000)
    assert len(every) == 100
    stamps = [r.store_timestamp for r in every]
    offsets = [r.physical_offset for r in every]
    assert stamps == sorted(stamps, reverse=True) and offsets == sorted(offsets, reverse=True)
    assert len(store.query_by_key("TopicA", "every", limit=7)) == 7


def test_time_range(open_store: StoreFactory) -> None:
    store = open_store(**SMALL_INDEX)
    first = store.put_message(msg(0, keys="t"))
    time.sleep(1.1)  # index times are seconds: a second apart
    second = store.put_message(msg(1, keys="t"))
    indexed(store)
    t1, t2 = first.store_timestamp, second.store_timestamp
    assert len(store.query_by_key("TopicA", "t")) == 2
    assert [r.store_timestamp for r in store.query_by_key("TopicA", "t", t2, t2)] == [t2]
    assert [r.store_timestamp for r in store.query_by_key("TopicA", "t", 0, t1)] == [t1]
    assert store.query_by_key("TopicA", "t", t2 + 1) == []


def test_replicated_data_is_indexed_on_a_slave(open_store: StoreFactory, tmp_path: Path) -> None:
    master = open_store(tmp_path / "m", **SMALL_INDEX)
    for i in range(120):  # ~3 segments, blank records at their ends
        master.put_message(msg(i, size=300, keys=f"r{i}"))
    slave = open_store(tmp_path / "s", **SMALL_INDEX)
    offset = 0
    while offset < master.max_offset:
        data = master.get_data(offset, 1000)  # chunks that end inside records
        assert data is not None
        with data:
            slave.append_data(offset, data.data)
            offset = data.end_offset
    indexed(slave)
    for i in (0, 61, 119):
        assert [r.keys for r in slave.query_by_key("TopicA", f"r{i}")] == [[f"r{i}"]]


def test_recovery_resumes_and_rebuilds(open_store: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(small_config(root, **SMALL_INDEX))
    store.start()
    for i in range(60):
        store.put_message(msg(i, keys=f"a{i}"))
    indexed(store)
    store.shutdown()
    again = open_store(root, **SMALL_INDEX)  # clean restart: resumes where the files end
    assert again.index is not None and again.index.indexed_offset == again.max_offset
    for i in range(60, 80):
        again.put_message(msg(i, keys=f"a{i}"))
    indexed(again)
    assert [r.keys for r in again.query_by_key("TopicA", "a10")] == [["a10"]]
    assert [r.keys for r in again.query_by_key("TopicA", "a79")] == [["a79"]]
    again.shutdown()
    # Index files lost (or never written): rebuilt from the commit log at start.
    for name in os.listdir(root / "index"):
        os.unlink(root / "index" / name)
    rebuilt = open_store(root, **SMALL_INDEX)
    indexed(rebuilt)
    assert [r.keys for r in rebuilt.query_by_key("TopicA", "a0")] == [["a0"]]
    assert [r.keys for r in rebuilt.query_by_key("TopicA", "a79")] == [["a79"]]


def test_a_store_without_keys_resumes_indexing_where_it_stopped(
        open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No index file exists until a message carries a key: the progress file keeps the place."""
    root = tmp_path / "store"
    store = MessageStore(small_config(root, **SMALL_INDEX))
    store.start()
    for i in range(40):
        store.put_message(msg(i))
    indexed(store)
    store.shutdown()
    assert os.listdir(root / "index") == [index_module.PROGRESS_FILE]
    read_back = count_read_backs(monkeypatch)
    again = open_store(root, **SMALL_INDEX)
    assert again.index is not None and again.index.indexed_offset == again.max_offset
    again.put_message(msg(40, keys="first-key"))  # the first index file replaces the progress file
    indexed(again)
    assert read_back == []
    assert [r.keys for r in again.query_by_key("TopicA", "first-key")] == [["first-key"]]
    assert index_module.PROGRESS_FILE not in os.listdir(root / "index")
    again.shutdown()
    # A damaged progress file is ignored: everything is read back, nothing is lost.
    monkeypatch.undo()
    for name in os.listdir(root / "index"):
        os.unlink(root / "index" / name)
    (root / "index" / index_module.PROGRESS_FILE).write_bytes(b"\x00" * 5)
    rebuilt = open_store(root, **SMALL_INDEX)
    indexed(rebuilt)
    assert [r.keys for r in rebuilt.query_by_key("TopicA", "first-key")] == [["first-key"]]


def test_reindexing_after_a_crash_shows_each_message_once(open_store: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(small_config(root, max_hash_slot_num=64, max_index_num=1000))
    store.start()
    for i in range(30):
        store.put_message(msg(i, keys="dup"))
    indexed(store)
    assert store.index is not None
    store.shutdown()
    # As if the process died after writing the entries but before recording how far it got:
    with open(root / "index" / sorted(os.listdir(root / "index"))[-1], "r+b") as f:
        f.seek(24)
        f.write((0).to_bytes(8, "big"))  # endPhyOffset = 0: everything is indexed again
    again = open_store(root, max_hash_slot_num=64, max_index_num=1000)
    indexed(again)
    found = again.query_by_key("TopicA", "dup", limit=100)
    assert len(found) == 30 and len({r.physical_offset for r in found}) == 30


def test_retention_follows_the_commit_log(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store(**SMALL_INDEX)
    for i in range(300):
        store.put_message(msg(i, keys=f"x{i}"))
    indexed(store)
    store.flush()
    index_dir = tmp_path / "store" / "index"
    before = sorted(os.listdir(index_dir))
    assert len(before) >= 7
    later = int(time.time() * 1000) + 73 * 3_600_000
    store.delete_expired(later)
    after = sorted(os.listdir(index_dir))
    assert after and len(after) < len(before)
    assert int(after[0]) <= store.min_offset  # the oldest file left still covers the log's start
    assert after[-1] == before[-1]
    assert store.query_by_key("TopicA", "x0") == []  # its record is gone
    assert [r.keys for r in store.query_by_key("TopicA", "x299")] == [["x299"]]


def test_truncated_log_entries_never_show(open_store: StoreFactory) -> None:
    store = open_store(**SMALL_INDEX)
    results = [store.put_message(msg(i, keys=f"c{i}")) for i in range(10)]
    indexed(store)
    cut = results[5].physical_offsets[0]
    store.truncate_dirty(cut)
    assert store.query_by_key("TopicA", "c7") == []
    store.put_message(msg(70, keys="c-new"))  # lands where c5.. were
    indexed(store)
    assert store.query_by_key("TopicA", "c5") == []
    assert [r.keys for r in store.query_by_key("TopicA", "c-new")] == [["c-new"]]
    assert [r.keys for r in store.query_by_key("TopicA", "c4")] == [["c4"]]


def test_index_off(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store(message_index_enable=False)
    store.put_message(msg(0, keys="k"))
    assert store.index is None and store.query_by_key("TopicA", "k") == []
    assert not (tmp_path / "store" / "index").exists()


def test_record_keys_parses_only_whole_property_names() -> None:
    props = b"MYKEYS\x01no\x02KEYS\x01a  b\x02XUNIQ_KEY\x01no\x02UNIQ_KEY\x01U1\x02"
    assert record_keys(props) == [b"a", b"b", b"U1"]
    assert record_keys(b"KEYS\x01first\x02") == [b"first"]
    assert record_keys(b"TAGS\x01t\x02") == []


@pytest.mark.parametrize("vector_min", [1, 10**9], ids=["numpy", "loop"])
def test_put_chains_entries_of_one_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        vector_min: int) -> None:
    monkeypatch.setattr(index_module, "VECTOR_MIN", vector_min)
    f = IndexFile(str(tmp_path / "00000000000000000000"), 4, 100, create_at=(0, 1_000_000))
    hashes = [1, 5, 9, 2, 1, 13]  # slots 1 1 1 2 1 1
    offsets = [i * 100 for i in range(6)]
    stamps = [1_000_000] * 5 + [1_003_500]
    assert f.put(hashes, offsets, stamps, 0) == 6
    assert f.put(hashes[:1], [1000], [1_004_000], 0) == 1  # chained onto the last batch
    out: list[int] = []
    f.lookup(1, 0, 2**62, 10, out)
    assert out == [1000, 400, 0]
    out = []
    f.lookup(13, 0, 2**62, 10, out)
    assert out == [500]
    out = []
    f.lookup(13, 1_003_000, 1_003_999, 10, out)  # to the second
    assert out == [500]
    out = []
    f.lookup(1, 1_004_000, 2**62, 10, out)
    assert out == [1000]
    assert f.end_ts == 1_004_000
    f.close()
    reopened = IndexFile(str(tmp_path / "00000000000000000000"), 999, 999)  # keeps its geometry
    assert (reopened.slots, reopened.capacity, reopened.count) == (4, 100, 8)
    reopened.close()


def test_the_vectorised_put_writes_what_the_loop_writes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rng = __import__("random").Random(7)
    batches = [[rng.getrandbits(32) for _ in range(n)] for n in (300, 1, 900, 70)]
    files = []
    for name, vector_min in (("vector", 1), ("loop", 10**9)):
        monkeypatch.setattr(index_module, "VECTOR_MIN", vector_min)
        f = IndexFile(str(tmp_path / name), 97, 2000, create_at=(0, 1_000_000))  # many shared slots
        at = 0
        for hashes in batches:
            offsets = list(range(at, at + len(hashes)))
            f.put(hashes, offsets, [1_000_000 + 7 * o for o in offsets], 0)
            at += len(hashes)
        f.write_header()
        files.append(bytes(f.mm))
        f.close()
    assert files[0] == files[1]


def test_a_file_fills_up_and_the_next_continues(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "00000000000000000000"), 4, 10, create_at=(0, 0))
    assert f.put(list(range(15)), list(range(15)), [0] * 15, 0) == 10
    assert f.full and f.put([1], [1], [0], 0) == 0
    f.close()


def test_the_offset_of_a_message_read_from_the_index_matches_the_send(open_store: StoreFactory) -> None:
    store = open_store(**SMALL_INDEX)
    r = store.put_messages([Message.of("TopicZ", b"z", 0, keys="z1"),
                            Message.of("TopicZ", b"y", 0, keys="z2")])
    indexed(store)
    assert [m.physical_offset for m in store.query_by_key("TopicZ", "z2")] == [r.physical_offsets[1]]


def _odd_properties(i: int, spaces: bool = True) -> dict[str, str]:
    """Properties of every shape the key parsers must agree on."""
    shapes: list[dict[str, str]] = [
        {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:06d}"},
        {"KEYS": f"a{i} b{i}  c{i}" if spaces else f"a{i}", "UNIQ_KEY": f"U{i:06d}"},  # several keys
        {"UNIQ_KEY": f"U{i:06d}"},
        {"KEYS": f"only{i}"},
        {},
        {"MYKEYS": f"not{i}", "XUNIQ_KEY": "nor"},  # the names inside other names
        {"TAGS": "t", "A": f"KEYS{i}", "KEYS": ""},  # an empty value
        {"UNIQ_KEY": f"U{i:06d}", "KEYS": f"z{i}", "TAGS": "x"},
    ]
    return shapes[i % len(shapes)]


@pytest.mark.parametrize(("spaces", "topics", "batches"),
                         [(True, 2, 1), (False, 2, 1), (False, 1, 1), (True, 2, 7), (False, 2, 7)],
                         ids=["several-keys", "one-key-each", "one-topic", "several-keys-7-batches",
                              "one-key-each-7-batches"])
def test_the_batch_dispatcher_keys_match_the_record_parser(open_store: StoreFactory, spaces: bool,
                                                           topics: int, batches: int) -> None:
    """The slave's one-pass key extraction (from the properties the batch dispatcher split
    into pairs, of one batch or of several taken together) yields exactly the entries of the
    record-at-a-time parser, in commit log order."""
    from services.broker.storage.dispatch import Scanner

    store = open_store(message_index_enable=False, mapped_file_size_commit_log=1 << 20)
    store.put_messages([msg(i, topic=("TopicA", "TopicB")[topics > 1 and i % 3 == 0],
                            properties=_odd_properties(i, spaces))
                        for i in range(400)])
    data = store.get_data(0, store.max_offset)
    assert data is not None
    scanned = []
    with data:
        scanner = Scanner()
        at = 0
        while at < data.size:  # (equal batches but the last)
            batch = scanner.scan(data.data[at:], at, data.size - at, 1 << 30, -(-400 // batches), True)
            assert batch is not None
            scanned.append(batch)
            at = batch.end_offset
        expected = indexkeys.scan_records(data.data, 0, {})
    assert len(scanned) == batches and sum(map(len, scanned)) == 400
    got = [[int(v) for v in column] for column in indexkeys.batch_keys(scanned, {})]
    assert expected[0] == scanned[-1].end_offset == store.max_offset
    # (within a record the entries may come in either order: they share offset and time)
    assert got[1] == sorted(got[1]) and len(got[0]) == (500 if spaces else 400)  # (keys per 8 shapes)
    assert (sorted(zip(got[1], got[0], got[2], strict=True))
            == sorted(zip(expected[2], expected[1], expected[3], strict=True)))


def test_a_slave_indexes_replicated_batches_without_reading_them_back(
        open_store: StoreFactory, tmp_path: Path) -> None:
    big = {"mapped_file_size_commit_log": 4 << 20}  # (the batch path wants runs of 256 KiB)
    master = open_store(tmp_path / "m", message_index_enable=False, **big)
    for start in range(0, 3000, 100):
        master.put_messages([msg(i, size=200, properties=_odd_properties(i))
                             for i in range(start, start + 100)])
    slave = open_store(tmp_path / "s", **big)
    offset = 0
    while offset < master.max_offset:
        data = master.get_data(offset, 512 * 1024)
        assert data is not None
        with data:
            slave.append_data(offset, data.data)
            offset = data.end_offset
    indexed(slave)
    assert slave.index is not None and slave.index.batches_fed > 0
    for i in (0, 1, 1201, 2999):
        props = _odd_properties(i)
        for key in [*props.get("KEYS", "").split(" "), props.get("UNIQ_KEY", "")]:
            if key:
                assert [r.body for r in slave.query_by_key("TopicA", key)] == [msg(i, size=200).body], key
    assert slave.query_by_key("TopicA", "not5") == [] and slave.query_by_key("TopicA", "nor") == []


def test_single_appends_of_several_threads_are_each_indexed_once(open_store: StoreFactory) -> None:
    """Single appends of several threads are recorded for the index under the commit log lock,
    in log order: each is indexed exactly once."""
    import threading

    store = open_store(max_hash_slot_num=64, max_index_num=4000)
    sent: dict[str, int] = {}
    lock = threading.Lock()

    def send(t: int) -> None:
        for i in range(150):
            key = f"t{t}-{i}"
            r = store.append_message(Message.of("TopicT", key.encode(), t % 2, keys=key))
            with lock:
                sent[key] = r.physical_offsets[0]

    threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    indexed(store)
    for key, offset in sent.items():
        assert [m.physical_offset for m in store.query_by_key("TopicT", key)] == [offset], key
    assert store.index is not None and store.index.entries_written == len(sent)


@pytest.mark.parametrize(("spaces", "topics"), [(True, 2), (False, 2), (False, 1)])
def test_the_appended_keys_match_the_record_parser(open_store: StoreFactory, spaces: bool,
                                                   topics: int) -> None:
    """The keys a run of local appends carries (read from the property dicts in a few passes)
    are those the log parser finds in the records, in the same order."""
    store = open_store(message_index_enable=False, mapped_file_size_commit_log=4 << 20)
    messages = [Message(f"Topic{i % topics}", b"x", 0, properties=_odd_properties(i, spaces))
                for i in range(400)]
    result = store.put_messages(messages)
    keyed: list[object] = []
    for offset, message in zip(result.physical_offsets, messages, strict=True):
        keyed += (offset, 1_000 + offset, message)
    data = store.get_data(0, store.max_offset)
    assert data is not None
    with data:
        expected = indexkeys.scan_records(data.data, 0, {})
    got = [[int(v) for v in column] for column in indexfeed.appended_entries(keyed, {})]
    assert got[0] == expected[1] and got[1] == expected[2]
    assert got[2] == [1_000 + offset for offset in expected[2]]


def count_read_backs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, where the index reads records back from the commit log (start offsets)."""
    read_back: list[int] = []
    scan = index_module.IndexService._scan_log

    def counting_scan(self: index_module.IndexService, start: int, max_bytes: int) -> object:
        read_back.append(start)
        return scan(self, start, max_bytes)

    monkeypatch.setattr(index_module.IndexService, "_scan_log", counting_scan)
    return read_back


def test_keyless_appends_only_move_the_run_and_nothing_is_read_back(
        open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyless and keyed single appends, batches and segment rolls (the blank at a segment's
    end): the index is built from what the commit log recorded under its lock, no record is
    read back from the log, and every key is found."""
    store = open_store(mapped_file_size_commit_log=64 * 1024)
    assert store.index is not None
    indexed(store)
    read_back = count_read_backs(monkeypatch)
    sent = {}
    for i in range(600):  # 600 records of ~300 bytes: a few segments
        m = msg(i, size=200, keys=f"k{i}") if i % 5 == 0 else msg(i, size=200)
        r = store.put_messages([m, msg(i + 10_000, size=200)]) if i % 7 == 0 else store.put_message(m)
        sent[i] = r.physical_offsets[0]
    indexed(store)
    assert store.max_offset > 2 * 64 * 1024  # (rolled twice at least)
    assert read_back == []
    assert store.index.entries_written == 120
    for i in range(0, 600, 5):
        assert [r.physical_offset for r in store.query_by_key("TopicA", f"k{i}")] == [sent[i]]


def test_bulk_encoded_batches_are_covered_without_a_read_back(
        open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Body-only batches stored in bulk (``append_uniform``) between keyed single appends: the
    index covers them from what the commit log recorded, reads nothing back, finds every key."""
    store = open_store(mapped_file_size_commit_log=64 * 1024)
    assert store.index is not None
    indexed(store)
    read_back = count_read_backs(monkeypatch)
    tail, code = encode_tail("TopicA", {})
    sent = {}
    for i in range(200):
        sent[i] = store.put_message(msg(i, size=200, keys=f"k{i}")).physical_offsets[0]
        batch = bulk.uniform_batch("TopicA", 1, [b"x" * 300] * 8, tail, code, 0, 1_700_000_000_000,
                                   ("10.0.0.1", 1))
        assert store.append_uniform(batch, [Message("TopicA", b"", 1)] * 8).ok
    indexed(store)
    assert store.max_offset > 4 * 64 * 1024  # (rolled several times)
    assert read_back == []
    for i in range(200):
        assert [r.physical_offset for r in store.query_by_key("TopicA", f"k{i}")] == [sent[i]]


def test_a_body_only_batch_only_moves_the_run_and_a_keyed_one_is_indexed(
        open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk-encoded batch whose records carry no key hands the index nothing per message
    (its run only grows); one whose shared properties hold keys is indexed record by record."""
    store = open_store()
    assert store.index is not None
    indexed(store)
    read_back = count_read_backs(monkeypatch)
    feed = store.index.appends
    fed: list[tuple[str, int]] = []
    add_keyless, add_messages = feed.add_keyless, feed.add_messages
    monkeypatch.setattr(feed, "add_keyless", lambda start, end: (fed.append(("keyless", start)),
                                                                 add_keyless(start, end)))
    monkeypatch.setattr(feed, "add_messages", lambda start, end, *rest: (fed.append(("messages", start)),
                                                                         add_messages(start, end, *rest)))
    tail, code = encode_tail("TopicA", {"PGROUP": "KEYS-group"})
    assert not indexkeys.may_hold_keys(tail)
    batch = bulk.uniform_batch("TopicA", 1, [b"x" * 300] * 8, tail, code, 0, 1_700_000_000_000,
                               ("10.0.0.1", 1))
    plain = store.append_uniform(batch, [Message("TopicA", b"", 1)] * 8)
    keyed_props = {"KEYS": "order-1", "UNIQ_KEY": "0A0B"}
    tail, code = encode_tail("TopicA", keyed_props)
    assert indexkeys.may_hold_keys(tail)
    batch = bulk.uniform_batch("TopicA", 1, [b"y" * 300] * 8, tail, code, 0, 1_700_000_000_000,
                               ("10.0.0.1", 1))
    keyed = store.append_uniform(batch, [Message("TopicA", b"", 1, properties=keyed_props)] * 8)
    assert plain.ok and keyed.ok
    assert fed == [("keyless", plain.physical_offsets[0]), ("messages", keyed.physical_offsets[0])]
    indexed(store)
    assert read_back == []
    assert sorted(r.physical_offset for r in store.query_by_key("TopicA", "order-1")) == \
        sorted(keyed.physical_offsets)
    assert store.index.entries_written == 16


def test_a_batch_rolled_back_after_a_segment_roll_leaves_no_gap_in_the_index(
        open_store: StoreFactory) -> None:
    """A batch that rolled to a new segment and then failed is cut back: the records appended
    after it, where the blank had been, are indexed."""
    segment = 64 * 1024
    store = open_store(mapped_file_size_commit_log=segment)
    sent: dict[str, int] = {}

    def put(i: int) -> None:
        sent[f"k{i}"] = store.put_message(msg(i, size=200, keys=f"k{i}")).physical_offsets[0]

    i = 0
    while store.max_offset % segment + 1200 < segment:
        put(i)
        i += 1
    refused = store.put_messages([msg(10_000, size=1500), Message("TopicA", b"b", flag=2**40)])
    assert not refused.ok and store.max_offset < segment
    for k in range(i, i + 400):  # into the rest of the first segment, then the next ones
        put(k)
    indexed(store)
    for key, offset in sent.items():
        assert [r.physical_offset for r in store.query_by_key("TopicA", key)] == [offset], key


def test_a_feed_past_its_bound_covers_nothing_until_it_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_KEYED`` waiting keyed records the run is dropped: no run covers those records
    (the index reads them from the log) and no key is put on another record."""
    monkeypatch.setattr(indexfeed, "MAX_KEYED", 3 * 4)
    feed = indexfeed.AppendFeed(lambda: None)
    keyed = [Message("T", b"", properties={"KEYS": f"k{i}"}) for i in range(10)]
    feed.add_messages(0, 300, [0, 100, 200], 1, keyed[:3])
    first = feed.take()
    assert [(r.start, r.end, len(r.keyed)) for r in first] == [(0, 300, 9)]
    feed.add_messages(300, 800, [300, 400, 500, 600, 700], 1, keyed[3:8])  # 5 > 4: dropped
    feed.add_messages(800, 900, [800], 1, keyed[8:9])  # still nothing covered
    assert feed.take() == []
    feed.add_messages(900, 1000, [900], 1, keyed[9:])
    assert [(r.start, r.end, r.keyed[2::3]) for r in feed.take()] == [(900, 1000, keyed[9:])]


def test_the_key_hash_is_crc32_of_topic_hash_key() -> None:
    """The on-disk key hash (CRC-32 of ``topic#key``) is unchanged by computing it with ISA-L,
    and by hashing the key from the topic's CRC as the start value."""
    import random
    import zlib
    rng = random.Random(3)
    for _ in range(300):
        topic = "".join(rng.choice("abcXYZ_-%09") for _ in range(rng.randint(1, 40)))
        key = "".join(rng.choice("ké0123456789ABCDEF-") for _ in range(rng.randint(0, 80)))
        expected = zlib.crc32(f"{topic}#{key}".encode())
        assert indexkeys.key_hash(topic, key) == expected
        assert indexkeys.key_crc32(key.encode(), zlib.crc32(f"{topic}#".encode())) == expected
        assert indexkeys.topic_prefix(topic, {}) == zlib.crc32(f"{topic}#".encode())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=140), min_size=1, max_size=300),
       st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3), st.integers(1, 130))
def test_keys_hashed_together_equal_one_crc_call_each(keys: list[bytes], prefixes: list[int],
                                                       repeat_length: int) -> None:
    """The vectorised key hash (keys of one length as matrix rows, four bytes per step) gives
    zlib's CRC-32 of each key from its topic prefix, for every length, alone or in groups."""
    import zlib

    import numpy as np

    keys = keys + [bytes([i % 251]) * repeat_length for i in range(indexkeys.VECTOR_KEYS_MIN)]
    data = b"\x02".join([b"", *keys, b""])
    ends = np.cumsum([len(k) + 1 for k in keys], dtype=np.int64)
    starts = ends - [len(k) for k in keys]
    init = np.array([prefixes[i % len(prefixes)] for i in range(len(keys))], dtype=np.uint32)
    got = indexkeys.hash_keys(data, np.frombuffer(data, dtype=np.uint8), starts, ends, init)
    assert got.tolist() == [zlib.crc32(k, int(p)) for k, p in zip(keys, init, strict=True)]


def test_a_batch_of_keyed_and_keyless_messages_indexes_only_the_keys(open_store: StoreFactory) -> None:
    """A batch feeds all its messages to the index thread, which indexes only the keys: a
    business key, a unique id, both, several keys in one value, none, an empty value."""
    store = open_store()
    assert store.index is not None
    batch = []
    for i in range(120):
        kind = i % 6
        props = ({"KEYS": f"b{i}"} if kind == 0 else {"UNIQ_KEY": f"U{i}"} if kind == 1 else
                 {"KEYS": f"b{i}", "UNIQ_KEY": f"U{i}"} if kind == 2 else {"KEYS": f"b{i} c{i}"} if kind == 3
                 else {"KEYS": ""} if kind == 4 else {"TAGS": "t"})
        batch.append(msg(i, properties=props))
    result = store.put_messages(batch[:60])
    result2 = store.put_messages(batch[60:])
    offsets = [*result.physical_offsets, *result2.physical_offsets]
    indexed(store)
    assert store.index.entries_written == 20 * (1 + 1 + 2 + 2)
    for i in range(120):
        kind = i % 6
        found = [r.physical_offset for r in store.query_by_key("TopicA", f"b{i}")]
        assert found == ([offsets[i]] if kind in (0, 2, 3) else []), i
        unique = [r.physical_offset for r in store.query_by_key("TopicA", f"U{i}", unique=True)]
        assert unique == ([offsets[i]] if kind in (1, 2) else []), i
        if kind == 3:
            assert [r.physical_offset for r in store.query_by_key("TopicA", f"c{i}")] == [offsets[i]]

"""The topic table's journal: changes are appended (the file is not rewritten per change),
replayed on load, compacted into the file, and a torn tail or a crash between compaction steps
never loses an acknowledged change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services.broker.metadata import DataVersion, MetadataFileError, TopicConfig, TopicConfigManager
from services.broker.metadata.journal import Journal


class SmallCompaction(TopicConfigManager):
    journal_compact_min = 8


def journal_lines(tmp_path: Path) -> list[bytes]:
    return (tmp_path / "topics.json.journal").read_bytes().splitlines(keepends=True)


def reloaded(tmp_path: Path) -> TopicConfigManager:
    again = TopicConfigManager(str(tmp_path))
    assert again.load()
    return again


def test_changes_are_appended_not_rewritten(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    assert not m.load()
    m.put(TopicConfig("base", 2, 2))
    asyncio.run(m.persist_async())  # no file yet: written whole
    snapshot = (tmp_path / "topics.json").read_bytes()
    for i in range(20):
        m.put(TopicConfig(f"t{i}", 4, 4))
        asyncio.run(m.persist_async())
    m.put(TopicConfig("t3", 8, 8))
    m.delete("t4")
    asyncio.run(m.persist_async())
    assert (tmp_path / "topics.json").read_bytes() == snapshot
    assert len(journal_lines(tmp_path)) == 1 + 20 + 2  # header, one line per change
    again = reloaded(tmp_path)
    assert again.all() == m.all() and again.data_version == m.data_version
    assert again.get("t3") == TopicConfig("t3", 8, 8) and again.get("t4") is None
    assert not again.dirty


def test_concurrent_persists_are_written_in_order(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.persist()

    async def run() -> None:
        waits = []
        for i in range(50):
            m.put(TopicConfig("same", 1 + i % 7, 1 + i % 7))
            m.put(TopicConfig(f"t{i}", 1, 1))
            waits.append(asyncio.create_task(m.persist_async()))
        await asyncio.gather(*waits)

    asyncio.run(run())
    assert not m.dirty
    again = reloaded(tmp_path)
    assert again.all() == m.all() and again.data_version == m.data_version


def test_journal_is_compacted_into_the_file(tmp_path: Path) -> None:
    m = SmallCompaction(str(tmp_path))
    m.persist()
    for i in range(30):
        m.put(TopicConfig(f"t{i}", 4, 4))
        asyncio.run(m.persist_async())
    doc = json.loads((tmp_path / "topics.json").read_text())
    assert len(doc["topicConfigTable"]) > 8  # rewritten since
    assert len(journal_lines(tmp_path)) - 1 < 30
    assert reloaded(tmp_path).all() == m.all()
    m.persist()  # a full rewrite empties the journal
    assert len(journal_lines(tmp_path)) == 1
    again = reloaded(tmp_path)
    assert again.all() == m.all() and again.data_version == m.data_version


def test_torn_tail_is_dropped_and_appends_continue(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.persist()
    for i in range(3):
        m.put(TopicConfig(f"t{i}", 4, 4))
        asyncio.run(m.persist_async())
    journal = tmp_path / "topics.json.journal"
    good = journal.read_bytes()
    torn = Journal.encode_line("t9", TopicConfig("t9").to_json(), DataVersion(1, 99).to_json())
    journal.write_bytes(good + torn[: len(torn) // 2])  # the crash hit mid-append
    again = reloaded(tmp_path)
    assert [t.topic_name for t in again.all()] == ["t0", "t1", "t2"]
    assert journal.read_bytes() == good  # cut back to the last whole line
    again.put(TopicConfig("t5", 1, 1))
    asyncio.run(again.persist_async())
    assert reloaded(tmp_path).get("t5") == TopicConfig("t5", 1, 1)
    # A whole line with a wrong checksum at the end is torn too.
    line = Journal.encode_line("t6", TopicConfig("t6").to_json(), DataVersion(1, 100).to_json())
    journal.write_bytes(journal.read_bytes() + b"0" + line[1:])
    assert reloaded(tmp_path).get("t6") is None


def test_damaged_line_before_good_ones_refuses_to_load(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.persist()
    for i in range(3):
        m.put(TopicConfig(f"t{i}", 4, 4))
        asyncio.run(m.persist_async())
    journal = tmp_path / "topics.json.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"t1", b"t7")
    journal.write_bytes(b"".join(lines))
    with pytest.raises(MetadataFileError, match="journal"):
        TopicConfigManager(str(tmp_path)).load()


def test_crash_between_rewrite_and_new_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.persist()
    for i in range(5):
        m.put(TopicConfig(f"t{i}", 4, 4))
        asyncio.run(m.persist_async())
    m.put(TopicConfig("t2", 1, 1))  # changed after it was journaled; only the rewrite has it
    m.delete("t0")

    def crash(self: Journal, generation: int) -> None:
        raise OSError("crash before the journal was reset")

    monkeypatch.setattr(Journal, "reset", crash)
    with pytest.raises(OSError, match="crash"):
        m.persist()
    # The old journal (older generation) must not be replayed over the new file.
    again = reloaded(tmp_path)
    assert again.all() == m.all() and again.get("t2") == TopicConfig("t2", 1, 1)
    # The table stays dirty and the next write is a whole file again.
    assert m.dirty
    monkeypatch.undo()
    m.put(TopicConfig("t8", 1, 1))
    asyncio.run(m.persist_async())
    assert reloaded(tmp_path).all() == m.all()


def test_slave_replacement_rewrites_the_file(tmp_path: Path) -> None:
    m = TopicConfigManager(str(tmp_path))
    m.persist()
    m.put(TopicConfig("local", 1, 1))
    asyncio.run(m.persist_async())
    version = DataVersion(12345, 77)
    m.replace_all([TopicConfig("from-master", 3, 3)], version)
    asyncio.run(m.persist_async())
    doc = json.loads((tmp_path / "topics.json").read_text())
    assert list(doc["topicConfigTable"]) == ["from-master"]
    assert len(journal_lines(tmp_path)) == 1
    again = reloaded(tmp_path)
    assert again.data_version == version and [t.topic_name for t in again.all()] == ["from-master"]


def test_a_failed_rewrite_fails_every_change_it_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import services.broker.metadata.base as base

    m = TopicConfigManager(str(tmp_path))
    m.persist()

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    async def run() -> list[BaseException | None]:
        with m._io_lock:  # the writer is busy: both changes queue up behind it
            m.put(TopicConfig("a", 1, 1))
            first = asyncio.create_task(m.persist_async())  # a journal append ...
            await asyncio.sleep(0)
            m.replace_all([TopicConfig("b", 1, 1)], DataVersion(1, 5))
            second = asyncio.create_task(m.persist_async())  # ... covered by this rewrite
            await asyncio.sleep(0)
        results = await asyncio.gather(first, second, return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results]

    monkeypatch.setattr(base, "write_file_atomic", full_disk)
    outcomes = asyncio.run(run())
    # The append was skipped as covered by the rewrite, which failed: neither caller is told
    # its change is durable.
    assert all(isinstance(o, OSError) for o in outcomes) and m.dirty
    monkeypatch.undo()
    asyncio.run(m.persist_if_dirty())
    assert [t.topic_name for t in reloaded(tmp_path).all()] == ["b"]

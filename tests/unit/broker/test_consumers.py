from __future__ import annotations

from pathlib import Path

from services.broker.consumers import ConsumerManager
from services.broker.metadata.offsets import ConsumerOffsetManager


def test_membership_and_expiry() -> None:
    now = [100.0]
    m = ConsumerManager(expiry_s=10, resets=ConsumerOffsetManager("/nonexistent"), clock=lambda: now[0])
    assert m.heartbeat("g", "c2", {"t": "*"}) is True
    assert m.heartbeat("g", "c1", {"t": "*"}) is True
    assert m.heartbeat("g", "c1", {"t": "*"}) is False
    assert m.heartbeat("g", "c1", {"t": "a || b"}) is True
    assert m.members("g") == ["c1", "c2"]
    assert m.member_count() == 2
    now[0] += 8
    m.heartbeat("g", "c1", {"t": "a || b"})
    now[0] += 5
    assert m.scan_expired() == [("g", "c2")]
    assert m.members("g") == ["c1"]
    assert m.unregister("g", "c1") is True
    assert m.unregister("g", "c1") is False
    assert m.members("g") == [] and m.groups() == []


def test_member_details_keep_address_language_and_version() -> None:
    m = ConsumerManager(expiry_s=10, resets=ConsumerOffsetManager("/nonexistent"))
    m.heartbeat("g", "c1", {"t": "*"}, addr="10.0.0.5:4242", language="pocketmq-python", version="0.1.0")
    m.heartbeat("g", "c1", {"t": "*"}, language="pocketmq-python", version="0.2.0")
    [member] = m.member_details("g")
    assert (member.addr, member.language, member.version) == ("10.0.0.5:4242", "pocketmq-python", "0.2.0")
    assert member.last_heartbeat_ms > 0


def test_reset_generations_increase_and_make_older_commits_stale(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    m = ConsumerManager(expiry_s=10, resets=offsets)
    assert m.reset_generation("g", "t") == 0
    assert not m.stale_commit("g", "t", 0)  # never reset: nothing is stale
    first = m.record_reset("g", "t")
    second = m.record_reset("g", "t")
    assert second > first > 0
    assert m.reset_generations("g") == {"t": second} and m.reset_generations("other") == {}
    assert m.stale_commit("g", "t", first) and m.stale_commit("g", "t", 0)
    assert not m.stale_commit("g", "t", second)
    assert not m.stale_commit("g", "t", None)  # clients that do not track resets are not affected
    assert not m.stale_commit("g", "other-topic", 0)

    # Kept with the consumer offsets: persisted and reloaded, and what a slave adopts.
    assert offsets.dirty
    offsets.persist()
    again = ConsumerOffsetManager(tmp_path)
    assert again.load() and again.reset_generations("g") == {"t": second}
    assert again.stale_commit("g", "t", first)
    slave = ConsumerOffsetManager(tmp_path / "slave")
    slave.replace_all(list(offsets.entries()), offsets.data_version, list(offsets.reset_entries()))
    assert slave.reset_generation("g", "t") == second
    offsets.remove_topic("t")
    assert offsets.reset_generation("g", "t") == 0


def test_offset_file_without_reset_generations_stays_rocketmq_shaped(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("g", "t", 0, 5)
    offsets.persist()
    text = (tmp_path / "consumerOffset.json").read_text()
    assert "resetGenerationTable" not in text and '"t@g"' in text

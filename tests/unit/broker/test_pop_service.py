"""The POP service on a real MessageStore (no processes): the role switch master -> slave ->
master drops and rebuilds the in-flight table from the revive topic exactly (acked offsets gone,
a ChangeInvisibleTime's offsets under their new checkpoint), a slave refuses pops and acks, and
an expired checkpoint is revived into the retry topic for the next attempt."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from services.broker.longpoll import QueueNotifier
from services.broker.metadata import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.pop.metrics import PopMetrics
from services.broker.pop.model import PopRequest
from services.broker.pop.service import REVIVE_GROUP, PopService, retry_topic
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.storage.store import MessageStore
from services.broker.validation import MATCH_ALL
from services.common.errors import FailedPreconditionError
from tests.unit.storage.conftest import small_config


@pytest.mark.asyncio
async def test_role_switch_rebuilds_the_table_and_expired_pops_are_revived(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=1 << 20))
    store.start()
    try:
        def append(msgs: Sequence[record.Message]) -> PutResult:
            result = store.append_messages(msgs)
            assert store.wait_dispatched(store.max_offset, 5)
            return result

        topics = TopicConfigManager(str(tmp_path / "config"))
        topics.ensure_system_topic(TopicConfig("t", 1, 1))
        offsets = ConsumerOffsetManager(str(tmp_path / "config"))
        append([record.Message("t", f"m{i}".encode(), 0) for i in range(10)])
        pop = PopService(store=store, topics=topics, offsets=offsets,
                         notifier=QueueNotifier(asyncio.get_running_loop(), store.max_queue_offset),
                         append=append, group_config=lambda g: SubscriptionGroupConfig(g), cluster="c",
                         broker_name="b", metrics=PopMetrics(CollectorRegistry(), []))
        await pop.set_role(True)
        (batch,) = await pop.pop_batches(PopRequest("g", "t", 0, 10, 60_000, MATCH_ALL, 0), lambda: False)
        assert list(batch.offsets) == list(range(10)) and len(batch.recs) == 10
        assert pop.ack_batches("g", [("t", 0, batch.ck_id, [0, 1, 2, 3])]) == (4, [])
        (moved,), failed = pop.change_batches("g", [("t", 0, batch.ck_id, [4, 99])], 60_000)
        assert failed == [("t", 0, batch.ck_id, [99])] and list(moved.pending) == [4]
        assert offsets.query("g", "t", 0) == 4

        await pop.set_role(False)
        assert len(pop.inflight) == 0
        with pytest.raises(FailedPreconditionError):
            pop.ack_batches("g", [("t", 0, batch.ck_id, [5])])
        with pytest.raises(FailedPreconditionError):
            await pop.pop_batches(PopRequest("g", "t", 0, 10, 60_000, MATCH_ALL, 0), lambda: False)

        await pop.set_role(True)
        table = pop.inflight
        assert len(table) == 6 and table.cursors[("g", "t", 0)] == 10
        assert list(table.cks[batch.ck_id].pending) == [5, 6, 7, 8, 9]
        assert list(table.cks[moved.ck_id].pending) == [4]
        assert pop.ack_batches("g", [("t", 0, batch.ck_id, [4])]) == (0, [("t", 0, batch.ck_id, [4])])

        # Expire the old checkpoint: its five messages go to the retry topic (reconsume times 1).
        table.cks[batch.ck_id].deadline_ms = 0
        heapq.heappush(pop._heap, (0, batch.ck_id))
        assert pop.tick() == 5
        assert batch.ck_id not in table.cks and len(table) == 1
        retried = store.get_messages(retry_topic("g"), 0, 0, 32).messages
        assert [r.body for r in retried] == [f"m{i}".encode() for i in range(5, 10)]
        assert {r.reconsume_times for r in retried} == {1}  # delivered again as attempt 2
        assert {r.properties[record.PROPERTY_RETRY_TOPIC] for r in retried} == {"t"}
        await pop.stop()
    finally:
        store.shutdown()


@pytest.mark.asyncio
async def test_a_reset_is_replayed_from_the_revive_topic(tmp_path: Path) -> None:
    """An offset reset writes a RESET record: rebuilding the table from the revive topic (a
    restart, a promotion) ends at the reset position, not at the popped checkpoints before it."""
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=1 << 20))
    store.start()
    try:
        def append(msgs: Sequence[record.Message]) -> PutResult:
            result = store.append_messages(msgs)
            assert store.wait_dispatched(store.max_offset, 5)
            return result

        topics = TopicConfigManager(str(tmp_path / "config"))
        topics.ensure_system_topic(TopicConfig("t", 2, 2))
        offsets = ConsumerOffsetManager(str(tmp_path / "config"))
        append([record.Message("t", f"m{i}".encode(), 0) for i in range(10)])
        append([record.Message("t", f"n{i}".encode(), 1) for i in range(3)])
        pop = PopService(store=store, topics=topics, offsets=offsets,
                         notifier=QueueNotifier(asyncio.get_running_loop(), store.max_queue_offset),
                         append=append, group_config=lambda g: SubscriptionGroupConfig(g), cluster="c",
                         broker_name="b", metrics=PopMetrics(CollectorRegistry(), []))
        await pop.set_role(True)
        await pop.pop_batches(PopRequest("g", "t", 0, 10, 60_000, MATCH_ALL, 0), lambda: False)
        await pop.pop_batches(PopRequest("g", "t", 1, 3, 60_000, MATCH_ALL, 0), lambda: False)
        assert len(pop.inflight) == 13
        offsets.commit("g", "t", 0, 2)  # (what the reset RPC does before moving the pop positions)
        offsets.commit("g", "t", 1, 0)
        pop.reset_queues("g", "t", {0: 2, 1: 0, 7: 0})  # (queue 7 was never popped: no position)
        assert len(pop.inflight) == 0 and pop.inflight.cursors[("g", "t", 0)] == 2

        await pop.set_role(False)
        # As after a crash before the replay point moved past the checkpoints: all is replayed.
        offsets.commit(REVIVE_GROUP, pop.revive_topic, 0, 0)
        await pop.set_role(True)
        assert len(pop.inflight) == 0
        assert pop.inflight.cursors[("g", "t", 0)] == 2 and pop.inflight.cursors[("g", "t", 1)] == 0
        assert ("g", "t", 7) not in pop.inflight.cursors
        batches = await pop.pop_batches(PopRequest("g", "t", 0, 32, 60_000, MATCH_ALL, 0), lambda: False)
        assert {b.queue_id: list(b.offsets) for b in batches} == {0: list(range(2, 10)), 1: [0, 1, 2]}
        await pop.stop()
    finally:
        store.shutdown()

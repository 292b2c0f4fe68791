"""Streaming reads: Trigger.AvailableNow, restarts from the checkpoint, read limits and consumer
group offsets, against real broker processes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client.admin import Admin
from tests.integration.client.cluster import Cluster
from tests.spark.helpers import keys_of, produce, run_available_now, unique

pytestmark = pytest.mark.slow


def test_available_now_reads_exactly_n_then_restart_reads_only_new(spark: Any, shared: Cluster,
                                                                   tmp_path: Path) -> None:
    topic = unique("stream")
    shared.create_topic(topic, queues=2)
    first = produce(shared.namesrv, topic, {("broker-a", 0): 90, ("broker-a", 1): 3, ("broker-b", 0): 120})
    checkpoint = tmp_path / "checkpoint"
    opts = {"startingOffsets": "earliest"}

    batches = run_available_now(spark, shared.namesrv, topic, checkpoint, **opts)
    assert sorted(k for b in batches for k in b) == keys_of(first)

    second = produce(shared.namesrv, topic, {("broker-a", 1): 40, ("broker-b", 0): 5, ("broker-b", 1): 61},
                     start=1000)
    batches = run_available_now(spark, shared.namesrv, topic, checkpoint, **opts)
    got = sorted(k for b in batches for k in b)
    assert got == keys_of(second)  # only the new ones: no gap, no duplicate
    assert len(got) == len(set(got))

    assert run_available_now(spark, shared.namesrv, topic, checkpoint, **opts) == []


def test_starting_offsets_latest_skips_what_is_there(spark: Any, shared: Cluster, tmp_path: Path) -> None:
    topic = unique("stream-latest")
    shared.create_topic(topic, queues=1)
    produce(shared.namesrv, topic, {("broker-a", 0): 30, ("broker-b", 0): 30})
    checkpoint = tmp_path / "checkpoint"
    assert run_available_now(spark, shared.namesrv, topic, checkpoint) == []  # default: latest
    later = produce(shared.namesrv, topic, {("broker-b", 0): 12}, start=100)
    batches = run_available_now(spark, shared.namesrv, topic, checkpoint)
    assert sorted(k for b in batches for k in b) == keys_of(later)


def test_max_messages_per_trigger_is_respected(spark: Any, shared: Cluster, tmp_path: Path) -> None:
    topic = unique("stream-limit")
    shared.create_topic(topic, queues=2)
    sent = produce(shared.namesrv, topic, {("broker-a", 0): 170, ("broker-a", 1): 2, ("broker-b", 1): 55})
    limit = 60
    batches = run_available_now(spark, shared.namesrv, topic, tmp_path / "checkpoint",
                                startingOffsets="earliest", maxMessagesPerTrigger=limit)
    sizes = [len(b) for b in batches]
    assert all(size <= limit for size in sizes), sizes
    assert len(batches) == math.ceil(len(sent) / limit), sizes
    assert sorted(k for b in batches for k in b) == keys_of(sent)
    # Within a queue, batches follow each other without gaps or overlaps.
    seen: dict[tuple[str, int], int] = {}
    for batch in batches:
        for broker, queue, offset in batch:
            assert offset == seen.get((broker, queue), -1) + 1
            seen[(broker, queue)] = offset


def test_group_offsets_are_committed_and_resumed(spark: Any, shared: Cluster, tmp_path: Path) -> None:
    topic = unique("stream-group")
    group = unique("spark-group")
    shared.create_topic(topic, queues=2)
    first = produce(shared.namesrv, topic, {("broker-a", 0): 50, ("broker-a", 1): 20, ("broker-b", 1): 33})
    batches = run_available_now(spark, shared.namesrv, topic, tmp_path / "ck1", startingOffsets="earliest",
                                group=group, maxMessagesPerTrigger=40)
    assert sorted(k for b in batches for k in b) == keys_of(first)

    with Admin(shared.namesrv) as admin:
        progress = admin.consumer_progress(group, topic)
    assert {str(p.queue): (p.consumer_offset, p.lag) for p in progress} == {
        f"{topic}@broker-a:0": (50, 0), f"{topic}@broker-a:1": (20, 0),
        f"{topic}@broker-b:0": (0, 0), f"{topic}@broker-b:1": (33, 0)}

    second = produce(shared.namesrv, topic, {("broker-b", 0): 9, ("broker-a", 1): 4}, start=500)
    with Admin(shared.namesrv) as admin:
        assert sum(p.lag for p in admin.consumer_progress(group, topic)) == len(second)

    # A new query (fresh checkpoint) starting from the group's offsets reads only the new ones.
    batches = run_available_now(spark, shared.namesrv, topic, tmp_path / "ck2", startingOffsets="group",
                                group=group)
    assert sorted(k for b in batches for k in b) == keys_of(second)
    with Admin(shared.namesrv) as admin:
        assert sum(p.lag for p in admin.consumer_progress(group, topic)) == 0

"""Batch reads with a real SparkSession against real broker processes (two broker groups)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.integration.client.cluster import Cluster
from tests.spark.helpers import keys_of, produce, reader, rows, unique, where

pytestmark = pytest.mark.slow

COUNTS = {("broker-a", 0): 130, ("broker-a", 1): 0, ("broker-a", 2): 41,
          ("broker-b", 0): 7, ("broker-b", 1): 200, ("broker-b", 2): 1}


@pytest.fixture(scope="module")
def produced(shared_cluster: Cluster) -> tuple[str, list[Any], int, int]:
    topic = unique("batch")
    shared_cluster.create_topic(topic, queues=3)
    before = int(time.time() * 1000)
    sent = produce(shared_cluster.namesrv, topic, COUNTS)
    return topic, sent, before, int(time.time() * 1000)


def test_batch_read_returns_exactly_the_produced_messages(spark: Any, shared: Cluster,
                                                          produced: tuple[str, list[Any], int, int]) -> None:
    topic, sent, before, after = produced
    df = reader(spark, shared.namesrv, topic)
    assert df.rdd.getNumPartitions() == 5  # one per non-empty queue
    got = rows(df)
    assert sorted(where(r) for r in got) == keys_of(sent)
    by_where = {s.where: s for s in sent}
    for r in got:
        s = by_where[where(r)]
        assert r["topic"] == topic
        assert r["body"] == s.body
        assert r["msg_id"] == s.msg_id
        assert r["tags"] == s.tags
        assert r["keys"] == s.keys
        assert r["properties"] == s.properties
        assert before - 1000 <= r["born_ms"] <= r["store_ms"] <= after + 1000
    # Offsets are consecutive from 0 in every queue.
    for (broker, queue), count in COUNTS.items():
        offsets = sorted(r["queue_offset"] for r in got
                         if (r["broker_name"], r["queue_id"]) == (broker, queue))
        assert offsets == list(range(count))


def test_starting_and_ending_offsets_select_ranges(spark: Any, shared: Cluster,
                                                   produced: tuple[str, list[Any], int, int]) -> None:
    topic, sent, _, _ = produced
    starting = {topic: {"broker-a": {"0": 100, "2": -1}, "broker-b": {"1": 150}}}
    ending = {topic: {"broker-a": {"0": 120}, "broker-b": {"1": -1, "0": 3}}}
    df = reader(spark, shared.namesrv, topic, startingOffsets=json.dumps(starting),
                endingOffsets=json.dumps(ending))
    got = sorted(where(r.asDict()) for r in df.select("broker_name", "queue_id", "queue_offset").collect())

    lows = {("broker-a", 0): 100, ("broker-a", 2): 41, ("broker-b", 1): 150}
    highs = {("broker-a", 0): 120, ("broker-b", 0): 3}

    def wanted(s: Any) -> bool:
        queue = (s.broker_name, s.queue_id)
        return bool(lows.get(queue, 0) <= s.queue_offset < highs.get(queue, 1 << 40))

    assert got == keys_of(s for s in sent if wanted(s))


def test_tags_filter_and_small_partitions(spark: Any, shared: Cluster,
                                          produced: tuple[str, list[Any], int, int]) -> None:
    topic, sent, _, _ = produced
    df = reader(spark, shared.namesrv, topic, tags="t1 || t2", maxMessagesPerPartition=50)
    got = sorted(where(r.asDict()) for r in df.select("broker_name", "queue_id", "queue_offset").collect())
    assert got == keys_of(s for s in sent if s.tags in ("t1", "t2"))
    assert got  # the filter matched something
    split = reader(spark, shared.namesrv, topic, maxMessagesPerPartition=50)
    assert split.rdd.getNumPartitions() == 3 + 1 + 1 + 4 + 1


def test_several_topics_and_sql(spark: Any, shared: Cluster,
                                produced: tuple[str, list[Any], int, int]) -> None:
    topic, sent, _, _ = produced
    other = unique("batch-other")
    shared.create_topic(other, queues=1)
    more = produce(shared.namesrv, other, {("broker-b", 0): 25})
    reader(spark, shared.namesrv, f"{topic},{other}").createOrReplaceTempView("msgs")
    counts = {r["topic"]: (r["n"], r["bytes"]) for r in spark.sql(
        "SELECT topic, count(*) AS n, sum(length(body)) AS bytes FROM msgs GROUP BY topic").collect()}
    assert counts == {topic: (len(sent), sum(len(s.body) for s in sent)),
                      other: (len(more), sum(len(s.body) for s in more))}


def test_problems_are_reported_with_their_cause(spark: Any, shared: Cluster,
                                               produced: tuple[str, list[Any], int, int]) -> None:
    topic, _, _, _ = produced
    with pytest.raises(Exception, match=r"unknown pocketmq read option.*startingoffset"):
        reader(spark, shared.namesrv, topic, startingOffset="earliest").count()
    with pytest.raises(Exception, match="is unknown to the NameServer"):
        reader(spark, shared.namesrv, unique("no-such-topic")).count()
    with pytest.raises(Exception, match="fixed schema"):
        (spark.read.format("pocketmq").schema("body binary").option("namesrv", shared.namesrv)
         .option("topic", topic).load().count())

"""Writing DataFrames to topics (batch and streaming) and reading them back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructField, StructType

from tests.integration.client.cluster import Cluster
from tests.spark.helpers import produce, reader, unique

pytestmark = pytest.mark.slow

WRITE_SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("body", BinaryType()),
    StructField("tags", StringType()),
    StructField("keys", ArrayType(StringType())),
    StructField("properties", MapType(StringType(), StringType())),
])


def _content(rows: list[Any]) -> Counter[tuple[Any, ...]]:
    return Counter((r["body"], r["tags"], r["keys"], tuple(sorted((r["properties"] or {}).items())))
                   for r in rows)


def test_batch_write_then_read_back_equal(spark: Any, shared: Cluster) -> None:
    main, side = unique("write-main"), unique("write-side")
    shared.create_topic(main, queues=3)
    shared.create_topic(side, queues=1)
    data = []
    for i in range(700):
        data.append((
            side if i % 7 == 0 else None,  # null: the topic option
            (b"payload-%d-" % i) * (1 + i % 40),
            f"tag{i % 3}" if i % 2 else None,
            [f"order-{i}", f"user-{i % 11}"] if i % 3 else None,
            {"i": str(i), "even": str(i % 2 == 0)} if i % 4 else None,
        ))
    df = spark.createDataFrame(data, WRITE_SCHEMA).repartition(3)
    df.write.format("pocketmq").option("namesrv", shared.namesrv).option("topic", main) \
        .option("sendBatchSize", 64).mode("append").save()

    def expected(topic: str) -> Counter[tuple[Any, ...]]:
        return Counter((body, tags, " ".join(keys) if keys else None, tuple(sorted((props or {}).items())))
                       for t, body, tags, keys, props in data if (t or main) == topic)

    for topic in (main, side):
        got = reader(spark, shared.namesrv, topic).select("body", "tags", "keys", "properties").collect()
        assert _content([r.asDict() for r in got]) == expected(topic)
    # Round-robin batches reach every queue of both broker groups.
    spread = reader(spark, shared.namesrv, main).groupBy("broker_name", "queue_id").count().collect()
    assert len(spread) == 6


def test_streaming_write_copies_a_topic(spark: Any, shared: Cluster, tmp_path: Path) -> None:
    source, target = unique("copy-src"), unique("copy-dst")
    shared.create_topic(source, queues=2)
    shared.create_topic(target, queues=2)
    sent = produce(shared.namesrv, source, {("broker-a", 0): 150, ("broker-b", 1): 77})
    stream = (spark.readStream.format("pocketmq").option("namesrv", shared.namesrv).option("topic", source)
              .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", 100).load())
    query = (stream.select("body", "tags", "keys", "properties")
             .writeStream.format("pocketmq").option("namesrv", shared.namesrv).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    got = reader(spark, shared.namesrv, target).select("body", "tags", "keys", "properties").collect()
    assert _content([r.asDict() for r in got]) == Counter(
        (s.body, s.tags, s.keys, tuple(sorted(s.properties.items()))) for s in sent)


def test_a_status_other_than_put_ok_fails_the_task_with_the_status(spark: Any, shared: Cluster) -> None:
    topic = unique("write-bad")
    shared.create_topic(topic, queues=1)
    df = spark.createDataFrame([(b"ok",), (b"",)], "body binary")  # the broker refuses an empty body
    with pytest.raises(Exception, match="MESSAGE_ILLEGAL"):
        df.write.format("pocketmq").option("namesrv", shared.namesrv).option("topic", topic) \
            .mode("append").save()


def test_not_durable_is_a_failure_too(spark: Any, own_cluster: Cluster) -> None:
    """A SYNC_MASTER without a slave stores the message but answers SLAVE_NOT_AVAILABLE: the
    writer does not count that as written."""
    own_cluster.start_broker("broker-sync", 0, role="SYNC_MASTER")
    topic = unique("write-sync")
    own_cluster.create_topic(topic, queues=1)
    df = spark.createDataFrame([(b"m%d" % i,) for i in range(5)], "body binary")
    with pytest.raises(Exception, match="SLAVE_NOT_AVAILABLE"):
        df.write.format("pocketmq").option("namesrv", own_cluster.namesrv).option("topic", topic) \
            .mode("append").save()


def test_write_schema_problems_are_reported_before_sending(spark: Any, shared: Cluster) -> None:
    df = spark.createDataFrame([("x", 1)], "bdy string, n int")
    with pytest.raises(Exception, match=r"'body' column .* is required.*unknown column.*bdy, n"):
        df.write.format("pocketmq").option("namesrv", shared.namesrv).option("topic", "t") \
            .mode("append").save()
    with pytest.raises(Exception, match="cannot be overwritten"):
        spark.createDataFrame([("x",)], "body string").write.format("pocketmq") \
            .option("namesrv", shared.namesrv).option("topic", "t").mode("overwrite").save()

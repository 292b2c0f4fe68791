"""The example pipeline (pocketmq/spark/examples/events_pipeline.py) end to end: events in a
topic -> windowed aggregates in Parquet and in a results topic."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client.message import Message
from pocketmq.client.producer import Producer
from pocketmq.spark.examples import events_pipeline
from tests.integration.client.cluster import Cluster
from tests.spark.helpers import reader, unique

pytestmark = pytest.mark.slow

BASE = 1_800_000_000_000  # ms, a multiple of the 10 s window


def test_pipeline_writes_window_aggregates_to_parquet_and_a_topic(spark: Any, shared: Cluster,
                                                                  tmp_path: Path) -> None:
    events_topic, results_topic = unique("events"), unique("event-stats")
    args = events_pipeline.parse_args([
        "--namesrv", shared.namesrv, "--events-topic", events_topic, "--results-topic", results_topic,
        "--output", str(tmp_path / "stats"), "--checkpoint", str(tmp_path / "checkpoints"),
        "--window", "10 seconds", "--watermark", "5 seconds", "--available-now"])
    events_pipeline.create_topics(shared.namesrv, [events_topic, results_topic], queues=2)

    expected: dict[tuple[int, str], list[Any]] = defaultdict(lambda: [0, 0.0, set()])
    messages = []
    for i in range(600):
        ts = BASE + (i * 53) % 30_000  # three windows: [0, 10), [10, 20), [20, 30) s
        kind = events_pipeline.EVENT_TYPES[i % 3]
        user, amount = f"u{i % 7}", float(i % 10)
        messages.append(Message(events_topic, json.dumps({"user": user, "type": kind, "amount": amount,
                                                          "ts": ts}).encode()))
        agg = expected[(BASE + (ts - BASE) // 10_000 * 10_000, kind)]
        agg[0] += 1
        agg[1] += amount
        agg[2].add(user)
    # A later event moves the watermark past the three windows (its own window stays open).
    messages.append(Message(events_topic, json.dumps({"user": "late", "type": "view", "amount": 1,
                                                      "ts": BASE + 60_000}).encode()))
    with Producer(shared.namesrv) as producer:
        for start in range(0, len(messages), 100):
            producer.send_batch(messages[start:start + 100])

    events_pipeline.run(spark, args)

    want = {k: (n, amount, len(users)) for k, (n, amount, users) in expected.items()}
    parquet = spark.read.parquet(str(tmp_path / "stats")).selectExpr(
        "unix_millis(window_start) AS start", "unix_millis(window_end) AS end", "type", "events", "amount",
        "users")
    rows = parquet.collect()
    assert {(r.start, r.type): (r.events, r.amount, r.users) for r in rows} == want
    assert all(r.end - r.start == 10_000 for r in rows)

    published = reader(spark, shared.namesrv, results_topic).select("body", "tags").collect()
    got = {}
    for r in published:
        doc = json.loads(r.body)
        assert r.tags == doc["type"]
        start = int(spark.sql(f"SELECT unix_millis(timestamp'{doc['window_start'].rstrip('Z')}')")
                    .first()[0])
        got[(start, doc["type"])] = (doc["events"], doc["amount"], doc["users"])
    assert got == want

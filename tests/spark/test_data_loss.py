"""failOnDataLoss: offsets deleted by retention make reads fail (default) or skip ahead.

The broker deletes full commit-log segments whose file is older than ``fileReservedTime``
hours (checked every ``cleanResourceInterval`` ms). The test runs a broker with 64 KiB
segments and a 200 ms clean interval and ages the old segment files with ``os.utime`` - the
file's mtime is what the broker looks at - so retention runs within a second.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.client.cluster import Broker, Cluster
from tests.spark.helpers import produce, queue_offset, reader, run_available_now, unique
from tests.support import wait_until

pytestmark = pytest.mark.slow

SEGMENT = 64 * 1024
RETENTION_FLAGS = (
    "--mapped-file-size-commit-log", str(SEGMENT), "--max-message-size", "16384",
    "--file-reserved-time", "1", "--clean-resource-interval", "200",
    "--flush-interval-commit-log", "100", "--flush-commit-log-thorough-interval", "200",
)


def expire_old_segments(broker: Broker) -> None:
    """Make every commit-log segment but the newest look two hours old and wait until the
    broker has deleted them."""
    directory = broker.store_dir / "commitlog"
    segments = sorted(directory.iterdir())
    assert len(segments) >= 3, segments
    old = time.time() - 2 * 3600
    for path in segments[:-1]:
        os.utime(path, (old, old))
    wait_until(lambda: sorted(directory.iterdir()) == segments[-1:], 20,
               message="retention deleted the old segments")


def settled_min_offset(broker: Broker, topic: str) -> int:
    """The queue's min offset once retention has moved it and it stays put (the broker corrects
    it just after deleting the files)."""
    seen: list[int] = []

    def settled() -> int:
        seen.append(queue_offset(broker.addr, "GetMinOffset", topic, 0))
        return seen[-1] if len(seen) >= 2 and seen[-1] == seen[-2] > 0 else 0

    return wait_until(settled, 20, interval=0.5, message="the queue's min offset settles")


def test_fail_on_data_loss(spark: Any, own_cluster: Cluster, tmp_path: Path) -> None:
    broker = own_cluster.start_broker("broker-a", 0, *RETENTION_FLAGS)
    topic = unique("loss")
    own_cluster.create_topic(topic, queues=1)
    ns = own_cluster.namesrv
    checkpoint = tmp_path / "checkpoint"

    produce(ns, topic, {("broker-a", 0): 10}, body_size=1024)
    batches = run_available_now(spark, ns, topic, checkpoint, startingOffsets="earliest")
    assert sum(len(b) for b in batches) == 10
    produce(ns, topic, {("broker-a", 0): 240}, start=10, body_size=1024)

    expire_old_segments(broker)
    min_offset = settled_min_offset(broker, topic)
    max_offset = queue_offset(broker.addr, "GetMaxOffset", topic, 0)
    assert 10 < min_offset < max_offset == 250

    # Batch: explicit offsets that are gone fail, unless failOnDataLoss=false.
    from_zero = json.dumps({topic: {"broker-a": {"0": 0}}})
    with pytest.raises(Exception, match=rf"offset 0 was requested.*earliest retained offset is {min_offset}"
                                        r".*failOnDataLoss=false"):
        reader(spark, ns, topic, startingOffsets=from_zero).count()
    assert reader(spark, ns, topic, startingOffsets=from_zero, failOnDataLoss="false").count() == \
        max_offset - min_offset
    assert reader(spark, ns, topic).count() == max_offset - min_offset  # earliest = what is retained

    # Streaming: the checkpoint says offset 10, which is gone.
    with pytest.raises(Exception, match=r"offset 10 was to be read.*deleted by retention"):
        run_available_now(spark, ns, topic, checkpoint, startingOffsets="earliest")
    batches = run_available_now(spark, ns, topic, checkpoint, startingOffsets="earliest",
                                failOnDataLoss="false")
    got = sorted(offset for b in batches for _, _, offset in b)
    assert got == list(range(min_offset, max_offset))

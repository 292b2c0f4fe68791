"""readFromSlave=fallback: when the master of a broker group is killed, planning and reads go on
from its slave (commit-log replication keeps the slave's queues equal to the master's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.client.cluster import Cluster
from tests.spark.helpers import keys_of, produce, queue_offset, reader, run_available_now, unique
from tests.support import wait_until

pytestmark = pytest.mark.slow


def test_reading_continues_from_the_slave_when_the_master_is_killed(spark: Any, own_cluster: Cluster,
                                                                      tmp_path: Path) -> None:
    master = own_cluster.start_broker("broker-a", 0)
    slave = own_cluster.start_broker("broker-a", 1)
    topic = unique("ha")
    own_cluster.create_topic(topic, queues=2)
    ns = own_cluster.namesrv

    def replicated() -> bool:
        return all(queue_offset(slave.addr, "GetMaxOffset", topic, q)
                   == queue_offset(master.addr, "GetMaxOffset", topic, q) for q in (0, 1))

    first = produce(ns, topic, {("broker-a", 0): 70, ("broker-a", 1): 50})
    checkpoint = tmp_path / "checkpoint"
    batches = run_available_now(spark, ns, topic, checkpoint, startingOffsets="earliest", group="ha-group")
    assert sorted(k for b in batches for k in b) == keys_of(first)

    second = produce(ns, topic, {("broker-a", 0): 33, ("broker-a", 1): 41}, start=1000)
    wait_until(replicated, 20, message="the slave has every message", ignore=(Exception,))

    # readFromSlave=preferred reads from the slave while the master is up.
    gets = (master.status().get_total, slave.status().get_total)
    assert reader(spark, ns, topic, readFromSlave="preferred").count() == len(first) + len(second)
    assert master.status().get_total == gets[0]
    assert slave.status().get_total - gets[1] == len(first) + len(second)

    master.proc.kill()

    # The stream resumes from its checkpoint: offsets and messages now come from the slave.
    batches = run_available_now(spark, ns, topic, checkpoint, startingOffsets="earliest", group="ha-group",
                                readFromSlave="fallback")
    assert sorted(k for b in batches for k in b) == keys_of(second)

    got = reader(spark, ns, topic).select("broker_name", "queue_id", "queue_offset", "body").collect()
    assert sorted((r.broker_name, r.queue_id, r.queue_offset) for r in got) == keys_of(first + second)
    bodies = {s.where: s.body for s in first + second}
    assert all(bodies[(r.broker_name, r.queue_id, r.queue_offset)] == r.body for r in got)

    with pytest.raises(Exception, match="cannot get the min offset"):
        reader(spark, ns, topic, readFromSlave="never").count()

"""Producing known messages and running queries for the Spark tests."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.client.message import Message, MessageQueue, SendStatus
from pocketmq.client.producer import Producer

_counter = itertools.count()


@dataclasses.dataclass(frozen=True)
class Sent:
    """A message the test produced and where the broker stored it."""

    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    tags: str | None
    keys: str | None
    properties: dict[str, str]

    @property
    def where(self) -> tuple[str, int, int]:
        return (self.broker_name, self.queue_id, self.queue_offset)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}"


def make_message(topic: str, i: int, *, body_size: int | None = None, tag_every: int = 2) -> Message:
    """Message ``i``: bodies of varied sizes (inline and long Arrow views, several KiB), a tag on
    every ``tag_every``-th, keys and properties on some."""
    size = body_size if body_size is not None else (5, 12, 13, 300, 4096)[i % 5]
    body = (f"{topic}#{i}:".encode() * (size // 4 + 1))[:size] or b"x"
    return Message(topic, body, tags=f"t{i % 4}" if i % tag_every == 0 else "",
                   keys=[f"k{i}", f"id-{i}"] if i % 3 == 0 else "",
                   properties={"n": str(i), "src": "test"} if i % 5 == 0 else None)


def produce(namesrv: str, topic: str, counts: Mapping[tuple[str, int], int], *, start: int = 0,
            batch: int = 50, body_size: int | None = None) -> list[Sent]:
    """Send ``counts[(broker, queue)]`` messages to each queue (batches of ``batch``)."""
    out: list[Sent] = []
    i = start
    with Producer(namesrv, send_timeout=10) as producer:
        for (broker, queue_id), count in sorted(counts.items()):
            left = count
            while left > 0:
                n = min(batch, left)
                msgs = [make_message(topic, i + j, body_size=body_size) for j in range(n)]
                result = producer.send_batch(msgs, queue=MessageQueue(topic, broker, queue_id))
                assert result.status is SendStatus.SEND_OK, result
                for j, m in enumerate(msgs):
                    out.append(Sent(topic, broker, queue_id, result.queue_offset + j, result.msg_ids[j],
                                    m.body, m.tags or None, m.keys or None, dict(m.properties)))
                i += n
                left -= n
    return out


def reader(spark: Any, namesrv: str, topic: str, **options: object) -> Any:
    r = spark.read.format("pocketmq").option("namesrv", namesrv).option("topic", topic)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def rows(df: Any) -> list[dict[str, Any]]:
    """Collected rows (timestamps as epoch milliseconds)."""
    out = df.selectExpr("*", "unix_millis(born_timestamp) AS born_ms",
                        "unix_millis(store_timestamp) AS store_ms")
    return [r.asDict(recursive=True) for r in out.collect()]


def where(row: Mapping[str, Any]) -> tuple[str, int, int]:
    return (row["broker_name"], row["queue_id"], row["queue_offset"])


def run_available_now(spark: Any, namesrv: str, topic: str, checkpoint: Path, *, timeout: float = 120,
                      **options: object) -> list[list[tuple[str, int, int]]]:
    """Run a streaming query with Trigger.AvailableNow from ``checkpoint``; returns the
    (broker, queue, offset) of each micro-batch's rows."""
    batches: list[list[tuple[str, int, int]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(sorted(where(r.asDict()) for r in
                              df.select("broker_name", "queue_id", "queue_offset").collect()))

    r = spark.readStream.format("pocketmq").option("namesrv", namesrv).option("topic", topic)
    for key, value in options.items():
        r = r.option(key, str(value))
    query = (r.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        finished = query.awaitTermination(timeout)
        assert finished, f"the query did not finish within {timeout}s"
    finally:
        query.stop()
    error = query.exception()
    if error is not None:
        raise error
    return [b for b in batches if b]


def queue_offset(addr: str, method: str, topic: str, queue_id: int) -> int:
    with grpc.insecure_channel(addr) as channel:
        reply = getattr(broker_pb2_grpc.BrokerStub(channel), method)(
            broker_pb2.QueueRequest(topic=topic, queue_id=queue_id), timeout=5)
        return int(reply.offset)


def keys_of(sent: Iterable[Sent]) -> list[tuple[str, int, int]]:
    return sorted(s.where for s in sent)

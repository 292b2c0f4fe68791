"""PocketMQ's own consumer sends a failing message back to ``%RETRY%<group>`` with backoff (the
delay level of its reconsume count) and moves on; after ``max_reconsume_times`` the message goes
to ``%DLQ%<group>``. One broker with short delay levels (level 3 = 1 s, level 4 = 2 s)."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator

import pytest

from pocketmq import AsyncConsumer, AsyncProducer, Message, ReceivedMessage
from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup, async_wait_until

FAST = {
    "heartbeat_interval": 0.5,
    "rebalance_interval": 0.5,
    "commit_interval": 0.3,
    "long_poll_timeout": 1.0,
    "request_timeout": 2.0,
}


@pytest.fixture(scope="module")
def retry_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("redelivery")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a", 0, "--message-delay-level", "1s 1s 1s 2s 3s 4s 5s")
        yield cluster
    finally:
        group.stop_all()


@pytest.mark.asyncio
async def test_failing_message_goes_to_the_retry_topic_and_the_queue_moves_on(retry_cluster: Cluster) -> None:
    topic, group = "r-poison", "g-retry"
    retry_cluster.create_topic(topic, 1)
    seen: dict[str, list[float]] = collections.defaultdict(list)
    done: list[str] = []

    async def handler(msg: ReceivedMessage) -> None:
        seen[msg.text].append(time.monotonic())
        if msg.text == "poison" or (msg.text == "flaky" and len(seen["flaky"]) < 3):
            raise RuntimeError(f"cannot handle {msg.text}")
        done.append(msg.text)

    consumer = AsyncConsumer(
        group, retry_cluster.namesrv, consume_from="first", max_reconsume_times=2, **FAST
    )  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start(handler)
    try:
        async with AsyncProducer(retry_cluster.namesrv) as producer:
            for body in ("ok1", "flaky", "poison", "ok2"):
                await producer.send(Message(topic, body, tags="x"))
        await async_wait_until(
            lambda: "flaky" in done and len(seen["poison"]) == 3,
            30,
            message="flaky handled, poison tried three times",
        )
        await async_wait_until(lambda: "%RETRY%" + group in consumer.subscriptions, 1, message="retry topic")
    finally:
        await consumer.close()
    # The queue moved on: ok2 was handled before the failed messages came back.
    assert done[:2] == ["ok1", "ok2"] and done[2:] == ["flaky"]
    flaky = seen["flaky"]
    gap1, gap2 = flaky[1] - flaky[0], flaky[2] - flaky[1]
    assert gap1 >= 0.9 and gap2 >= 1.9 and gap2 > gap1  # levels 3 and 4: 1 s, then 2 s

    dlq = AsyncConsumer("g-retry-dlq-reader", retry_cluster.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    dlq.subscribe("%DLQ%" + group)
    await dlq.start()
    try:
        dead = await dlq.receive(10)
    finally:
        await dlq.close()
    assert dead is not None and dead.text == "poison" and dead.properties["RETRY_TOPIC"] == topic
    assert dead.tags == "x" and dead.properties["RECONSUME_TIME"] == "3"

"""The offset a queue commits: the first message not processed yet (at-least-once)."""

from __future__ import annotations

import pytest

from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom, _ProcessQueue
from pocketmq.client.message import MessageQueue
from pocketmq.errors import ClientClosedError, InvalidArgumentError


@pytest.mark.asyncio
async def test_commit_offset_follows_processing() -> None:
    pq = _ProcessQueue(MessageQueue("t", "b", 0), 2)
    pq.next_offset = 10
    assert pq.commit_offset() == 10
    pq.inflight.extend([10, 12, 15])  # 11, 13, 14 were filtered out by tag
    pq.next_offset = 16
    assert pq.commit_offset() == 10  # nothing processed yet: restart at 10
    pq.ack(10)
    assert pq.commit_offset() == 12
    pq.ack(15)  # acks are cumulative within a queue (messages are handled in order)
    assert pq.commit_offset() == 16


def test_consumer_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgumentError):
        AsyncConsumer("")
    with pytest.raises(InvalidArgumentError):
        AsyncConsumer("g", pull_batch_size=0)
    with pytest.raises(InvalidArgumentError):
        AsyncConsumer("g", rebalance_interval=0)
    c = AsyncConsumer("g", "h:1", consume_from="timestamp", consume_timestamp=1.5)
    assert c.consume_from is ConsumeFrom.TIMESTAMP and c.consume_timestamp_ms == 1500
    with pytest.raises(InvalidArgumentError):
        c.subscribe("t", "a b")
    c.subscribe("t", "a || b")
    assert c.subscriptions == {"t": "a || b"}
    assert c.assignment() == frozenset()


@pytest.mark.asyncio
async def test_consumer_lifecycle_errors() -> None:
    c = AsyncConsumer("g", "127.0.0.1:1")
    with pytest.raises(InvalidArgumentError):
        await c.start()  # nothing subscribed
    with pytest.raises(ClientClosedError):
        await c.rebalance()
    await c.close()
    assert await c.receive(0.1) is None
    with pytest.raises(ClientClosedError):
        await c.start()

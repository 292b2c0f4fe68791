"""The offset a queue commits: the first message not processed yet (at-least-once)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom, ready_capacity
from pocketmq.client.message import MessageQueue, ReceivedMessage
from pocketmq.client.offsets import OffsetTracker
from pocketmq.client.subscription import BatchQueue, ProcessQueue
from pocketmq.errors import ClientClosedError, InvalidArgumentError


@pytest.mark.asyncio
async def test_commit_offset_follows_processing() -> None:
    pq = ProcessQueue(MessageQueue("t", "b", 0), 2)
    pq.next_offset = 10
    assert pq.commit_offset() == 10
    pq.add_inflight([10, 12, 15])  # 11, 13, 14 were filtered out by tag
    pq.next_offset = 16
    assert pq.commit_offset() == 10  # nothing processed yet: restart at 10
    pq.ack(10)
    assert pq.commit_offset() == 12
    pq.ack(15)  # acks are cumulative within a queue (messages are handled in order)
    assert pq.commit_offset() == 16
    # Batches are tracked whole: a gap-free one as a range, another with gaps as a list.
    pq.add_inflight(range(16, 48))
    pq.add_inflight([])
    pq.add_inflight([48, 50, 51])
    pq.next_offset = 52
    assert pq.commit_offset() == 16
    pq.ack(15)  # already processed: nothing moves
    assert pq.commit_offset() == 16
    pq.ack(20)
    assert pq.commit_offset() == 21
    pq.ack(20)
    assert pq.commit_offset() == 21
    pq.ack(48)  # the rest of the first batch and the first of the next
    assert pq.commit_offset() == 50 and len(pq.inflight) == 1
    pq.ack(49)  # filtered out: 50 is still the first not processed
    assert pq.commit_offset() == 50
    pq.ack(1000)
    assert pq.commit_offset() == 52 and not pq.inflight


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


def _msg(queue: MessageQueue, offset: int) -> ReceivedMessage:
    return ReceivedMessage(topic=queue.topic, body=b"", tags="", keys=(), properties={}, queue=queue,
                           queue_offset=offset, commit_log_offset=0, msg_id="", born_timestamp=0,
                           store_timestamp=0, born_host="", store_host="")


@pytest.mark.asyncio
async def test_receive_acks_on_the_queue_state_a_message_came_from() -> None:
    """A queue that moves away and comes back gets a new state: what is still buffered from
    before is not handed out, and the message returned before is not acked on the new state
    (that would count messages of the new state as processed before they were delivered)."""
    c = AsyncConsumer("g", "127.0.0.1:1")
    c._started = True
    ready: asyncio.Queue[tuple[ProcessQueue, list[ReceivedMessage]] | None] = asyncio.Queue()
    c._ready = ready
    q = MessageQueue("t", "b", 0)
    old, new = ProcessQueue(q, 1), ProcessQueue(q, 1)
    old.add_inflight(range(5, 8))
    ready.put_nowait((old, [_msg(q, 5), _msg(q, 6), _msg(q, 7)]))
    first = await c.receive(0.1)
    assert first is not None and first.queue_offset == 5
    old.dropped = True  # rebalanced away and back: 5 is re-delivered by the new state
    c._pqs[q] = new
    new.next_offset = 8
    new.add_inflight([5, 6])
    ready.put_nowait((new, [_msg(q, 5), _msg(q, 6)]))
    again = await c.receive(0.1)
    assert again is not None and again.queue_offset == 5 and new.commit_offset() == 5
    third = await c.receive(0.1)
    assert third is not None and third.queue_offset == 6 and new.commit_offset() == 6
    assert await c.receive(0.05) is None  # nothing buffered: times out, and 6 counts as processed
    assert new.commit_offset() == 8 and c.consumed == 3
    ready.put_nowait(None)  # close() wakes receivers with None
    assert await c.receive(1.0) is None


@pytest.mark.asyncio
async def test_a_pull_carries_a_commit_only_when_no_other_is_in_flight() -> None:
    pq = ProcessQueue(MessageQueue("t", "b", 0), 2)
    pq.next_offset = 8
    assert OffsetTracker.pull_commit(pq) == 8 and pq.pull_commit_unconfirmed
    OffsetTracker.pull_committed(pq, 8, from_master=False)  # a slave ignores it
    assert not pq.pull_commit_unconfirmed and pq.committed == -1
    assert OffsetTracker.pull_commit(pq) == 8
    OffsetTracker.pull_committed(pq, 8, from_master=True)
    assert pq.committed == 8 and OffsetTracker.pull_commit(pq) == -1  # unchanged: nothing to commit
    pq.next_offset = 12
    gate = asyncio.Event()
    pq.commit_task = asyncio.ensure_future(gate.wait())  # type: ignore[assignment]
    assert OffsetTracker.pull_commit(pq) == -1  # an UpdateConsumerOffset call is in flight
    gate.set()
    await pq.commit_task
    assert OffsetTracker.pull_commit(pq) == 12


@pytest.mark.asyncio
async def test_a_newer_reset_generation_stops_the_topics_queues_from_committing() -> None:
    from pocketmq.client.subscription import SubscriptionState

    state = SubscriptionState()
    restarted: list[str] = []
    state.on_reset = restarted.append
    state.learn_reset("t", 5)  # learned before owning anything (a new member): nothing to restart
    assert restarted == [] and state.reset_generations == {"t": 5}
    mine, other = ProcessQueue(MessageQueue("t", "b", 0), 2), ProcessQueue(MessageQueue("u", "b", 0), 2)
    state.pqs = {mine.queue: mine, other.queue: other}
    mine.next_offset = other.next_offset = 7
    state.learn_reset("t", 5)  # not newer
    assert restarted == [] and not mine.dropped
    state.learn_reset("t", 9)
    assert restarted == ["t"] and state.reset_generations["t"] == 9
    assert mine.dropped and mine.reset and not other.dropped
    assert OffsetTracker.pull_commit(mine) == -1  # the old position is never committed again
    assert OffsetTracker.pull_commit(other) == 7


@pytest.mark.asyncio
async def test_receive_batch_hands_out_pulled_batches_and_acks_them_at_the_next_call() -> None:
    """receive_batch() returns one queue's messages in order (a whole pulled batch, or at most
    max_messages of it); they count as processed at the next call, mixed with receive()."""
    c = AsyncConsumer("g", "127.0.0.1:1")
    c._started = True
    ready: asyncio.Queue[tuple[ProcessQueue, list[ReceivedMessage]] | None] = asyncio.Queue()
    c._ready = ready
    q0, q1 = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    a, b = ProcessQueue(q0, 1), ProcessQueue(q1, 1)
    a.next_offset, b.next_offset = 4, 2
    a.add_inflight(range(4))
    b.add_inflight([0, 1])
    ready.put_nowait((a, [_msg(q0, o) for o in range(4)]))
    ready.put_nowait((b, [_msg(q1, o) for o in range(2)]))
    with pytest.raises(InvalidArgumentError):
        await c.receive_batch(0)
    first = await c.receive_batch(3, 0.1)
    assert [m.queue_offset for m in first] == [0, 1, 2] and a.commit_offset() == 0
    rest = await c.receive_batch(None, 0.1)  # the rest of a's batch before b's
    assert [(m.queue.queue_id, m.queue_offset) for m in rest] == [(0, 3)] and a.commit_offset() == 3
    single = await c.receive(0.1)  # acks a's batch, hands out b's first message
    assert single is not None and single.queue == q1 and a.commit_offset() == 4 and b.commit_offset() == 0
    last = await c.receive_batch(None, 0.1)
    assert [m.queue_offset for m in last] == [1] and b.commit_offset() == 1
    assert await c.receive_batch(None, 0.05) == []  # times out; b's last message counts as processed
    assert b.commit_offset() == 2 and c.consumed == 6
    b.dropped = True  # a batch of a queue that moved away is not handed out
    ready.put_nowait((b, [_msg(q1, 2)]))
    assert await c.receive_batch(None, 0.05) == []
    ready.put_nowait(None)  # close() wakes receivers
    assert await c.receive_batch(None, 1.0) == []


@pytest.mark.asyncio
async def test_a_waiting_receive_wakes_for_a_batch_and_gives_up_at_its_own_deadline() -> None:
    """receive() waits for pulled batches without a timer of its own per wait: the batch wakes
    it, a short wait after a long one still ends on time, a long wait after a short one is not
    ended by the short one's timer, and two receivers waiting at once each get a batch."""
    c = AsyncConsumer("g", "127.0.0.1:1")
    c._started = True
    c._ready = asyncio.Queue(8)
    q = MessageQueue("t", "b", 0)
    pq = ProcessQueue(q, 4)
    loop = asyncio.get_running_loop()

    waiting = asyncio.ensure_future(c.receive_batch(None, 30))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    assert c._offer(pq, [_msg(q, 0), _msg(q, 1)])
    assert [m.queue_offset for m in await asyncio.wait_for(waiting, 5)] == [0, 1]

    started = loop.time()  # the timer of the 30 s wait is still set: this one ends first
    assert await c.receive_batch(None, 0.1) == []
    assert 0.09 <= loop.time() - started < 2

    waiting = asyncio.ensure_future(c.receive_batch(None, 1.0))
    await asyncio.sleep(0.3)  # past the 0.1 s wait's timer
    assert not waiting.done()
    assert c._offer(pq, [_msg(q, 2)])
    assert [m.queue_offset for m in await asyncio.wait_for(waiting, 5)] == [2]

    both = [asyncio.ensure_future(c.receive_batch(None, 5)) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert c._offer(pq, [_msg(q, 3)]) and c._offer(pq, [_msg(q, 4)])
    got = await asyncio.wait_for(asyncio.gather(*both), 5)
    assert sorted(m.queue_offset for batch in got for m in batch) == [3, 4]

    waiting = asyncio.ensure_future(c.receive(None))  # no deadline: only a batch or close ends it
    await asyncio.sleep(0.05)
    assert not waiting.done()
    c._closed = True  # what close() does to the buffer, without a cluster to leave
    c._ready.put_nowait(None)
    c._wake()
    assert await asyncio.wait_for(waiting, 5) is None


@settings(max_examples=300)
@given(st.data())
def test_acks_one_by_one_or_several_at_once_commit_the_first_unprocessed_offset(data: st.DataObject) -> None:
    """However acks come (each message in order, as a handler acks; a batch's last, as
    receive_batch() does; or anywhere, even backwards), the offset to commit is the first
    delivered offset above the highest ack, or where the next pull starts."""
    pq = ProcessQueue(MessageQueue("t", "b", 0), 2)
    offset = data.draw(st.integers(0, 2**40))
    delivered: list[int] = []
    for _ in range(data.draw(st.integers(1, 5))):
        gaps = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
        batch = []
        for gap in gaps:
            batch.append(offset)
            offset += gap
        pq.add_inflight(range(batch[0], batch[-1] + 1) if gaps.count(1) == len(gaps) else batch)
        delivered += batch
    pq.next_offset = offset
    acked = -1
    for _ in range(data.draw(st.integers(0, 12))):
        ack = data.draw(st.one_of(st.sampled_from(delivered), st.integers(delivered[0] - 2, offset + 2)))
        if data.draw(st.booleans()):  # most often the next message in order
            ack = next((o for o in delivered if o > acked), ack)
        pq.ack(ack)
        acked = max(acked, ack)
        assert pq.commit_offset() == next((o for o in delivered if o > acked), offset)


@pytest.mark.asyncio
async def test_batch_queue_room_wakes_one_filler_per_item_taken() -> None:
    q: BatchQueue[int] = BatchQueue(1)
    assert q.room() is None  # room now
    q.put_nowait(1)
    first, second, cancelled = q.room(), q.room(), q.room()
    assert first is not None and second is not None and cancelled is not None
    assert not first.done() and not second.done()
    assert await q.get() == 1  # get() takes through get_nowait()
    assert first.done() and not second.done()
    q.put_nowait(2)
    second.cancel()
    assert q.get_nowait() == 2
    assert cancelled.done() and not cancelled.cancelled()  # a cancelled waiter is skipped


def test_ready_capacity_counts_messages_not_replies() -> None:
    assert ready_capacity(4, 32) == 16  # 4 x buffer_batches batches of 32 messages
    assert ready_capacity(8, 256) == 4  # large replies: fewer of them
    assert ready_capacity(4, 100) == 6  # (rounded up)
    assert ready_capacity(1, 4096) == 2  # at least 2
    assert ready_capacity(2, 1) == 256

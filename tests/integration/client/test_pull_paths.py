"""The consumer's two ways of pulling, against real processes: PullMessageStream (direct
connections to brokers, the default) and PullMessage (relayed by the NameServer, or when a broker
has no PullMessageStream) deliver the same messages in queue order, honour tag filters and commit
exactly what was processed."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from pocketmq import Admin, AsyncConsumer, AsyncProducer, Message, ReceivedMessage
from pocketmq.client.transport import BrokerCaller
from tests.integration.client.cluster import Cluster
from tests.support import async_wait_until

pytestmark = pytest.mark.slow

FAST = {"heartbeat_interval": 0.5, "rebalance_interval": 0.5, "commit_interval": 0.3,
        "long_poll_timeout": 1.0, "request_timeout": 2.0}


def consumer(shared: Cluster, group: str, path: str) -> AsyncConsumer:
    c = AsyncConsumer(group, shared.namesrv, consume_from="first", pull_batch_size=8,
                      relay="relay" if path == "relay" else "direct", **FAST)  # type: ignore[arg-type]
    if path == "unary":
        c._stream_pulls = False
    return c


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["stream", "unary", "relay"])
async def test_pull_paths_deliver_in_order_filter_and_commit(
    shared: Cluster, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    methods: collections.Counter[str] = collections.Counter()
    call, stream = BrokerCaller.call, BrokerCaller.stream

    async def counted_call(self: BrokerCaller, address: str, method: str, *args: Any) -> Any:
        methods[method] += 1
        return await call(self, address, method, *args)

    def counted_stream(self: BrokerCaller, address: str, method: str, *args: Any) -> Any:
        methods[method] += 1
        return stream(self, address, method, *args)

    monkeypatch.setattr(BrokerCaller, "call", counted_call)
    monkeypatch.setattr(BrokerCaller, "stream", counted_stream)
    # Queue i % 4 gets the messages tagged tags[i % 4] (round robin): two queues hold nothing
    # the group subscribes to, and only their offsets move.
    topic, group = f"c-path-{path}", f"g-path-{path}"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    tags = ["a", "b", "c", ""]
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(120):
            await producer.send(Message(topic, f"p{i}", tags=tags[i % 4], keys=[f"k{i}", "x"],
                                        properties={"n": str(i), "ü": "é"}))
    expected = {f"p{i}" for i in range(120) if i % 4 in (0, 1)}

    first: list[ReceivedMessage] = []
    c1 = consumer(shared, group, path)
    c1.subscribe(topic, "a || b")
    await c1.start()
    try:
        while len(first) < 25:
            msg = await c1.receive(10)
            assert msg is not None, f"{len(first)} received"
            first.append(msg)
        await c1.commit()  # the 25 are processed
        sources = set(c1.pull_sources().values())
    finally:
        await c1.close()
    assert sources <= {b.addr for b in shared.masters()} and sources

    rest: list[ReceivedMessage] = []
    c2 = consumer(shared, group, path)
    c2.subscribe(topic, "a || b")
    await c2.start()
    try:
        while len(first) + len(rest) < len(expected):
            msg = await c2.receive(10)
            assert msg is not None, f"{len(first) + len(rest)} of {len(expected)} received"
            rest.append(msg)
        assert await c2.receive(1.0) is None  # nothing else matches
        # Unmatched messages count as processed once the broker has skipped them.
        await async_wait_until(lambda: sum(c2.offsets().values()) == 120, 10,
                               message="offsets past the unmatched messages")
    finally:
        await c2.close()

    got = first + rest
    texts = [m.text for m in got]
    assert sorted(texts) == sorted(expected) and len(set(texts)) == len(texts)  # nothing twice, nothing lost
    for m in got:
        i = int(m.text[1:])
        assert m.tags == tags[i % 4] and m.keys == (f"k{i}", "x")
        assert m.properties["n"] == str(i) and m.properties["ü"] == "é"
    by_queue: dict[object, list[int]] = collections.defaultdict(list)
    for m in got:
        by_queue[m.queue].append(m.queue_offset)
    for offsets in by_queue.values():
        assert offsets == sorted(offsets)  # queue order
    with Admin(shared.namesrv, relay="direct") as admin:
        progress = admin.consumer_progress(group, topic)
    assert sum(p.lag for p in progress) == 0 and sum(p.broker_offset for p in progress) == 120
    if path == "stream":
        assert methods["PullMessageStream"] and not methods["PullMessage"]
    else:
        assert methods["PullMessage"] and not methods["PullMessageStream"]


@pytest.mark.asyncio
async def test_a_stream_delivers_new_messages_as_they_arrive(shared: Cluster) -> None:
    topic = "c-path-live"
    await asyncio.to_thread(shared.create_topic, topic, 1, shared.masters()[:1])
    c = AsyncConsumer("g-path-live", shared.namesrv, consume_from="last", **FAST)  # type: ignore[arg-type]
    c.subscribe(topic)
    await c.start()
    try:
        async with AsyncProducer(shared.namesrv) as producer:
            await async_wait_until(c.offsets, 10, message="queue offset chosen")
            for round_ in range(3):  # idle (keep-alives) between rounds
                await asyncio.sleep(1.5)
                for i in range(5):
                    await producer.send(Message(topic, f"live{round_}-{i}"))
                got = [await c.receive(5) for _ in range(5)]
                assert [m.text for m in got if m] == [f"live{round_}-{i}" for i in range(5)]
    finally:
        await c.close()


@pytest.mark.asyncio
async def test_a_commit_never_overtakes_one_in_flight(
    shared: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A periodic commit held on its way to the broker while commit() and close() commit a
    later offset: the older one must not land last (the next member would re-read what was
    committed). Commits of one queue go out one after the other."""
    topic, group = "c-path-commit-order", "g-path-commit-order"
    await asyncio.to_thread(shared.create_topic, topic, 1, shared.masters()[:1])
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"o{i}"))
    update = BrokerCaller.update_consumer_offset
    gate, held, overtaken = asyncio.Event(), asyncio.Event(), asyncio.Event()
    hold_next = False
    in_flight: list[int] = []

    async def held_update(self: BrokerCaller, address: str, group_: str, topic_: str, queue_id: int,
                          offset: int, timeout: float,  # noqa: ASYNC109
                          reset_generation: int | None = None) -> None:
        nonlocal hold_next
        if topic_ != topic:
            return await update(self, address, group_, topic_, queue_id, offset, timeout, reset_generation)
        if in_flight:
            overtaken.set()
        in_flight.append(offset)
        try:
            if hold_next:
                hold_next = False
                held.set()
                await gate.wait()
            await update(self, address, group_, topic_, queue_id, offset, timeout, reset_generation)
        finally:
            in_flight.remove(offset)

    monkeypatch.setattr(BrokerCaller, "update_consumer_offset", held_update)
    c1 = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    c1.subscribe(topic)
    await c1.start()
    try:
        for _ in range(6):
            assert await c1.receive(10) is not None
        hold_next = True  # the next commit (the periodic one: 5 processed) is held
        await asyncio.wait_for(held.wait(), 10)
        for _ in range(10):
            assert await c1.receive(10) is not None
        committing = asyncio.ensure_future(c1.commit())  # 16 processed
        overtaking = asyncio.ensure_future(overtaken.wait())
        await asyncio.wait((committing, overtaking), timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        overtaking.cancel()
        gate.set()
        await asyncio.wait_for(committing, 10)
    finally:
        gate.set()
        await c1.close()
    with Admin(shared.namesrv, relay="direct") as admin:
        progress = admin.consumer_progress(group, topic)
    assert [p.consumer_offset for p in progress] == [16]
    c2 = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    c2.subscribe(topic)
    await c2.start()
    try:
        msg = await c2.receive(10)
        assert msg is not None and msg.text == "o16"
    finally:
        await c2.close()
    assert not overtaken.is_set(), "two commits of one queue were in flight at once"

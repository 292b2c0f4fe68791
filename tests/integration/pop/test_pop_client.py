"""PocketMQ's own POP consumer (batched PopMessages / AckMessages / ChangeInvisibleTime) against
real NameServer and broker processes (broker-a master + slave, shared by the module): receive and
batched acks, redelivery after the invisible time (and not before), ChangeInvisibleTime, two
consumers never holding the same message; the last test restarts the slave as the master on its
store and checks the replicated POP state: every in-flight message comes back, no acked one."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator

import pytest

from pocketmq import AsyncProducer, Message
from pocketmq import errors as e
from pocketmq.client.popconsumer import PopConsumer, PoppedMessage
from tests.integration.client.cluster import Broker, Cluster, running_cluster
from tests.integration.procs import attach_logs
from tests.integration.timer.helpers import knows_topic, status
from tests.support import async_wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pop_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("pop-cluster"), [("broker-a", 0), ("broker-a", 1)]) as c:
        yield c


@pytest.fixture
def pc(pop_cluster: Cluster, request: pytest.FixtureRequest) -> Cluster:
    attach_logs(request.node, pop_cluster.group, "cluster ")
    return pop_cluster


async def send(namesrv: str, topic: str, texts: list[str]) -> None:
    async with AsyncProducer(namesrv) as producer:
        for i in range(0, len(texts), 64):
            await producer.send_batch([Message(topic, t) for t in texts[i:i + 64]])


async def drain(consumer: PopConsumer, expect: int, within: float, invisible: float = 30,
                ack: bool = True) -> list[PoppedMessage]:
    got: list[PoppedMessage] = []
    deadline = time.monotonic() + within
    while len(got) < expect and time.monotonic() < deadline:
        batch = await consumer.receive(min(256, expect - len(got)), invisible_time=invisible, wait=1.0)
        if ack and batch:
            assert await consumer.ack(batch) == []
        got.extend(batch)
    return got


@pytest.mark.asyncio
async def test_receive_ack_redeliver_after_invisible_time_and_change_it(pc: Cluster) -> None:
    pc.create_topic("pop-own", queues=4)
    texts = [f"m{i}" for i in range(300)]
    await send(pc.namesrv, "pop-own", texts)
    async with PopConsumer("pop-own-g", pc.namesrv) as consumer:
        consumer.subscribe("pop-own")
        first = await drain(consumer, 300, 20, ack=False)
        assert sorted(m.body.decode() for m in first) == sorted(texts)
        assert {m.delivery_attempt for m in first} == {1} and {m.topic for m in first} == {"pop-own"}
        # Ack all but three in one call; extend one of the three, let two run out.
        keep, rest = first[:3], first[3:]
        assert await consumer.ack(rest) == []
        assert await consumer.ack(rest[:5]) == rest[:5]  # acked before: refused
        (extended,) = await consumer.change_invisible_time(keep[:1], 30)
        assert extended.receipt.checkpoint_id != keep[0].receipt.checkpoint_id
        assert await consumer.ack(keep[:1]) == keep[:1]  # the old receipt no longer acks
        assert await consumer.receive(32, wait=0.5) == []  # nothing visible before the deadline
        for m in keep[1:]:
            assert await consumer.change_invisible_time([m], 1.0)
        started = time.monotonic()
        again = await drain(consumer, 2, 15, ack=False)
        assert time.monotonic() - started >= 0.5
        assert sorted(m.body.decode() for m in again) == sorted(m.body.decode() for m in keep[1:])
        assert {m.delivery_attempt for m in again} == {2}
        assert {m.topic for m in again} == {"pop-own"}
        assert {m.msg_id for m in again} == {m.msg_id for m in keep[1:]}
        assert await consumer.ack([*again, extended]) == []
        assert await consumer.receive(32, wait=0.5) == []


@pytest.mark.asyncio
async def test_two_consumers_of_a_group_never_hold_the_same_message(pc: Cluster) -> None:
    pc.create_topic("pop-share", queues=2)
    texts = [f"s{i}" for i in range(400)]
    await send(pc.namesrv, "pop-share", texts)
    a, b = PopConsumer("pop-share-g", pc.namesrv), PopConsumer("pop-share-g", pc.namesrv)
    for c in (a, b):
        c.subscribe("pop-share")
        await c.start()
    try:
        held: dict[str, int] = {}
        got: list[str] = []

        async def run(c: PopConsumer, who: int, combined: bool) -> None:
            done: list[PoppedMessage] = []
            while len(got) < len(texts):
                if combined:  # b acks each batch on its next pop
                    failed, batch = await c.ack_and_receive(done, 16, wait=0.3)
                    assert failed == []
                    for m in done:
                        del held[m.body.decode()]
                else:
                    batch = await c.receive(16, wait=0.3)
                for m in batch:
                    key = m.body.decode()
                    assert key not in held, f"{key} held by {held[key]} and {who}"
                    held[key] = who
                got.extend(m.body.decode() for m in batch)
                await asyncio.sleep(0)
                if combined:
                    done = batch
                else:
                    assert await c.ack(batch) == []
                    for m in batch:
                        del held[m.body.decode()]
            assert await c.ack(done) == []

        await asyncio.wait_for(asyncio.gather(run(a, 1, False), run(b, 2, True)), 30)
        assert sorted(got) == sorted(texts)
        assert await a.receive(16, wait=0.3) == [] and await b.receive(16, wait=0.3) == []  # all acked
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_relayed_consumers_use_the_unary_calls_and_errors_are_reported(pc: Cluster) -> None:
    pc.create_topic("pop-relay", queues=1)
    await send(pc.namesrv, "pop-relay", ["r0", "r1", "r2"])
    async with PopConsumer("pop-relay-g", pc.namesrv, relay="relay") as relayed:
        relayed.subscribe("pop-relay")
        got = await drain(relayed, 3, 15)
        assert sorted(m.body.decode() for m in got) == ["r0", "r1", "r2"]
        assert relayed._streams == {}  # through the NameServer: no stream
    async with PopConsumer("pop-relay-g", pc.namesrv) as direct:
        direct.subscribe("pop-relay")
        # A broker-side refusal on the stream surfaces as the error a unary call would raise.
        with pytest.raises(e.InvalidRequestError, match="max_msg_nums"):
            await direct._pop(pc.masters()[0].addr, "pop-relay", 5000, 30, 0)
        assert await direct.receive(8, wait=0.2) == []  # the stream still works



@pytest.mark.asyncio
async def test_after_sigkill_in_flight_messages_come_back_and_acked_ones_do_not(pc: Cluster) -> None:
    pc.create_topic("pop-crash", queues=2)
    texts = [f"c{i}" for i in range(120)]
    await send(pc.namesrv, "pop-crash", texts)
    master = next(b for b in pc.brokers if b.broker_id == 0 and b.proc.alive)
    async with PopConsumer("pop-crash-g", pc.namesrv) as consumer:
        consumer.subscribe("pop-crash")
        first = await drain(consumer, 60, 15, invisible=3, ack=False)
        # The first batch's ack rides on the next pop.
        failed, second = await consumer.ack_and_receive(first, 60, invisible_time=3, wait=1.0)
        assert failed == [] and len(second) > 0
    master.proc.kill()
    pc.restart(master)
    async with PopConsumer("pop-crash-g", pc.namesrv) as consumer:
        consumer.subscribe("pop-crash")
        got = await drain(consumer, 120 - len(first), 30)
        await asyncio.sleep(0.5)
        got.extend(await consumer.receive(256, wait=0.5))
    bodies = collections.Counter(m.body.decode() for m in got)
    assert set(bodies) == set(texts) - {m.body.decode() for m in first} and set(bodies.values()) == {1}
    assert {m.delivery_attempt for m in got if m.body.decode() in {x.body.decode() for x in second}} == {2}

@pytest.mark.asyncio
async def test_a_slave_restarted_as_master_redelivers_in_flight_and_not_acked_messages(pc: Cluster) -> None:
    pc.create_topic("pop-failover", queues=2)
    texts = [f"f{i}" for i in range(200)]
    await send(pc.namesrv, "pop-failover", texts)
    master = next(b for b in pc.brokers if b.broker_id == 0 and b.proc.alive)
    slave: Broker = next(b for b in pc.brokers if b.broker_id == 1)
    async with PopConsumer("pop-failover-g", pc.namesrv) as consumer:
        consumer.subscribe("pop-failover")
        popped = await drain(consumer, 150, 20, invisible=4, ack=False)
        assert len(popped) == 150  # 50 never popped
        acked = popped[:100]
        assert await consumer.ack(acked) == []
        await async_wait_until(lambda: knows_topic(slave, "pop-failover"), 10,
                               message="slave knows the topic")
        end = status(master).commit_log_max_offset
        await async_wait_until(lambda: status(slave).commit_log_max_offset == end, 10,
                               message="slave has the pop and ack records")
        master.proc.kill()
        slave.proc.kill()
        promoted = pc.start_broker("broker-a", 0, port=slave.port, store_dir=slave.store_dir)
        assert promoted.addr == slave.addr
    async with PopConsumer("pop-failover-g", pc.namesrv) as consumer:
        consumer.subscribe("pop-failover")
        got = await drain(consumer, 100, 30)
        await asyncio.sleep(1.0)
        got.extend(await consumer.receive(256, wait=0.5))
    bodies = collections.Counter(m.body.decode() for m in got)
    in_flight = {m.body.decode() for m in popped[100:]}
    never_popped = set(texts) - {m.body.decode() for m in popped}
    assert set(bodies) == in_flight | never_popped and set(bodies.values()) == {1}
    assert {m.delivery_attempt for m in got if m.body.decode() in in_flight} == {2}
    assert {m.delivery_attempt for m in got if m.body.decode() in never_popped} == {1}

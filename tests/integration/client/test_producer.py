"""Producer against real NameServer and broker processes."""

from __future__ import annotations

import asyncio
import collections
import socket

import pytest

from pocketmq import AsyncConsumer, AsyncProducer, Message, MessageQueue, Producer, SendStatus
from pocketmq import errors as e
from tests.integration.client.cluster import Cluster
from tests.support import async_wait_until, wait_for

pytestmark = pytest.mark.slow


def test_round_robin_over_every_queue_with_results(shared: Cluster) -> None:
    shared.create_topic("p-rr", queues=4)
    with Producer(shared.namesrv, group="pg") as producer:
        assert len(producer.queues("p-rr")) == 8
        results = [producer.send(Message("p-rr", f"m{i}", tags="t", keys=["k", str(i)])) for i in range(16)]
    assert all(r.status is SendStatus.SEND_OK and r.ok for r in results)
    assert len({r.msg_id for r in results}) == 16 and all(len(r.msg_id) == 32 for r in results)
    per_queue = collections.Counter(r.queue for r in results)
    assert set(per_queue.values()) == {2} and len(per_queue) == 8
    for queue in per_queue:
        offsets = [r.queue_offset for r in results if r.queue == queue]
        assert offsets == [0, 1]
    assert {r.broker_addr for r in results} == {b.addr for b in shared.masters()}


@pytest.mark.asyncio
async def test_batch_ordered_and_delayed_sends(shared: Cluster) -> None:
    shared.create_topic("p-batch", queues=2)
    async with AsyncProducer(shared.namesrv) as producer:
        batch = await producer.send_batch([Message("p-batch", f"b{i}") for i in range(10)])
        assert batch.ok and len(batch.msg_ids) == 10 and len(set(batch.msg_ids)) == 10
        with pytest.raises(e.InvalidArgumentError):
            await producer.send_batch([Message("p-batch", "x"), Message("other", "y")])
        with pytest.raises(e.InvalidArgumentError):
            await producer.send_batch([Message("p-batch", "x", delay_level=2)])

        ordered = [await producer.send(Message("p-batch", f"o{i}"), sharding_key="order-7")
                   for i in range(12)]
        assert len({r.queue for r in ordered}) == 1
        offsets = [r.queue_offset for r in ordered]
        assert offsets == list(range(offsets[0], offsets[0] + 12))
        pinned = await producer.send(Message("p-batch", "pinned"),
                                     queue=MessageQueue("p-batch", "broker-b", 1))
        assert pinned.queue == MessageQueue("p-batch", "broker-b", 1)

        delayed = await producer.send(Message("p-batch", "later", delay_level=1))  # 1 s
        assert delayed.ok and delayed.queue_offset == -1

    consumer = AsyncConsumer("p-batch-reader", shared.namesrv, consume_from="first", rebalance_interval=0.5,
                             long_poll_timeout=1.0)
    consumer.subscribe("p-batch")
    await consumer.start()
    try:
        got: dict[str, object] = {}
        while "later" not in got:
            msg = await consumer.receive(10)
            assert msg is not None, f"timed out; got {sorted(got)}"
            got[msg.text] = msg
    finally:
        await consumer.close()
    later = got["later"]
    assert later.store_timestamp - later.born_timestamp >= 900  # type: ignore[attr-defined]
    order = [m for m in got if m.startswith("o")]
    assert order == [f"o{i}" for i in range(12)]  # one queue: in send order
    assert {f"b{i}" for i in range(10)} <= set(got)


@pytest.mark.asyncio
async def test_new_topic_is_auto_created_through_the_template_route(shared: Cluster) -> None:
    async with AsyncProducer(shared.namesrv) as producer:
        result = await producer.send(Message("p-auto-created", "first"))
        assert result.ok
        assert result.queue.broker_name in {"broker-a", "broker-b"}
    wait_for(lambda: shared.route("p-auto-created") is not None, 5, "auto-created topic routed")


@pytest.mark.asyncio
async def test_errors_are_typed_and_not_retried_when_pointless(shared: Cluster) -> None:
    async with AsyncProducer(shared.namesrv, send_timeout=3) as producer:
        with pytest.raises(e.MessageIllegalError) as illegal:
            await producer.send(Message("p-rr", b""))
        assert not illegal.value.retriable and illegal.value.status == "MESSAGE_ILLEGAL"
        with pytest.raises(e.InvalidArgumentError):
            await producer.send(Message("bad topic!", "x"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    async with AsyncProducer(dead, send_timeout=2) as producer:
        with pytest.raises(e.ConnectionFailedError) as down:
            await producer.send(Message("p-rr", "x"))
        assert down.value.retriable
    with pytest.raises(e.ClientClosedError):
        await AsyncProducer(shared.namesrv).send(Message("p-rr", "x"))


def test_sends_move_to_another_broker_when_one_dies(cluster: Cluster) -> None:
    cluster.start_namesrv()
    cluster.start_broker("broker-a")
    b = cluster.start_broker("broker-b")
    cluster.create_topic("p-failover", queues=2)
    with Producer(cluster.namesrv, send_timeout=5, retries=2) as producer:
        before = [producer.send(Message("p-failover", f"x{i}")) for i in range(8)]
        assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}
        b.proc.kill()  # the NameServer still routes to it for a while
        after = [producer.send(Message("p-failover", f"y{i}")) for i in range(20)]
    assert all(r.ok for r in after)
    assert {r.queue.broker_name for r in after} == {"broker-a"}


def test_not_durable_status_is_reported_and_not_retried(cluster: Cluster) -> None:
    cluster.start_namesrv()
    sync = cluster.start_broker("broker-s", 0, role="SYNC_MASTER")  # no slave: SLAVE_NOT_AVAILABLE
    cluster.start_broker("broker-t")  # an ASYNC master the producer could (wrongly) retry on
    cluster.create_topic("p-sync", queues=1, masters=[sync])
    with Producer(cluster.namesrv) as producer:
        result = producer.send(Message("p-sync", "stored-anyway"))
        assert result.status is SendStatus.SLAVE_NOT_AVAILABLE and not result.ok
        assert result.queue.broker_name == "broker-s" and result.queue_offset == 0 and result.msg_id
        assert "stored on the master" in result.remark
        with pytest.raises(e.SlaveNotAvailableError) as strict:
            producer.send(Message("p-sync", "strict"), require_durable=True)
    assert strict.value.stored and not strict.value.retriable
    assert strict.value.result is not None and strict.value.result.queue_offset == 1
    assert sync.status().put_total == 2  # each stored exactly once: no blind retry


def test_route_refresh_picks_up_a_new_broker_group(cluster: Cluster) -> None:
    cluster.start_namesrv()
    a = cluster.start_broker("broker-a")
    cluster.create_topic("p-refresh", queues=2, masters=[a])

    async def run() -> set[str]:
        async with AsyncProducer(cluster.namesrv, route_refresh_interval=0.3) as producer:
            first = await producer.send(Message("p-refresh", "1"))
            assert first.queue.broker_name == "broker-a"
            b = cluster.start_broker("broker-b")
            await asyncio.to_thread(cluster.create_topic, "p-refresh", 2, [b])
            seen: set[str] = set()

            async def sent_to_both() -> bool:
                seen.add((await producer.send(Message("p-refresh", "x"))).queue.broker_name)
                return seen == {"broker-a", "broker-b"}

            await async_wait_until(sent_to_both, 10, message="a send routed to the new group")
            return seen

    assert asyncio.run(run()) == {"broker-a", "broker-b"}

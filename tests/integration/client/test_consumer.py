"""Consumer groups against real NameServer and broker processes; group members that must crash
run in their own processes (consumer_proc.py)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pocketmq import Admin, AsyncConsumer, AsyncProducer, Consumer, Message, Producer, ReceivedMessage
from pocketmq.client.allocate import allocation_table
from tests.integration.client.cluster import CONSUMER_EXPIRY_MS, Cluster
from tests.integration.procs import ManagedProcess
from tests.support import async_wait_until, wait_for, wait_until

pytestmark = pytest.mark.slow

FAST = {"heartbeat_interval": 0.5, "rebalance_interval": 0.5, "commit_interval": 0.3,
        "long_poll_timeout": 1.0, "request_timeout": 2.0}


@dataclasses.dataclass
class Member:
    name: str
    proc: ManagedProcess
    out: Path
    status_file: Path

    def status(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads(self.status_file.read_text())
            return doc
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def assignment(self) -> set[str]:
        """Queues of the subscribed topic (the group's retry topic, subscribed automatically, is
        balanced on its own)."""
        return {q for q in self.status().get("assignment", []) if not q.startswith("%RETRY%")}

    def received(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]


def start_member(cluster: Cluster, tmp: Path, group: str, topic: str, name: str, *extra: str) -> Member:
    out, status = tmp / f"{group}-{name}.jsonl", tmp / f"{group}-{name}.json"
    proc = cluster.group.start(
        "tests.integration.client.consumer_proc",
        ["--namesrv", cluster.namesrv, "--group", group, "--topic", topic, "--client-id", name,
         "--out", str(out), "--status", str(status), *extra], name=f"consumer-{name}")
    member = Member(name, proc, out, status)
    wait_for(lambda: member.status().get("client_id") == name or not proc.alive, 15, f"{name} started")
    assert proc.alive, proc.describe()
    return member


def all_queues(topic: str, brokers: list[str], queues: int) -> set[str]:
    return {f"{topic}@{b}:{i}" for b in brokers for i in range(queues)}


def balanced(members: list[Member], queues: set[str]) -> bool:
    """Every queue owned by exactly one member, shares as allocate-averagely assigns them."""
    shares = {m.name: m.assignment() for m in members}
    owned = [q for share in shares.values() for q in share]
    if len(owned) != len(set(owned)) or set(owned) != queues:
        return False
    expected = allocation_table(list(shares), sorted(queues))
    return all(shares[m] == set(expected[m]) for m in shares)


def produce(cluster: Cluster, topic: str, bodies: list[str], tags: str = "") -> None:
    with Producer(cluster.namesrv) as producer:
        for body in bodies:
            producer.send(Message(topic, body, tags=tags))


def test_group_of_three_shares_queues_and_rebalances_on_leave_and_join(
    shared: Cluster, tmp_path: Path
) -> None:
    topic, group = "c-share", "g-share"
    shared.create_topic(topic, queues=4)
    queues = all_queues(topic, ["broker-a", "broker-b"], 4)
    m1, m2, m3 = (start_member(shared, tmp_path, group, topic, n) for n in ("m1", "m2", "m3"))
    wait_for(lambda: balanced([m1, m2, m3], queues), 10, "3 members share the queues")
    assert sorted(len(m.assignment()) for m in (m1, m2, m3)) == [2, 3, 3]

    # In the steady state no two members read the same queue: each message arrives once.
    bodies = [f"s{i}" for i in range(200)]
    produce(shared, topic, bodies)
    wait_for(lambda: sum(len(m.received()) for m in (m1, m2, m3)) >= 200, 15, "all 200 consumed")
    time.sleep(0.3)
    got = collections.Counter(r["b"] for m in (m1, m2, m3) for r in m.received())
    assert set(got) == set(bodies) and max(got.values()) == 1

    # A member leaves (graceful close unregisters it): the others take its queues.
    started = time.monotonic()
    m2.proc.terminate()
    wait_for(lambda: balanced([m1, m3], queues), 5, "rebalanced after a member left")
    left_s = time.monotonic() - started

    # A member joins.
    m4 = start_member(shared, tmp_path, group, topic, "m4")
    started = time.monotonic()
    wait_for(lambda: balanced([m1, m3, m4], queues), 5, "rebalanced after a member joined")
    joined_s = time.monotonic() - started
    print(f"rebalance after leave: {left_s:.2f} s, after join: {joined_s:.2f} s")


def test_every_message_is_consumed_at_least_once_across_a_member_crash(
    shared: Cluster, tmp_path: Path
) -> None:
    topic, group = "c-crash", "g-crash"
    shared.create_topic(topic, queues=4)
    queues = all_queues(topic, ["broker-a", "broker-b"], 4)
    members = [start_member(shared, tmp_path, group, topic, n, "--delay-ms", "2") for n in ("k1", "k2", "k3")]
    wait_for(lambda: balanced(members, queues), 10, "3 members share the queues")

    bodies = [f"c{i}" for i in range(900)]
    sent = threading.Event()
    half = threading.Event()

    def producer() -> None:
        with Producer(shared.namesrv) as p:
            for i, body in enumerate(bodies):
                p.send(Message(topic, body))
                if i == len(bodies) // 3:
                    half.set()
                time.sleep(0.002)
        sent.set()

    thread = threading.Thread(target=producer)
    thread.start()
    assert half.wait(20)
    wait_for(lambda: len(members[1].received()) > 20, 10, "the victim is consuming")
    members[1].proc.kill()  # SIGKILL mid-consumption: no commit, no unregister
    killed_at = time.monotonic()
    thread.join(60)
    assert sent.is_set()
    survivors = [members[0], members[2]]

    def everything() -> bool:
        seen = {r["b"] for m in members for r in m.received()}
        return seen >= set(bodies)

    wait_for(everything, CONSUMER_EXPIRY_MS / 1000 + 20, "every message consumed", interval=0.2)
    recovered_s = time.monotonic() - killed_at
    wait_for(lambda: balanced(survivors, queues), 10, "the survivors own every queue")
    counts = collections.Counter(r["b"] for m in members for r in m.received())
    dups = sum(c - 1 for c in counts.values())
    print(f"all {len(bodies)} consumed {recovered_s:.1f} s after the crash; {dups} duplicate deliveries")
    assert dups < len(bodies) // 2


@pytest.mark.asyncio
async def test_tag_filtering(shared: Cluster) -> None:
    topic = "c-tags"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(40):
            await producer.send(Message(topic, f"t{i}", tags="abc"[i % 3] if i % 4 else ""))
    expected_ab = {f"t{i}" for i in range(40) if i % 4 and "abc"[i % 3] in "ab"}

    async def consume(group: str, expression: str, expected: int) -> list[ReceivedMessage]:
        consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
        consumer.subscribe(topic, expression)
        got: list[ReceivedMessage] = []
        async with consumer:
            await consumer.start()
            while len(got) < expected:
                msg = await consumer.receive(10)
                assert msg is not None, f"{group}: {len(got)} of {expected}"
                got.append(msg)
            assert await consumer.receive(0.5) is None  # nothing else matches
        return got

    ab = await consume("g-tags-ab", "a || b", len(expected_ab))
    assert {m.text for m in ab} == expected_ab and {m.tags for m in ab} == {"a", "b"}
    only_c = await consume("g-tags-c", "c", sum(1 for i in range(40) if i % 4 and i % 3 == 2))
    assert {m.tags for m in only_c} == {"c"}
    everything = await consume("g-tags-all", "*", 40)
    assert len({m.text for m in everything}) == 40


@pytest.mark.asyncio
async def test_iterator_commits_and_a_restarted_member_resumes(shared: Cluster) -> None:
    topic, group = "c-resume", "g-resume"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"r{i}"))

    first: list[str] = []
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    async for msg in consumer:
        first.append(msg.text)
        if len(first) == 12:
            break
    await consumer.commit()  # the 12 are processed
    await consumer.close()

    rest: list[str] = []
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start()
    try:
        while len(first) + len(rest) < 30:
            again = await consumer.receive(10)
            assert again is not None
            rest.append(again.text)
        assert await consumer.receive(1.0) is None
    finally:
        await consumer.close()
    assert sorted(first + rest) == sorted(f"r{i}" for i in range(30))  # nothing twice, nothing lost


@pytest.mark.asyncio
async def test_batches_received_count_as_processed_at_the_next_call(shared: Cluster) -> None:
    """receive_batch(): one queue's messages in order per call; a member that takes 10 (in
    batches of at most 4) and commits leaves exactly the other 20 to the next one."""
    topic, group = "c-batches", "g-batches"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"b{i}"))

    first: list[ReceivedMessage] = []
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start()
    try:
        while len(first) < 10:
            batch = await consumer.receive_batch(min(4, 10 - len(first)), 10)
            assert 1 <= len(batch) <= 4 and len({m.queue for m in batch}) == 1
            offsets = [m.queue_offset for m in batch]
            assert offsets == sorted(offsets)
            first += batch
        await consumer.commit()  # the 10 are processed
    finally:
        await consumer.close()

    rest: list[ReceivedMessage] = []
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start()
    try:
        while len(first) + len(rest) < 30:
            batch = await consumer.receive_batch(None, 10)
            assert batch
            rest += batch
        assert await consumer.receive_batch(None, 1.0) == []
    finally:
        await consumer.close()
    assert sorted(m.text for m in first + rest) == sorted(f"b{i}" for i in range(30))


@pytest.mark.asyncio
async def test_a_consumer_that_does_not_read_holds_its_buffer_unbuilt(shared: Cluster) -> None:
    """Stream replies hold up to pull_batch_size messages (more than the broker's 32 per
    selection); while the application does not read, the buffer holds its batches checked but
    not built into messages, and the fetchers wait for room with their replies raw; then
    everything arrives once, in order."""
    topic, group = "c-buffer", "g-buffer"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(12):
            # (like messages: the batches a reply holds are checked in one pass, built later)
            await producer.send_batch([Message(topic, f"{i:02}-{j:02}") for j in range(50)])
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", pull_batch_size=64,
                             buffer_batches=1, **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start()
    try:
        ready = consumer._ready
        assert ready is not None and ready.maxsize == 2  # 4 x 1 x 32 messages in batches of 64
        queues = len(consumer.assignment())
        # Both queues' fetchers wait for room (one queue of an uneven split may have none).
        await async_wait_until(lambda: ready.full() and len(ready._room_waiters) >= queues - 1, 10,
                               "the fetchers wait for room")
        gc.collect()  # (messages other tests left in reference cycles)
        built = sum(isinstance(o, ReceivedMessage) and o.topic == topic for o in gc.get_objects())
        assert built == 0  # checked replies wait, their messages are built when handed out
        got: list[ReceivedMessage] = []
        sizes = []
        while len(got) < 600:
            batch = await consumer.receive_batch(None, 10)
            assert batch
            sizes.append(len(batch))
            got += batch
        assert max(sizes) > 32
        by_queue = collections.defaultdict(list)
        for m in got:
            by_queue[m.queue].append(m.queue_offset)
        assert all(offsets == sorted(offsets) for offsets in by_queue.values())
        assert sorted(m.text for m in got) == sorted(f"{i:02}-{j:02}" for i in range(12) for j in range(50))
    finally:
        await consumer.close()


@pytest.mark.asyncio
async def test_consume_from_last_offset_and_timestamp(shared: Cluster) -> None:
    topic = "c-from"  # one queue: messages arrive in send order
    await asyncio.to_thread(shared.create_topic, topic, 1, shared.masters()[:1])
    async with AsyncProducer(shared.namesrv) as producer:
        for i in range(5):
            await producer.send(Message(topic, f"old{i}"))
        await asyncio.sleep(0.2)
        cut = time.time()
        await asyncio.sleep(0.05)
        for i in range(3):
            await producer.send(Message(topic, f"mid{i}"))

        by_time = AsyncConsumer("g-from-ts", shared.namesrv, consume_from="timestamp", consume_timestamp=cut,
                                **FAST)  # type: ignore[arg-type]
        by_time.subscribe(topic)
        latest = AsyncConsumer("g-from-last", shared.namesrv, consume_from="last", **FAST)  # type: ignore[arg-type]
        latest.subscribe(topic)
        await by_time.start()
        await latest.start()
        try:
            await async_wait_until(latest.offsets, 10, message="queue offsets chosen")
            for i in range(2):
                await producer.send(Message(topic, f"new{i}"))
            got_ts = [await by_time.receive(10) for _ in range(5)]
            got_last = [await latest.receive(10) for _ in range(2)]
            assert await latest.receive(0.5) is None
        finally:
            await by_time.close()
            await latest.close()
    assert [m.text for m in got_ts if m] == ["mid0", "mid1", "mid2", "new0", "new1"]
    assert [m.text for m in got_last if m] == ["new0", "new1"]


@pytest.mark.asyncio
async def test_a_member_closed_at_once_still_records_where_each_queue_starts(shared: Cluster) -> None:
    topic, group = "c-quick-close", "g-quick-close"
    await asyncio.to_thread(shared.create_topic, topic, 2)
    await asyncio.to_thread(produce, shared, topic, [f"q{i}" for i in range(4)])
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="last", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start()
    owned = len(consumer.assignment())
    await consumer.close()  # before any pull task got to run

    def read_progress() -> list[Any]:
        with Admin(shared.namesrv, relay="direct") as admin:
            return admin.consumer_progress(group, topic)

    progress = await asyncio.to_thread(read_progress)
    assert owned == len(progress) == 2 * len(shared.masters())
    # "last" was decided for every queue and kept: a later member does not re-decide it.
    assert all(p.consumer_offset == p.broker_offset for p in progress), progress
    assert sum(p.broker_offset for p in progress) == 4


@pytest.mark.asyncio
async def test_failing_handler_is_retried_then_dead_lettered(shared: Cluster) -> None:
    topic, group = "c-poison", "g-poison"
    await asyncio.to_thread(shared.create_topic, topic, 1)
    attempts: collections.Counter[str] = collections.Counter()
    done: list[str] = []

    async def handler(msg: ReceivedMessage) -> None:
        attempts[msg.text] += 1
        if msg.text == "poison" or (msg.text == "flaky" and attempts["flaky"] < 3):
            raise RuntimeError(f"cannot handle {msg.text}")
        done.append(msg.text)

    # send_back=False: retried in place (tests/integration/client/test_redelivery.py covers the
    # default, the retry topic).
    consumer = AsyncConsumer(group, shared.namesrv, consume_from="first", max_reconsume_times=2,
                             send_back=False, **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    await consumer.start(handler)
    try:
        async with AsyncProducer(shared.namesrv) as producer:
            for body in ("ok1", "flaky", "poison", "ok2"):
                await producer.send(Message(topic, body, tags="x"))
        await async_wait_until(lambda: "ok2" in done, 15, message="ok2 handled")
    finally:
        await consumer.close()
    assert done == ["ok1", "flaky", "ok2"]
    assert attempts["flaky"] == 3 and attempts["poison"] == 3  # 1 + max_reconsume_times

    dlq = AsyncConsumer("g-poison-dlq-reader", shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    dlq.subscribe("%DLQ%" + group)
    await dlq.start()
    try:
        dead = await dlq.receive(10)
    finally:
        await dlq.close()
    assert dead is not None and dead.text == "poison" and dead.properties["ORIGIN_TOPIC"] == topic
    assert dead.tags == "x"


def test_blocking_consumer_with_a_thread_handler_commits_on_close(shared: Cluster) -> None:
    topic, group = "c-sync", "g-sync"
    shared.create_topic(topic, queues=2)
    produce(shared, topic, [f"y{i}" for i in range(50)])
    seen: list[str] = []
    lock = threading.Lock()

    def handler(msg: ReceivedMessage) -> None:
        assert threading.current_thread().name != "pocketmq-client-loop"
        with lock:
            seen.append(msg.text)

    consumer = Consumer(group, shared.namesrv, consume_from="first", **FAST)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    consumer.start(handler)
    try:
        wait_until(lambda: len(seen) >= 50, 15, message="50 handled")
        # (the group's retry topic may be routed by now too: count the subscribed topic's queues)
        assert len([q for q in consumer.assignment() if q.topic == topic]) == 4
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"y{i}" for i in range(50))
    with Admin(shared.namesrv, relay="direct") as admin:
        progress = admin.consumer_progress(group, topic)
    assert sum(p.lag for p in progress) == 0 and sum(p.broker_offset for p in progress) == 50


def test_reads_from_the_slave_while_the_master_is_down_and_back(cluster: Cluster) -> None:
    """The pull path follows the broker group: master -> slave when the master is unreachable ->
    master again once it answers. (Without commit-log replication the slave holds no data; the
    test checks where the pulls go.)"""
    cluster.start_namesrv()
    master = cluster.start_broker("broker-a", 0)
    slave = cluster.start_broker("broker-a", 1)
    cluster.create_topic("c-ha", queues=2)
    wait_for(lambda: _has_topic(slave.addr, "c-ha"), 10, "slave synced the topic")

    async def run() -> None:
        consumer = AsyncConsumer("g-ha", cluster.namesrv, consume_from="first", master_retry_interval=0.5,
                                 **FAST)  # type: ignore[arg-type]
        consumer.subscribe("c-ha")
        await consumer.start()
        try:
            async def sources(addr: str) -> bool:
                src = consumer.pull_sources()
                return len(src) == 2 and set(src.values()) == {addr}

            await async_wait_until(lambda: sources(master.addr), 10)
            master.proc.kill()
            await async_wait_until(lambda: sources(slave.addr), 10)
            await asyncio.to_thread(cluster.restart, master)
            await async_wait_until(lambda: sources(master.addr), 15)
            async with AsyncProducer(cluster.namesrv) as producer:
                await producer.send(Message("c-ha", "after-restart"))
            msg = await consumer.receive(10)
            assert msg is not None and msg.text == "after-restart"
        finally:
            await consumer.close()

    asyncio.run(run())


def test_group_keeps_reading_from_the_slave_after_the_master_is_sigkilled(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_namesrv()
    master = cluster.start_broker("broker-a", 0)
    slave = cluster.start_broker("broker-a", 1)
    cluster.create_topic("c-failover", queues=2)
    bodies = [f"f{i}" for i in range(400)]
    produce(cluster, "c-failover", bodies)
    # The slave has replicated everything before the master goes.
    wait_for(lambda: slave.status().commit_log_max_offset == master.status().commit_log_max_offset, 20,
             "slave caught up")
    member = start_member(cluster, tmp_path, "g-failover", "c-failover", "f1", "--delay-ms", "10")
    wait_for(lambda: len(member.received()) > 50, 15, "consuming from the master")
    master.proc.kill()
    wait_for(lambda: {r["b"] for r in member.received()} >= set(bodies), 30, "rest read from the slave")
    cluster.restart(master)
    produce(cluster, "c-failover", ["after"])
    wait_for(lambda: "after" in {r["b"] for r in member.received()}, 20, "back on the master")


def _has_topic(addr: str, topic: str) -> bool:
    import grpc

    from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc

    with grpc.insecure_channel(addr) as channel:
        try:
            broker_pb2_grpc.BrokerStub(channel).GetTopic(broker_pb2.GetTopicRequest(topic=topic), timeout=2)
        except grpc.RpcError:
            return False
    return True



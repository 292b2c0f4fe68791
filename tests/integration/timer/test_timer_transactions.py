"""Timer messages and transactions against real NameServer and broker processes (one master, one
slave, shared by the module; the last tests restart and fail over the master)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

import pytest

from pocketmq import AsyncProducer, Message, Producer, ReceivedMessage, TransactionCheck, TransactionState
from pocketmq import errors as e
from pocketmq.client.message import SendResult
from tests.integration.client.cluster import Broker, Cluster
from tests.integration.timer.helpers import BROKER_FLAGS, collect, knows_topic, max_offsets, status
from tests.support import async_wait_until, now_ms

pytestmark = pytest.mark.slow

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"


async def until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    await async_wait_until(predicate, seconds, message=what)


def master(cluster: Cluster) -> Broker:
    return next(b for b in cluster.brokers if b.broker_id == 0 and b.proc.alive)


def slave(cluster: Cluster) -> Broker:
    return next(b for b in cluster.brokers if b.broker_id == 1)


def assert_on_time(msgs: list[ReceivedMessage], slack_ms: int = 1000) -> None:
    for m in msgs:
        due = int(m.properties[TIMER_DELIVER_MS])
        assert m.store_timestamp >= due, f"{m.text} delivered {due - m.store_timestamp} ms early"
        assert m.store_timestamp - due <= slack_ms, f"{m.text} delivered {m.store_timestamp - due} ms late"


@pytest.mark.asyncio
async def test_timer_messages_are_delivered_on_time_and_the_slave_has_them(tc: Cluster) -> None:
    tc.create_topic("tm-basic", queues=2)
    t0 = now_ms()
    offsets_ms = [2000, 4500, 3000, 6500, 2500, 5000]
    async with AsyncProducer(tc.namesrv, group="tm-pg") as producer:
        results = [await producer.send(Message("tm-basic", f"t{i}", keys=[f"k{i}"]),
                                       deliver_at=(t0 + off) / 1000) for i, off in enumerate(offsets_ms)]
        assert all(r.ok and r.queue_offset == -1 for r in results)
        # Nothing is visible yet, and the slave indexed all of them from the replicated log.
        assert max_offsets(master(tc), "tm-basic", 2) == 0
        await until(lambda: status(slave(tc)).timer_pending >= len(offsets_ms), 5, "slave timer index")
        assert status(master(tc)).timer_pending >= len(offsets_ms)
        # A time in the past is delivered at once.
        now = await producer.send(Message("tm-basic", "past"), deliver_at=(t0 - 10_000) / 1000)
        assert now.ok and now.queue_offset >= 0
    msgs = await collect(tc.namesrv, "tm-basic-c", "tm-basic", len(offsets_ms) + 1, within=20, quiet=0.5)
    timed = [m for m in msgs if m.text != "past"]
    assert sorted(m.text for m in timed) == sorted(f"t{i}" for i in range(len(offsets_ms)))
    assert len(msgs) == len(offsets_ms) + 1
    assert_on_time(timed)
    # Delivered in time order.
    assert [m.text for m in sorted(timed, key=lambda m: m.store_timestamp)] == [
        f"t{i}" for i in sorted(range(len(offsets_ms)), key=lambda i: offsets_ms[i])]
    assert all(m.keys == (f"k{m.text[1:]}",) for m in timed)
    await until(lambda: status(slave(tc)).timer_pending == 0, 5, "slave saw the deliveries")


@pytest.mark.asyncio
async def test_far_future_and_malformed_delivery_times_are_refused(tc: Cluster) -> None:
    tc.create_topic("tm-far", queues=1)
    async with AsyncProducer(tc.namesrv, group="tm-pg") as producer:
        before = status(master(tc)).timer_pending
        with pytest.raises(e.InvalidArgumentError, match="timerMaxDelaySec"):
            await producer.send(Message("tm-far", "x"), deliver_at=now_ms() / 1000 + 3600 + 60)
        with pytest.raises(e.InvalidArgumentError, match="TIMER_DELIVER_MS"):
            await producer.send(Message("tm-far", "x", properties={TIMER_DELIVER_MS: "soon"}))
        with pytest.raises(e.InvalidArgumentError):
            await producer.send_batch([Message("tm-far", "x", properties={TIMER_DELIVER_MS: "1"})])
        assert status(master(tc)).timer_pending == before
        ok = await producer.send(Message("tm-far", "in an hour"), deliver_at=now_ms() / 1000 + 3500)
        assert ok.ok and ok.queue_offset == -1
        await until(lambda: status(master(tc)).timer_pending == before + 1, 5, "indexed")
    assert max_offsets(master(tc), "tm-far", 1) == 0


class Checker:
    """A transaction checker answering from a table (UNKNOWN for anything not in it)."""

    def __init__(self) -> None:
        self.answers: dict[str, TransactionState] = {}
        self.calls: list[TransactionCheck] = []
        self.lock = threading.Lock()

    def __call__(self, check: TransactionCheck) -> TransactionState:
        with self.lock:
            self.calls.append(check)
        return self.answers.get(check.body.decode(), TransactionState.UNKNOWN)

    def checked(self, body: str) -> int:
        with self.lock:
            return sum(1 for c in self.calls if c.body.decode() == body)


@pytest.mark.asyncio
async def test_transactions_commit_rollback_and_check(tc: Cluster) -> None:
    tc.create_topic("tx-basic", queues=2)
    checker = Checker()
    checker.answers["unknown-then-commit"] = TransactionState.COMMIT
    decisions = {"commit": TransactionState.COMMIT, "rollback": TransactionState.ROLLBACK,
                 "unknown-then-commit": TransactionState.UNKNOWN, "failing": TransactionState.UNKNOWN}
    seen: list[SendResult] = []

    def local(msg: Message, result: SendResult) -> TransactionState:
        seen.append(result)
        if msg.body == b"failing":
            raise RuntimeError("local transaction failed")
        return decisions[msg.body.decode()]

    async with AsyncProducer(tc.namesrv, group="tx-pg", transaction_checker=checker) as producer:
        results = {body: await producer.send_in_transaction(Message("tx-basic", body), local)
                   for body in decisions}
        assert results["commit"].state is TransactionState.COMMIT
        assert results["rollback"].state is TransactionState.ROLLBACK
        assert results["failing"].state is TransactionState.UNKNOWN
        assert all(r.send.queue_offset == -1 and len(r.transaction_id) == 32 for r in results.values())
        # The half messages are invisible: only the committed one is in the topic.
        assert max_offsets(master(tc), "tx-basic", 2) == 1
        # The unresolved one is checked (after transactionTimeOut) and committed by the checker.
        await until(lambda: max_offsets(master(tc), "tx-basic", 2) == 2, 10, "checked transaction committed")
        assert checker.checked("unknown-then-commit") >= 1
        call = next(c for c in checker.calls if c.body == b"unknown-then-commit")
        assert call.transaction_id == results["unknown-then-commit"].transaction_id
        assert call.topic == "tx-basic" and call.properties.get("TRAN_MSG") is None
        # The failing one stays unresolved and keeps being checked.
        await until(lambda: checker.checked("failing") >= 2, 10, "repeated checks")
        # Ending a resolved transaction again is an error, as is a malformed id.
        with pytest.raises(e.NotFoundError):
            await producer._end_transaction(master(tc).addr, results["commit"].transaction_id, "",
                                            TransactionState.COMMIT, False)
        with pytest.raises(e.InvalidArgumentError):
            await producer._end_transaction(master(tc).addr, "not-an-id", "", TransactionState.COMMIT, False)
        checker.answers["failing"] = TransactionState.ROLLBACK
        await until(lambda: status(master(tc)).transaction_half_pending == 0, 10, "all resolved")
    msgs = await collect(tc.namesrv, "tx-basic-c", "tx-basic", 2, within=10, quiet=1.0)
    assert sorted(m.text for m in msgs) == ["commit", "unknown-then-commit"]
    assert all("TRAN_MSG" not in m.properties and "REAL_TOPIC" not in m.properties for m in msgs)
    assert max_offsets(master(tc), "tx-basic", 2) == 2
    # The slave followed: nothing pending there either.
    await until(lambda: status(slave(tc)).transaction_half_pending == 0, 5, "slave resolved")


def test_blocking_producer_sends_in_transaction(tc: Cluster) -> None:
    tc.create_topic("tx-sync", queues=1)
    with Producer(tc.namesrv, group="tx-sync-pg") as producer:
        committed = producer.send_in_transaction(Message("tx-sync", "yes"),
                                                 lambda _m, _r: TransactionState.COMMIT)
        rolled_back = producer.send_in_transaction(Message("tx-sync", "no"),
                                                   lambda _m, _r: TransactionState.ROLLBACK)
        timer = producer.send(Message("tx-sync", "later"), deliver_at=now_ms() / 1000 + 60)
    assert committed.state is TransactionState.COMMIT and rolled_back.state is TransactionState.ROLLBACK
    assert timer.ok and timer.queue_offset == -1
    assert max_offsets(master(tc), "tx-sync", 1) == 1


@pytest.mark.asyncio
async def test_unresolved_transaction_is_checked_after_a_broker_crash(tc: Cluster) -> None:
    tc.create_topic("tx-restart", queues=1)
    checker = Checker()  # UNKNOWN until told otherwise
    async with AsyncProducer(tc.namesrv, group="tx-restart-pg", transaction_checker=checker,
                             send_timeout=5) as producer:
        sent = await producer.send_in_transaction(
            Message("tx-restart", "pending"), lambda _m, _r: TransactionState.UNKNOWN)
        assert sent.state is TransactionState.UNKNOWN
        await until(lambda: checker.checked("pending") >= 1, 10, "first check")
        broker = master(tc)
        broker.proc.kill()
        tc.restart(broker)
        assert status(broker).transaction_half_pending == 1
        assert max_offsets(broker, "tx-restart", 1) == 0
        before = checker.checked("pending")
        checker.answers["pending"] = TransactionState.COMMIT
        # The producer's check stream reconnects to the restarted broker, which checks again.
        await until(lambda: max_offsets(broker, "tx-restart", 1) == 1, 20, "committed after restart")
        assert checker.checked("pending") > before
    msgs = await collect(tc.namesrv, "tx-restart-c", "tx-restart", 1, within=10, quiet=0.5)
    assert [m.text for m in msgs] == ["pending"]
    assert status(broker).transaction_half_pending == 0


@pytest.mark.asyncio
async def test_slave_serves_timers_and_transactions_after_failover(tc: Cluster) -> None:
    tc.create_topic("tm-failover", queues=2)
    tc.create_topic("tx-failover", queues=1)
    n = 40
    t0 = now_ms()
    old_master, old_slave = master(tc), slave(tc)
    checker = Checker()
    async with AsyncProducer(tc.namesrv, group="tx-failover-pg", transaction_checker=checker) as producer:
        for i in range(n):
            await producer.send(Message("tm-failover", f"f{i}"), deliver_at=(t0 + 8000 + i * 100) / 1000)
        await producer.send_in_transaction(Message("tx-failover", "committed"),
                                           lambda _m, _r: TransactionState.COMMIT)
        await producer.send_in_transaction(Message("tx-failover", "open"),
                                           lambda _m, _r: TransactionState.UNKNOWN)
        master_end = status(old_master).commit_log_max_offset
        await until(lambda: status(old_slave).commit_log_max_offset == master_end, 15, "slave caught up")
        await until(lambda: status(old_slave).transaction_half_pending == 1, 15, "slave knows the open one")
        # (metadata sync: the slave serves reads of topics it knows)
        await until(lambda: all(knows_topic(old_slave, t) for t in ("tx-failover", "tm-failover")), 15,
                    "slave knows the topics")
        assert status(old_slave).timer_pending >= n
        old_master.proc.kill()
        # Reads fail over to the slave: the committed message is there, the half message is not.
        got = await collect(tc.namesrv, "tx-failover-c", "tx-failover", 1, within=15, quiet=1.0)
        assert [m.text for m in got] == ["committed"]
        # The slave is restarted as the master (same store): it delivers the pending timers and
        # resolves the open transaction through the producer's checker.
        old_slave.proc.kill()
        promoted = tc.start_broker("broker-a", 0, *BROKER_FLAGS, port=old_slave.port,
                                   store_dir=old_slave.store_dir)
        assert status(promoted).timer_pending >= n
        assert status(promoted).transaction_half_pending == 1
        checker.answers["open"] = TransactionState.COMMIT
        await producer.watch_transactions("tx-failover")
        await until(lambda: max_offsets(promoted, "tx-failover", 1) == 2, 15, "open one committed by a check")
    msgs = await collect(tc.namesrv, "tm-failover-c", "tm-failover", n, within=25, quiet=1.0)
    counts = collections.Counter(m.text for m in msgs)
    assert set(counts) == {f"f{i}" for i in range(n)} and set(counts.values()) == {1}
    assert max_offsets(promoted, "tm-failover", 2) == n
    assert_on_time(msgs)

"""The timer crash test: 10k timer messages pending over the next 30 s, the broker SIGKILLed in
the middle of their delivery and restarted: every one is delivered exactly once, none early.

Prints delivery lateness (store time - delivery time) p50/p99/max and the broker's CPU use while
the 10k timers wait."""

from __future__ import annotations

import asyncio
import collections
import os
import statistics
from collections.abc import Iterator

import pytest

from pocketmq import AsyncProducer, Message
from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup, async_wait_until
from tests.integration.timer.helpers import BROKER_FLAGS, collect, max_offsets, now_ms, status

pytestmark = pytest.mark.slow

N = 10_000
SPREAD_MS = 30_000
TOPIC = "tm-crash"
QUEUES = 4


@pytest.fixture(scope="module")
def crash_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("timer-crash")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-t", 0, *BROKER_FLAGS)
        yield cluster
    finally:
        group.stop_all()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.asyncio
async def test_sigkill_with_10k_pending_timers_loses_and_duplicates_nothing(crash_cluster: Cluster) -> None:
    cluster = crash_cluster
    broker = cluster.brokers[0]
    cluster.create_topic(TOPIC, queues=QUEUES)
    t0 = now_ms()
    first_due = t0 + 15_000
    # Due times spread over 30 s, sent in a scrambled order (the index sorts them).
    due = {f"m{i}": first_due + (i * 7919 % N) * SPREAD_MS // N for i in range(N)}
    async with AsyncProducer(cluster.namesrv, group="tm-crash-pg", send_timeout=10) as producer:
        gate = asyncio.Semaphore(64)

        async def send(body: str) -> None:
            async with gate:
                result = await producer.send(Message(TOPIC, body, keys=[body]), deliver_at=due[body] / 1000)
                # Parked as a timer message, unless a slow machine sent it after its time.
                assert result.ok and (result.queue_offset == -1 or due[body] <= now_ms())

        await asyncio.gather(*(send(body) for body in due))
    sent_at = now_ms()
    await async_wait_until(lambda: max_offsets(broker, TOPIC, QUEUES) + status(broker).timer_pending == N, 5,
                           message="all indexed")
    # CPU the broker spends while 10k timers wait (nothing due, no traffic).
    window = min(3.0, (first_due - now_ms()) / 1000 - 0.5)
    cpu = None
    if window >= 1.0:
        before = cpu_seconds(broker.proc.pid)
        await asyncio.sleep(window)
        cpu = (cpu_seconds(broker.proc.pid) - before) / window
    # Kill the broker a quarter into the deliveries.
    await asyncio.sleep(max(0.0, (max(first_due + SPREAD_MS // 4, sent_at + 1000) - now_ms()) / 1000))
    delivered_before_kill = max_offsets(broker, TOPIC, QUEUES)
    broker.proc.kill()
    killed_at = now_ms()
    assert 0 < delivered_before_kill < N
    cluster.restart(broker)
    restarted_at = now_ms()
    await async_wait_until(lambda: max_offsets(broker, TOPIC, QUEUES) >= N, 60,
                           message="every timer message delivered after the restart")
    await asyncio.sleep(1.0)
    assert max_offsets(broker, TOPIC, QUEUES) == N, "a timer message was delivered twice"
    assert status(broker).timer_pending == 0

    msgs = await collect(cluster.namesrv, "tm-crash-c", TOPIC, N, within=60, quiet=1.0)
    counts = collections.Counter(m.text for m in msgs)
    assert len(counts) == N and set(counts) == set(due), "a timer message was lost"
    assert set(counts.values()) == {1}, "a timer message was delivered twice"
    lateness = {m.text: m.store_timestamp - due[m.text] for m in msgs}
    early = {body: -late for body, late in lateness.items() if late < 0}
    assert not early, f"{len(early)} delivered early, e.g. {sorted(early.items())[:3]}"
    # Messages due once the broker was back (plus a second to load its index) are on time.
    settled = [late for body, late in lateness.items() if due[body] >= restarted_at + 1000]
    assert settled and max(settled) <= 1000, f"late after restart: max {max(settled)} ms"
    values = list(lateness.values())
    print(f"\ntimer crash test: n={N} send_ms={sent_at - t0} delivered_before_kill={delivered_before_kill} "
          f"down_ms={restarted_at - killed_at} "
          f"lateness_all_ms p50={statistics.median(values):.0f} p99={percentile(values, 0.99)} "
          f"max={max(values)} lateness_after_restart_ms p50={statistics.median(settled):.0f} "
          f"p99={percentile(settled, 0.99)} max={max(settled)} "
          f"idle_cpu_with_10k_pending={'n/a' if cpu is None else f'{cpu * 100:.1f}%'}")

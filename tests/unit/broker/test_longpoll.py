from __future__ import annotations

import asyncio
import threading
import time

from services.broker.longpoll import QueueNotifier


def test_wait_times_out_without_notification() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        start = time.monotonic()
        assert await n.wait("t", 0, 0, 0.05) is False
        assert time.monotonic() - start >= 0.045
        assert n.waiting == 0

    asyncio.run(scenario())


def test_notify_wakes_only_that_queue() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        a = asyncio.create_task(n.wait("t", 0, 0, 5))
        b = asyncio.create_task(n.wait("t", 1, 0, 0.1))
        await asyncio.sleep(0.01)
        assert n.waiting == 2
        n.notify("t", 0)
        assert await a is True
        assert await b is False
        assert n.waiting == 0

    asyncio.run(scenario())


def test_poke_from_other_thread_wakes_queues_that_grew_and_is_coalesced() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        maxima = {("t", 0): 5, ("t", 1): 5, ("t", 2): 5}
        checks = []

        def max_offset(topic: str, queue_id: int) -> int:
            checks.append((topic, queue_id))
            return maxima[(topic, queue_id)]

        n = QueueNotifier(loop, max_offset)
        waiters = [asyncio.create_task(n.wait("t", q, 5, 5)) for q in range(3)]
        await asyncio.sleep(0.01)
        maxima[("t", 0)] = 6
        maxima[("t", 2)] = 9

        def burst() -> None:
            for _ in range(1000):
                n.poke()

        t = threading.Thread(target=burst)
        t.start()
        t.join()
        done, _ = await asyncio.wait(waiters, timeout=0.5)
        assert {w for w in done} == {waiters[0], waiters[2]}
        assert all(w.result() is True for w in done)
        assert len(checks) <= 6  # a few coalesced checks, not one per poke
        maxima[("t", 1)] = 6
        n.poke()
        assert await asyncio.wait_for(waiters[1], 1) is True

    asyncio.run(scenario())


def test_close_releases_waiters() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        w = asyncio.create_task(n.wait("t", 0, 0, 5))
        await asyncio.sleep(0.01)
        n.close()
        assert await w is True
        assert await n.wait("t", 0, 0, 5) is False

    asyncio.run(scenario())


def test_cancelled_wait_cleans_up() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        w = asyncio.create_task(n.wait("t", 0, 0, 5))
        await asyncio.sleep(0.01)
        w.cancel()
        await asyncio.gather(w, return_exceptions=True)
        assert n.waiting == 0

    asyncio.run(scenario())

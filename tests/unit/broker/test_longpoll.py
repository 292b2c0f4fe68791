from __future__ import annotations

import asyncio
import threading
import time

from services.broker.longpoll import QueueNotifier


def test_wait_times_out_without_notification() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        start = time.monotonic()
        assert await n.wait("t", 0, 0.05) is False
        assert time.monotonic() - start >= 0.045
        assert n.waiting == 0

    asyncio.run(scenario())


def test_notify_on_loop_wakes_only_that_queue() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        a = asyncio.create_task(n.wait("t", 0, 5))
        b = asyncio.create_task(n.wait("t", 1, 0.1))
        await asyncio.sleep(0.01)
        assert n.waiting == 2
        n.notify("t", 0)
        assert await a is True
        assert await b is False
        assert n.waiting == 0

    asyncio.run(scenario())


def test_notify_from_other_thread_is_coalesced() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        n = QueueNotifier(loop)
        waiters = [asyncio.create_task(n.wait("t", q, 5)) for q in range(3)]
        await asyncio.sleep(0.01)
        calls = []
        orig = loop.call_soon_threadsafe

        def counting(*args: object) -> object:
            calls.append(1)
            return orig(*args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]

        def burst() -> None:
            for _ in range(100):
                for q in range(3):
                    n.notify("t", q)

        t = threading.Thread(target=burst)
        start = time.monotonic()
        t.start()
        assert await asyncio.wait_for(asyncio.gather(*waiters), 2) == [True, True, True]
        t.join()
        assert time.monotonic() - start < 1
        assert len(calls) <= 3  # one callback per burst, not one per record

    asyncio.run(scenario())


def test_close_releases_waiters() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        w = asyncio.create_task(n.wait("t", 0, 5))
        await asyncio.sleep(0.01)
        n.close()
        assert await w is True
        assert await n.wait("t", 0, 5) is False

    asyncio.run(scenario())


def test_cancelled_wait_cleans_up() -> None:
    async def scenario() -> None:
        n = QueueNotifier(asyncio.get_running_loop())
        w = asyncio.create_task(n.wait("t", 0, 5))
        await asyncio.sleep(0.01)
        w.cancel()
        await asyncio.gather(w, return_exceptions=True)
        assert n.waiting == 0

    asyncio.run(scenario())

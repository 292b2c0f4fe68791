from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from services.broker.replication.waiter import ReplicationWaiter, WaiterClosedError


def test_already_replicated_returns_at_once() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter(acked_offset=100)
        assert await waiter.wait(100, timeout=0)
        assert await waiter.wait(50, timeout=1)
        assert not await waiter.wait(101, timeout=0)
        assert waiter.pending == 0

    asyncio.run(main())


def test_many_waiters_resolved_in_offset_order_by_acks() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        rng = random.Random(7)
        targets = [rng.randrange(1, 10_000) for _ in range(2000)]
        done: list[int] = []
        acked_when_done: list[int] = []

        async def send(target: int) -> None:
            assert await waiter.wait(target, timeout=10)
            assert waiter.acked_offset >= target
            done.append(target)
            acked_when_done.append(waiter.acked_offset)

        tasks = [asyncio.create_task(send(t)) for t in targets]
        await asyncio.sleep(0)
        assert waiter.pending == len(targets)
        acks = [*sorted(rng.sample(range(1, 10000), 50)), 10000]
        previous = 0
        for ack in acks:
            expected = sum(previous < t <= ack for t in targets)
            assert waiter.on_ack(ack) == expected
            previous = ack
            await asyncio.sleep(0)
            assert len(done) == sum(t <= ack for t in targets)
        await asyncio.gather(*tasks)
        assert done == sorted(targets)
        assert waiter.pending == 0
        assert waiter._heap == []

    asyncio.run(main())


def test_acks_never_move_backwards() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        assert waiter.on_ack(100) == 0
        assert waiter.on_ack(50) == 0
        assert waiter.acked_offset == 100
        with pytest.raises(ValueError):
            waiter.on_ack(-1)

    asyncio.run(main())


def test_wake_up_is_event_driven() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        task = asyncio.create_task(waiter.wait(500, timeout=30))
        await asyncio.sleep(0.05)
        assert not task.done()
        waiter.on_ack(500)
        # The ack itself completes the wait: within a few turns of the loop, before any timer
        # (the 30 s timeout) could fire, however slow the machine.
        for _ in range(10):
            if task.done():
                break
            await asyncio.sleep(0)
        assert task.done() and task.result() is True

    asyncio.run(main())


def test_timeout_is_a_real_deadline() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        started = time.monotonic()
        assert not await waiter.wait(10, timeout=0.2)
        elapsed = time.monotonic() - started
        assert 0.19 <= elapsed < 0.4
        assert waiter.pending == 0

    asyncio.run(main())


def test_timeout_is_not_extended_by_unrelated_acks() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()

        async def acker() -> None:
            for ack in range(1, 40):
                waiter.on_ack(ack)
                await asyncio.sleep(0.01)

        ack_task = asyncio.create_task(acker())
        started = time.monotonic()
        assert not await waiter.wait(1_000, timeout=0.2)
        assert 0.19 <= time.monotonic() - started < 0.4
        await ack_task

    asyncio.run(main())


def test_wait_until_uses_an_absolute_deadline() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        waiter = ReplicationWaiter()
        deadline = loop.time() + 0.5
        await asyncio.sleep(0.4)
        started = loop.time()
        assert not await waiter.wait_until(10, deadline)
        # Ends at the deadline (~0.1 s after ``started``), not 0.5 s after the call.
        assert loop.time() - started < 0.45
        assert not await waiter.wait_until(10, loop.time() - 1)

    asyncio.run(main())


def test_ack_racing_the_deadline_counts_as_success() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        waiter = ReplicationWaiter()
        start = loop.time()
        task = asyncio.create_task(waiter.wait_until(10, start + 0.05))
        await asyncio.sleep(0)
        # Block the loop past the deadline so the ack and the deadline fire in the same
        # iteration, ack first: the deadline then interrupts a wait that already succeeded.
        loop.call_at(start + 0.04, waiter.on_ack, 10)
        loop.call_soon(time.sleep, 0.1)
        assert await task is True
        assert waiter.pending == 0

    asyncio.run(main())


def test_timeouts_and_cancellations_do_not_leak() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        tasks = [asyncio.create_task(waiter.wait(1_000 + i, timeout=60)) for i in range(5000)]
        await asyncio.sleep(0)
        assert waiter.pending == 5000
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        assert waiter.pending == 0
        assert len(waiter._heap) < 100, "cancelled entries must be purged"

        timed_out = await asyncio.gather(*(waiter.wait(10_000 + i, timeout=0.01) for i in range(5000)))
        assert not any(timed_out)
        assert waiter.pending == 0
        assert len(waiter._heap) < 100

        # A live waiter survives the purges and is still woken.
        live = asyncio.create_task(waiter.wait(2_000_000, timeout=60))
        await asyncio.gather(*(waiter.wait(3_000_000 + i, timeout=0.01) for i in range(1000)))
        waiter.on_ack(2_000_000)
        assert await live
        waiter.on_ack(10**9)
        assert waiter._heap == []

    asyncio.run(main())


def test_cancelled_waiter_does_not_hide_others() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        doomed = asyncio.create_task(waiter.wait(10, timeout=60))
        survivor = asyncio.create_task(waiter.wait(10, timeout=60))
        await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.sleep(0)
        assert waiter.on_ack(10) == 1
        assert await survivor
        assert doomed.cancelled()

    asyncio.run(main())


def test_close_fails_pending_waiters() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter()
        tasks = [asyncio.create_task(waiter.wait(100 + i, timeout=60)) for i in range(10)]
        await asyncio.sleep(0)
        assert waiter.close("broker shutting down") == 10
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, WaiterClosedError) for r in results)
        assert "shutting down" in str(results[0])
        assert waiter.closed
        assert waiter.pending == 0
        with pytest.raises(WaiterClosedError):
            await waiter.wait(1_000, timeout=1)
        waiter.on_ack(50)
        assert await waiter.wait(50, timeout=1), "already replicated data is still reported as such"
        assert waiter.close() == 0

    asyncio.run(main())


def test_on_ack_threadsafe() -> None:
    async def main() -> None:
        waiter = ReplicationWaiter(loop=asyncio.get_running_loop())

        def report() -> None:
            for offset in (10, 20, 30):
                waiter.on_ack_threadsafe(offset)

        thread = threading.Thread(target=report)
        task = asyncio.create_task(waiter.wait(30, timeout=5))
        await asyncio.sleep(0)
        thread.start()
        assert await task
        thread.join()
        assert waiter.acked_offset == 30

    asyncio.run(main())


def test_threadsafe_needs_a_loop() -> None:
    with pytest.raises(RuntimeError):
        ReplicationWaiter().on_ack_threadsafe(1)


def test_bound_to_one_loop() -> None:
    waiter = ReplicationWaiter()

    async def use() -> bool:
        return await waiter.wait(10, timeout=0.01)

    assert asyncio.run(use()) is False
    with pytest.raises(RuntimeError, match="different event loop"):
        asyncio.run(use())


def test_negative_initial_offset() -> None:
    with pytest.raises(ValueError):
        ReplicationWaiter(acked_offset=-1)


def test_a_waiter_bound_to_a_loop_refuses_another() -> None:
    waiter = ReplicationWaiter()
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        waiter.bind(first)
        waiter.bind(first)  # (the same loop again is fine)
        with pytest.raises(RuntimeError, match="another event loop"):
            waiter.bind(second)
    finally:
        first.close()
        second.close()

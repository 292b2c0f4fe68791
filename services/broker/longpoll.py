"""Event-driven waiting for new messages in a queue (RocketMQ's PullRequestHoldService without
the polling).

A pull that finds nothing new parks on :meth:`QueueNotifier.wait` with the offset it waits
beyond. It is woken by

* :meth:`QueueNotifier.notify` - the broker appended to exactly this (topic, queue) (the send
  path and delayed delivery call it right after their append, on the loop); or
* :meth:`QueueNotifier.poke` - "something was appended somewhere" from any thread (the store's
  append listener, e.g. replicated data dispatched on a slave). Pokes are coalesced into one
  loop callback per burst, which wakes the waiters whose queue's max offset moved past the
  offset they wait beyond.

Either way the woken pull re-reads the queue; a wake-up is a hint, never a promise.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

Key = tuple[str, int]
MaxOffset = Callable[[str, int], int]


class QueueNotifier:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_offset: MaxOffset | None = None) -> None:
        self._loop = loop
        self._max_offset = max_offset
        self._loop_thread = threading.get_ident()
        # key -> {future: offset waited beyond}
        self._waiters: dict[Key, dict[asyncio.Future[bool], int]] = {}
        self._poke_lock = threading.Lock()
        self._poke_scheduled = False
        self._closed = False

    @property
    def waiting(self) -> int:
        """Number of parked waits (for metrics and tests)."""
        return sum(len(w) for w in self._waiters.values())

    def notify(self, topic: str, queue_id: int) -> None:
        """New data in (topic, queue_id): wake its waiters. Call on the loop."""
        waiters = self._waiters.pop((topic, queue_id), None)
        if waiters:
            _resolve(waiters, True)

    def poke(self) -> None:
        """Something was appended (any thread): re-check every waiting queue's max offset."""
        if not self._waiters or self._max_offset is None:  # GIL-atomic read
            return
        with self._poke_lock:
            if self._poke_scheduled:
                return
            self._poke_scheduled = True
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._check_all)
            return
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self._loop.call_soon_threadsafe(self._check_all)

    def _check_all(self) -> None:
        with self._poke_lock:
            self._poke_scheduled = False
        max_offset = self._max_offset
        assert max_offset is not None
        for key in list(self._waiters):
            waiters = self._waiters.get(key)
            if not waiters:
                continue
            current = max_offset(*key)
            ready = [fut for fut, offset in waiters.items() if current > offset]
            for fut in ready:
                del waiters[fut]
                if not fut.done():
                    fut.set_result(True)
            if not waiters:
                del self._waiters[key]

    def wake_all(self) -> None:
        """Wake every waiter (shutdown: parked pulls return at once)."""
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            _resolve(group, True)

    def close(self) -> None:
        self._closed = True
        self.wake_all()

    @property
    def closed(self) -> bool:
        return self._closed

    async def wait(self, topic: str, queue_id: int, offset: int, wait_s: float) -> bool:
        """Park until (topic, queue_id) gets data beyond ``offset`` (or is notified) or
        ``wait_s`` seconds pass. True when woken by a notification. Run on the loop."""
        if self._closed or wait_s <= 0:
            await asyncio.sleep(0)  # never starve the loop, even when called in a loop
            return False
        key = (topic, queue_id)
        fut: asyncio.Future[bool] = self._loop.create_future()
        self._waiters.setdefault(key, {})[fut] = offset
        handle = self._loop.call_later(wait_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.pop(fut, None)
                if not waiters:
                    del self._waiters[key]


def _resolve(waiters: dict[asyncio.Future[bool], int], value: bool) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(value)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)

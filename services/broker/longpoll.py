"""Event-driven waiting for new messages in a queue (RocketMQ's PullRequestHoldService without
the polling).

A pull that finds nothing new parks on :meth:`QueueNotifier.wait`; the store's append listener
calls :meth:`QueueNotifier.notify` from any thread (the loop itself, or the store's
dispatch thread), which wakes every waiter of that (topic, queue). Notifications from
other threads are coalesced: one loop callback per burst, however many records were appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

Key = tuple[str, int]


class QueueNotifier:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[Key, set[asyncio.Future[bool]]] = {}
        self._pending: set[Key] = set()
        self._pending_lock = threading.Lock()
        self._scheduled = False
        self._closed = False

    @property
    def waiting(self) -> int:
        """Number of parked waits (for metrics and tests)."""
        return sum(len(w) for w in self._waiters.values())

    def notify(self, topic: str, queue_id: int) -> None:
        """New data in (topic, queue_id): wake its waiters. Any thread."""
        key = (topic, queue_id)
        if key not in self._waiters:  # GIL-atomic read; a waiter parks only on the loop
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(key)
            return
        with self._pending_lock:
            self._pending.add(key)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._pending_lock:
            keys, self._pending = self._pending, set()
            self._scheduled = False
        for key in keys:
            self._wake(key)

    def _wake(self, key: Key) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    def wake_all(self) -> None:
        """Wake every waiter (shutdown: parked pulls return at once)."""
        for key in list(self._waiters):
            self._wake(key)

    def close(self) -> None:
        self._closed = True
        self.wake_all()

    async def wait(self, topic: str, queue_id: int, wait_s: float) -> bool:
        """Park until (topic, queue_id) gets new data or ``wait_s`` seconds pass. Returns True
        when woken by a notification. Must run on the notifier's loop."""
        if self._closed or wait_s <= 0:
            return False
        key = (topic, queue_id)
        fut: asyncio.Future[bool] = self._loop.create_future()
        self._waiters.setdefault(key, set()).add(fut)
        handle = self._loop.call_later(wait_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[key]


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)

"""A slave session's receive buffers and the appends it handed to its writer thread.

The slave reads into a few preallocated buffers in turn; a large read is appended on a writer
thread while the next reads go on (see ``docs/replication.md``, "Bulk reads"). This module keeps
the bookkeeping of that: which buffers are free, which appends the writer has not taken yet
(their buffer is still in use), and which are not yet in the commit log (not yet ackable),
oldest first. No sockets and no files here; the session in :mod:`.slave` drives it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from services.broker.replication.events import Event

__all__ = ["Appends", "Write", "chain"]

#: An append handed to the writer thread (done with the bytes it appended once they are in
#: the commit log).
Write = concurrent.futures.Future[int]


def chain(source: concurrent.futures.Future[int], target: Write, minus: int) -> None:
    """Give ``target`` the outcome of ``source`` (less ``minus``) once it is done."""
    def done(source: concurrent.futures.Future[int]) -> None:
        exc = source.exception()
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result() - minus)

    source.add_done_callback(done)


class Appends:
    """A session's receive buffers; the appends handed to the writer thread whose bytes it has
    not taken yet, each with the buffer they are views of; and every append not yet in the
    commit log, oldest first."""

    def __init__(self, count: int, size: int) -> None:
        self.free = collections.deque(memoryview(bytearray(size)) for _ in range(count))
        self.taking: collections.deque[tuple[concurrent.futures.Future[None], memoryview]] = \
            collections.deque()
        self.running: collections.deque[Write] = collections.deque()
        self._waiter: tuple[concurrent.futures.Future[Any], asyncio.Future[Any]] | None = None

    def submit(self, writer: concurrent.futures.Executor, append: Callable[[Sequence[Event], Write], None],
               events: Sequence[Event]) -> None:
        """Hand the append of ``events``, views of the first free buffer, to ``writer``:
        ``append(events, written)`` returns once it took the bytes, and ``written`` gets how
        many once they are in the commit log."""
        written: Write = concurrent.futures.Future()

        def take() -> None:
            try:
                append(events, written)
            except BaseException as exc:
                written.set_exception(exc)
                raise

        self.taking.append((writer.submit(take), self.free.popleft()))
        self.running.append(written)

    def oldest_taken(self) -> asyncio.Future[Any]:
        """An asyncio future of the writer thread taking the oldest buffer's bytes."""
        return self._wait(self.taking[0][0])

    def oldest_done(self) -> asyncio.Future[Any]:
        """An asyncio future of the oldest append being in the commit log."""
        return self._wait(self.running[0])

    def _wait(self, future: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
        """The same asyncio future for every wait on ``future`` (each one made wakes the event
        loop when ``future`` is done)."""
        if self._waiter is None or self._waiter[0] is not future:
            waiter = asyncio.wrap_future(future)
            # (what it raises is reported by collect(); an unread exception would be logged)
            waiter.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._waiter = (future, waiter)
        return self._waiter[1]

    def collect(self) -> int:
        """Free the buffers whose bytes were taken; returns the bytes of the appends at the
        head of the queue that are in the commit log; raises what one of them raised."""
        while self.taking and self.taking[0][0].done():
            self.free.append(self.taking.popleft()[1])
        size = 0
        while self.running and self.running[0].done():
            size += self.running.popleft().result()
        return size

    def wait_all(self) -> None:
        """Wait for every append (errors were or will be reported by the session)."""
        for written in self.running:
            with contextlib.suppress(Exception):
                written.result()


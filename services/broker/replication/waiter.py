"""Sync replication: waiting for slave acks (SYNC_MASTER) and per-slave ack bookkeeping.

:class:`ReplicationWaiter` lets a send wait, with a real deadline, until the replicated
offset reaches its message's end offset.  Waiters sit in a heap keyed by target offset,
so each ack wakes exactly the waiters it satisfies (O(k log n) for k of n waiters) and
nothing polls.

:class:`SlaveAckTracker` is pure bookkeeping: each slave's latest ack,
``push2SlaveMaxOffset`` and lag.  The master's I/O layer feeds it acks and passes
:attr:`SlaveAckTracker.push2slave_max_offset` to :meth:`ReplicationWaiter.on_ack`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Final

from services.broker.config import BrokerConfig
from services.broker.replication.errors import AckBeyondMaxOffsetError

__all__ = [
    "DEFAULT_SLAVE_FALLBEHIND_MAX",
    "ReplicationWaiter",
    "SlaveAckTracker",
    "WaiterClosedError",
]

#: ``haSlaveFallbehindMax`` (its default is :class:`~services.broker.config.BrokerConfig`'s): a
#: slave further behind than this is not "available".
DEFAULT_SLAVE_FALLBEHIND_MAX: Final = BrokerConfig.ha_slave_fallbehind_max


class WaiterClosedError(RuntimeError):
    """The waiter was closed (shutdown or role change) before the offset was replicated."""


_Entry = tuple[int, int, "asyncio.Future[bool]"]


class ReplicationWaiter:
    """Futures keyed by commit-log offset, resolved by slave acks.

    All methods except :meth:`on_ack_threadsafe` must be called on the event loop the
    waiter is bound to: the loop passed in, or else the running loop of the first
    :meth:`wait`.  ``acked_offset`` only moves forward; a lower ack is ignored.

    Timed-out and cancelled waits leave a dead entry in the heap; dead entries are dropped
    when an ack reaches them, and the heap is rebuilt once they outnumber the live ones,
    so memory stays proportional to the number of live waits.
    """

    _COMPACT_MIN_DEAD: Final = 64

    def __init__(self, acked_offset: int = 0, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if acked_offset < 0:
            raise ValueError(f"acked offset {acked_offset} is negative")
        self._acked = acked_offset
        self._loop = loop
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._pending = 0
        self._dead = 0  # cancelled futures still in the heap (may briefly over-count)
        self._closed: WaiterClosedError | None = None

    @property
    def acked_offset(self) -> int:
        """The highest replicated offset reported through :meth:`on_ack`."""
        return self._acked

    @property
    def pending(self) -> int:
        """Number of waits in progress."""
        return self._pending

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to ``loop`` now (otherwise the first wait binds the loop it runs on)."""
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("ReplicationWaiter is bound to another event loop already")
        self._loop = loop

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        running = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = running
        elif self._loop is not running:
            raise RuntimeError("ReplicationWaiter used from a different event loop than it is bound to")
        return running

    async def wait(self, offset: int, timeout: float) -> bool:  # noqa: ASYNC109 - the deadline is the contract
        """Wait until the acked offset reaches ``offset`` (a message's end offset).

        Returns True once replicated, False when ``timeout`` seconds passed first (a real
        deadline on the loop's clock, not a count of wake-ups).  Raises
        :class:`WaiterClosedError` if the waiter is or gets closed first; an offset that is
        already replicated returns True even after close.  Cancelling the calling task
        cancels the wait cleanly.
        """
        if offset <= self._acked:
            return True
        return await self.wait_until(offset, self._bind_loop().time() + timeout)

    async def wait_until(self, offset: int, deadline: float) -> bool:
        """Like :meth:`wait` with an absolute deadline in ``loop.time()`` terms, so one
        budget (``slaveTimeout`` from the start of a send) can span several waits."""
        if offset <= self._acked:
            return True
        if self._closed is not None:
            raise WaiterClosedError(str(self._closed))
        loop = self._bind_loop()
        if deadline <= loop.time():
            return False
        fut: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._heap, (offset, next(self._seq), fut))
        self._pending += 1
        try:
            async with asyncio.timeout_at(deadline):
                return await fut
        except TimeoutError:
            # The ack may have landed in the same loop iteration as the deadline.
            if fut.done() and not fut.cancelled():
                return fut.result()
            return False
        finally:
            self._pending -= 1
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # mark a close() error as retrieved even if we were cancelled
            if fut.cancelled():
                self._dead += 1
                self._maybe_compact()

    def on_ack(self, offset: int) -> int:
        """Record that slaves have replicated up to ``offset``; wake every satisfied wait.

        Returns the number of waits woken.  Call on the waiter's event loop.
        """
        if offset < 0:
            raise ValueError(f"acked offset {offset} is negative")
        if offset <= self._acked:
            return 0
        self._acked = offset
        heap = self._heap
        woken = 0
        while heap and heap[0][0] <= offset:
            fut = heapq.heappop(heap)[2]
            if fut.cancelled():
                self._dead -= 1
            elif not fut.done():
                fut.set_result(True)
                woken += 1
        return woken

    def on_ack_threadsafe(self, offset: int) -> None:
        """:meth:`on_ack` from any thread (scheduled on the bound loop)."""
        if self._loop is None:
            raise RuntimeError("ReplicationWaiter is not bound to an event loop yet; pass loop=")
        self._loop.call_soon_threadsafe(self.on_ack, offset)

    def close(self, reason: str = "replication waiter closed") -> int:
        """Fail every pending wait with :class:`WaiterClosedError`; later waits for offsets
        not yet replicated fail at once.  Returns the number of waits failed."""
        if self._closed is None:
            self._closed = WaiterClosedError(reason)
        failed = 0
        for _, _, fut in self._heap:
            if not fut.done():
                fut.set_exception(WaiterClosedError(reason))
                failed += 1
        self._heap.clear()
        self._dead = 0
        return failed

    def _maybe_compact(self) -> None:
        if self._dead >= self._COMPACT_MIN_DEAD and 2 * self._dead > len(self._heap):
            self._heap = [entry for entry in self._heap if not entry[2].done()]
            heapq.heapify(self._heap)
            self._dead = 0


class SlaveAckTracker:
    """Each connected slave's latest ack, ``push2SlaveMaxOffset`` and lag (pure).

    * ``push2slave_max_offset`` is the highest offset any slave ever acknowledged.  It
      never decreases, not even when that slave disconnects or reconnects lower (the
      original's semantics, which dashboards know); it is what sync waits are released by.
    * Per-slave acks are the truth for each connected slave and may go down when a slave
      reconnects after truncating its log.  Availability for sync writes is judged on the
      connected slaves only, so a lagging or departed slave is not hidden behind the max.
    * An invalid ack (negative, or beyond the master's max offset) raises and changes
      nothing.
    """

    def __init__(self, push2slave_max_offset: int = 0) -> None:
        if push2slave_max_offset < 0:
            raise ValueError(f"offset {push2slave_max_offset} is negative")
        self._acks: dict[str, int] = {}
        self._push2slave_max = push2slave_max_offset

    @property
    def push2slave_max_offset(self) -> int:
        return self._push2slave_max

    @property
    def slave_ids(self) -> tuple[str, ...]:
        return tuple(self._acks)

    def __len__(self) -> int:
        return len(self._acks)

    def __contains__(self, slave_id: object) -> bool:
        return slave_id in self._acks

    def update(self, slave_id: str, ack_offset: int, master_max_offset: int) -> bool:
        """Record ``slave_id``'s ack; returns True if ``push2slave_max_offset`` rose."""
        if ack_offset < 0:
            raise ValueError(f"slave {slave_id} acknowledged a negative offset {ack_offset}")
        if ack_offset > master_max_offset:
            raise AckBeyondMaxOffsetError(ack_offset, master_max_offset)
        self._acks[slave_id] = ack_offset
        if ack_offset > self._push2slave_max:
            self._push2slave_max = ack_offset
            return True
        return False

    def remove(self, slave_id: str) -> None:
        """Forget a disconnected slave (``push2slave_max_offset`` is kept)."""
        self._acks.pop(slave_id, None)

    def ack_offset(self, slave_id: str) -> int | None:
        return self._acks.get(slave_id)

    @property
    def best_ack_offset(self) -> int | None:
        """The highest ack among connected slaves (None when none is connected)."""
        return max(self._acks.values(), default=None)

    def lag(self, slave_id: str, master_max_offset: int) -> int:
        """Bytes ``slave_id`` is behind ``master_max_offset`` (KeyError if not connected)."""
        return max(0, master_max_offset - self._acks[slave_id])

    def lags(self, master_max_offset: int) -> dict[str, int]:
        return {sid: max(0, master_max_offset - ack) for sid, ack in self._acks.items()}

    def slave_available(
        self, master_put_offset: int, fall_behind_max: int = DEFAULT_SLAVE_FALLBEHIND_MAX
    ) -> bool:
        """Whether a SYNC_MASTER write ending at ``master_put_offset`` may wait for a slave:
        some connected slave is behind it by less than ``fall_behind_max`` bytes."""
        best = self.best_ack_offset
        return best is not None and master_put_offset - best < fall_behind_max

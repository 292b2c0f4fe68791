"""Background broker services: a set of asyncio tasks stopped together
(:class:`BackgroundService`), and one that follows system-topic queues into an in-memory state
and snapshots that state to a file (:class:`SystemTopicFollower`, the timer index and the
transaction index)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from services.broker.longpoll import QueueNotifier
from services.broker.metadata.base import write_file_atomic
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.systopic import QueueReader

#: How long an idle follower waits for new records before looking again.
IDLE_WAIT_S = 5.0
#: How long a failed step waits before it is retried.
RETRY_DELAY_S = 1.0

#: Appends messages to the store in one write (the send path's append).
Append = Callable[[Sequence[record.Message]], PutResult]


class BackgroundService:
    """Tasks started by :meth:`spawn`, cancelled and awaited by :meth:`stop`."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(0.0, seconds))
        return self._stop.is_set()


class SystemTopicFollower(BackgroundService):
    """Follows queues of a system topic in ``store`` (:meth:`catch_up`) and snapshots what it
    built (:meth:`snapshot_bytes`) to ``snapshot_path`` when it changed, and on stop; on masters
    it writes its records with ``append``.

    ``name`` names the state in log lines ("timer", "transaction")."""

    name = "system topic"

    def __init__(self, store: QueueReader, snapshot_path: Path, *, append: Append, notifier: QueueNotifier,
                 master: bool, store_host: record.Host, clock_ms: Callable[[], int]) -> None:
        super().__init__()
        self.store = store
        self.snapshot_path = snapshot_path
        self.append = append
        self.notifier = notifier
        self.master = master
        self.store_host = store_host
        self.clock_ms = clock_ms
        self._dirty = False
        self._log = logging.getLogger(type(self).__module__)

    def catch_up(self, limit: int | None = 4096) -> int:
        """Apply new records (at most ``limit`` per queue); the records read."""
        raise NotImplementedError

    def snapshot_bytes(self) -> bytes:
        raise NotImplementedError

    def wait_target(self) -> tuple[str, int, int]:
        """(topic, queue id, offset) whose next record an idle follower waits for."""
        raise NotImplementedError

    async def save_snapshot(self) -> None:
        """Write the snapshot if the state changed (captured on the loop, written in a thread)."""
        if not self._dirty:
            return
        self._dirty = False
        data = self.snapshot_bytes()
        try:
            await asyncio.to_thread(write_file_atomic, self.snapshot_path, data)
        except OSError as exc:
            self._dirty = True
            self._log.error(f"cannot write the {self.name} snapshot", extra={"file": str(self.snapshot_path),
                                                                       "error": str(exc)})

    async def stop(self) -> None:
        await super().stop()
        self._dirty = True
        await self.save_snapshot()

    async def _follow_loop(self, *, save_when_idle: bool) -> None:
        while not self._stop.is_set():
            try:
                if self.catch_up() == 0:
                    if save_when_idle:
                        await self.save_snapshot()
                    await self.notifier.wait(*self.wait_target(), IDLE_WAIT_S)
                else:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception(f"{self.name} index update failed, retrying")
                await self._sleep(RETRY_DELAY_S)

"""Background threads of the store: commit log flushing and periodic maintenance.

* :class:`FlushRealTimeService` (ASYNC_FLUSH): flushes the commit log every
  ``flushIntervalCommitLog`` ms once ``flushCommitLogLeastPages`` pages are dirty, and
  everything at least every ``flushCommitLogThoroughInterval`` ms.
* :class:`GroupCommitService` (SYNC_FLUSH): group commit. Writers append, then wait until the
  flushed offset reaches the end of their records; one thread runs one sync for everyone who
  arrived meanwhile, so the sync rate does not bound the message rate. Blocking writers call
  :meth:`GroupCommitService.wait`; asyncio callers take a ``concurrent.futures.Future`` from
  :meth:`GroupCommitService.request`.
* :class:`ServiceThread`: a named daemon thread that runs a function periodically (the store's
  maintenance loop: consume queue flush + checkpoint, expired file deletion).

The sync itself (``fdatasync``) releases the GIL, so writers keep going while it runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

from services.broker.storage.status import PutMessageStatus

log = logging.getLogger(__name__)


class ServiceThread:
    """Runs ``tick()`` every ``interval`` seconds (or sooner after :meth:`wakeup`) until stopped.
    Exceptions from ``tick`` are logged and the loop goes on.

    :meth:`wakeup` is called on hot paths (the appending thread wakes the committer), so the
    signal is a bare lock used as a binary semaphore (the thread blocks acquiring it, a wake-up
    releases it) behind a flag: a wake-up while one is pending reads a flag and returns, the
    first costs one ``release`` (an ``Event`` costs a condition variable round trip)."""

    def __init__(self, name: str, interval: float, tick: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self._tick = tick
        self._signal = threading.Lock()
        self._signal.acquire()
        self._signalled = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wakeup(self) -> None:
        if not self._signalled:
            self._signalled = True
            try:  # noqa: SIM105 (cheaper than contextlib.suppress: the appending thread calls this)
                self._signal.release()
            except RuntimeError:  # released already by another thread
                pass

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        self._signalled = False
        self.wakeup()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s did not stop within %.1fs", self.name, timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping:
            self._signal.acquire(timeout=self.interval)
            self._signalled = False
            if self._stopping:
                break
            try:
                self._tick()
            except Exception:
                log.exception("%s: periodic task failed", self.name)


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH: periodic commit log flush. ``flush(least_pages)`` returns the flushed offset."""

    def __init__(self, flush: Callable[[int], int], interval_ms: int, least_pages: int,
                 thorough_interval_ms: int) -> None:
        super().__init__("FlushRealTimeService", interval_ms / 1000, self._flush_once)
        self._flush = flush
        self._least_pages = least_pages
        self._thorough_interval = thorough_interval_ms / 1000
        self._last_thorough = time.monotonic()

    def _flush_once(self) -> None:
        now = time.monotonic()
        least = self._least_pages
        if now - self._last_thorough >= self._thorough_interval:
            self._last_thorough = now
            least = 0
        self._flush(least)


class GroupCommitService:
    """SYNC_FLUSH group commit. ``flush()`` syncs everything written and returns the flushed
    offset; it runs only on this service's thread (and once more in :meth:`stop`).

    A blocking writer parks on a lock of its own that the flush thread releases, so waking N
    writers costs N lock releases, not N threads queueing for one condition lock.

    Gathering: right after a flush wakes N waiters, those writers usually come straight back
    with their next record. Syncing as soon as the first one arrives would flush one record and
    make the other N-1 wait a whole extra sync, so before syncing the thread waits until N
    requests are pending again, but never longer than the last sync took (capped at
    ``max_gather``): the same bargain as MySQL's ``binlog_group_commit_sync_delay``.
    """

    def __init__(self, flush: Callable[[], int], flushed_offset: int, *, idle_interval: float = 0.5,
                 max_gather: float = 0.002) -> None:
        self._flush = flush
        self._idle_interval = idle_interval
        self._max_gather = max_gather
        self._expected = 0  # waiters woken by the last flush
        self._gather = 0.0  # how long the last sync took (capped)
        self._gathering = False
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the flush thread waits here
        self._flushed = flushed_offset
        self._requested = flushed_offset
        # (end offset, parked lock) of blocking writers; (end offset, future) of asynchronous ones
        self._waiters: list[tuple[int, threading.Lock]] = []
        #: Flushed writers not woken yet: each woken writer wakes the last one of the list.
        self._relay: list[threading.Lock] = []
        self._futures: list[tuple[int, Future[PutMessageStatus]]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="GroupCommitService", daemon=True)
            self._thread.start()

    def _want(self, end_offset: int) -> None:
        if end_offset > self._requested:
            self._requested = end_offset
            if not self._gathering:
                self._work.notify()
        if self._gathering and len(self._waiters) + len(self._futures) >= self._expected:
            self._work.notify()  # everyone is back: sync now

    def wait(self, end_offset: int, timeout: float) -> bool:
        """Block until data up to ``end_offset`` is flushed; False after ``timeout`` seconds."""
        parked = threading.Lock()
        parked.acquire()
        with self._lock:
            if self._flushed >= end_offset:
                return True
            entry = (end_offset, parked)
            self._waiters.append(entry)
            self._want(end_offset)
        if parked.acquire(timeout=timeout):
            self._pass_on()
            return True
        with self._lock:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)
            flushed = self._flushed >= end_offset
        self._pass_on()
        return flushed

    def _pass_on(self) -> None:
        """Wake the next writer the last flush released (see :meth:`_wake_waiters`)."""
        relay = self._relay
        if relay:
            with contextlib.suppress(IndexError):  # (another writer took the last one)
                relay.pop().release()

    def request(self, end_offset: int) -> Future[PutMessageStatus]:
        """A future that resolves to PUT_OK once ``end_offset`` is flushed (FLUSH_DISK_TIMEOUT
        if the service stops first). It has no deadline of its own, since a hung disk also hangs
        this thread: the caller bounds its wait (``syncFlushTimeout``) and may cancel it."""
        future: Future[PutMessageStatus] = Future()
        with self._lock:
            if self._flushed >= end_offset:
                future.set_result(PutMessageStatus.PUT_OK)
                return future
            self._futures.append((end_offset, future))
            self._want(end_offset)
        return future

    def reset(self, flushed_offset: int) -> None:
        """The log was truncated: forget flush progress beyond ``flushed_offset``."""
        with self._lock:
            self._flushed = min(self._flushed, flushed_offset)
            self._requested = min(self._requested, flushed_offset)

    def stop(self, timeout: float = 10.0) -> None:
        """Flush one last time, wake every waiter and stop the thread."""
        with self._lock:
            self._stopping = True
            self._work.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("GroupCommitService did not stop within %.1fs", timeout)
            self._thread = None
        with self._lock:
            for _, future in self._futures:
                _resolve(future, PutMessageStatus.FLUSH_DISK_TIMEOUT)
            self._futures.clear()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and self._requested <= self._flushed:
                    if not self._work.wait(self._idle_interval):
                        break  # periodic flush of data nobody waits for (e.g. replicated)
                if self._expected > 1 and self._gather > 0:
                    self._gathering = True
                    deadline = time.monotonic() + self._gather
                    while (len(self._waiters) + len(self._futures) < self._expected and not self._stopping
                           and self._work.wait(max(deadline - time.monotonic(), 0))):
                        pass
                    self._gathering = False
                stopping = self._stopping
            started = time.monotonic()
            try:
                flushed = self._flush()
            except Exception:
                log.exception("group commit: flush failed")
                time.sleep(0.01)
                flushed = self._flushed
            took = time.monotonic() - started
            with self._lock:
                if flushed > self._flushed:
                    self._flushed = flushed
                if flushed > self._requested:
                    self._requested = flushed
                woken = len(self._waiters) + len(self._futures)
                if self._waiters:
                    self._wake_waiters()
                if self._futures:
                    self._complete_futures()
                self._expected = woken - len(self._waiters) - len(self._futures)
                self._gather = min(took, self._max_gather)
            if stopping:
                return

    def _wake_waiters(self) -> None:
        """Wake the writers whose records are flushed: the first one here, each woken writer
        the next (``_relay``, popped from the end), so they come back one after the other
        instead of all at once fighting for the GIL. (What the last relay left, if anything,
        is woken first.)"""
        flushed = self._flushed
        pending = []
        woken: list[threading.Lock] = []
        for entry in self._waiters:
            if entry[0] <= flushed:
                woken.append(entry[1])
            else:
                pending.append(entry)
        self._waiters = pending
        left, self._relay = self._relay, []
        while left:
            with contextlib.suppress(IndexError):  # (pop: each lock is released once)
                left.pop().release()
        if woken:
            woken.reverse()
            first = woken.pop()
            self._relay = woken
            first.release()

    def _complete_futures(self) -> None:
        pending = []
        for entry in self._futures:
            if entry[0] <= self._flushed:
                _resolve(entry[1], PutMessageStatus.PUT_OK)
            else:
                pending.append(entry)
        self._futures = pending


def _resolve(future: Future[PutMessageStatus], status: PutMessageStatus) -> None:
    # InvalidStateError: cancelled by its waiter (e.g. asyncio.wait_for timed out).
    with contextlib.suppress(InvalidStateError):
        future.set_result(status)

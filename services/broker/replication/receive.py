"""The two ways a slave session receives its frames, a base of :class:`~.slave.HASlave`.

- On a **receive thread** (plaintext, :meth:`SessionReceive._receive_direct`): the thread of
  :mod:`.direct` reads every frame, catch-up bodies straight into the dispatch ring; the event
  loop only acks what reached the commit log.
- On the **event loop** (through the TLS relay, :meth:`SessionReceive._receive`): reads into a
  few preallocated buffers, bulk ones appended on a writer thread while the next reads go on
  (:mod:`.appends`).

Design and figures: ``docs/replication.md``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from services.broker.replication.appends import Appends, Write, chain
from services.broker.replication.direct import HAND_OVER_MIN, FrameReceiver, PeerClosedError
from services.broker.replication.errors import ContinuityError, ProtocolError
from services.broker.replication.events import DataReceived, Event
from services.broker.replication.protocol import SlaveConnectionProtocol
from services.broker.replication.session import REJECTED, AuthFailedError, SessionEndError, SessionState
from services.broker.storage.store import MessageStore

__all__ = ["SessionReceive"]

#: Receive buffer (event loop): a read takes what the socket holds, up to this.
_RECV_SIZE: Final = 2 * 1024 * 1024
#: Receive buffers: reads go on while appends of up to this many less one wait for the disk.
_RECV_BUFFERS: Final = 4
#: A read of at least this many bytes is appended on the writer thread, while the next read
#: goes on (smaller ones, the steady state, are appended and acked at once).
_THREADED_APPEND: Final = 64 * 1024


class SessionReceive:
    """The receive half of :class:`~.slave.HASlave` (its state is set up by ``HASlave.__init__``)."""

    store: MessageStore
    last_read_ms: int
    _executor: concurrent.futures.ThreadPoolExecutor | None

    if TYPE_CHECKING:
        async def _send_ack(self, sock: socket.socket, offset: int, state: SessionState,
                            loop: asyncio.AbstractEventLoop, prefix: bytes = b"") -> None:
            ...

        def _continuity_failed(self, exc: ContinuityError, state: SessionState) -> None:
            ...

        def _count(self, size: int, state: SessionState) -> None:
            ...

    async def _receive_switching(self, sock: socket.socket, proto: SlaveConnectionProtocol,
                                 state: SessionState, loop: asyncio.AbstractEventLoop) -> None:
        """Plaintext: the event loop's reads while the stream is steady (each read appended and
        acked at once, the shortest way for a SYNC_MASTER's ack), the receive thread from the
        first bulk read of a catch-up (a frame of ``HAND_OVER_MIN`` bytes or more) until the
        frames are small again."""
        while True:
            await self._receive(sock, proto, state, loop, hand_over=True)
            await self._receive_direct(sock, proto, state, loop)

    async def _receive(self, sock: socket.socket, proto: SlaveConnectionProtocol, state: SessionState,
                       loop: asyncio.AbstractEventLoop, hand_over: bool = False) -> None:
        """The event loop's reads; with ``hand_over``, returns after the first bulk read of a
        catch-up, once its append is in the commit log (the receive thread goes on from there)."""
        # Large appends queue up on the writer thread (its disk writes release the GIL), in
        # order, while reads go on into the free buffers; the protocol's data events are views
        # of a buffer, which is read into again only once its append returned.
        appends = Appends(_RECV_BUFFERS, _RECV_SIZE)
        try:
            while True:
                if not appends.free:  # every buffer waits for the writer thread to take its bytes
                    await self._settle(appends, sock, state, loop, appends.oldest_taken())
                view = appends.free[0]
                n = await self._recv_into(sock, view, appends, state, loop)
                state.anything_read = True
                state.last_read = loop.time()
                self.last_read_ms = int(time.time() * 1000)
                try:
                    events = proto.receive_data(view[:n])
                except (ContinuityError, ProtocolError) as exc:
                    while appends.running:  # keep what came before, in order
                        await self._settle(appends, sock, state, loop, appends.oldest_done())
                    self._count(self._append(exc.events), state)
                    if isinstance(exc, ContinuityError):
                        self._continuity_failed(exc, state)
                    raise
                if not any(type(event) is DataReceived for event in events):
                    continue
                if n >= _THREADED_APPEND or appends.running:  # (appends stay in order)
                    appends.submit(self._writer(), self._queue_append, events)
                    if hand_over and proto.frame_size >= HAND_OVER_MIN:  # (a catch-up)
                        while appends.running:
                            await self._settle(appends, sock, state, loop, appends.oldest_done())
                        return
                else:
                    self._count(self._append(events), state)
                    await self._send_ack(sock, self.store.max_offset, state, loop)
        finally:
            appends.wait_all()  # the next session starts from the store's max offset

    async def _receive_direct(self, sock: socket.socket, proto: SlaveConnectionProtocol,
                              state: SessionState, loop: asyncio.AbstractEventLoop) -> None:
        """The session's frames on a receive thread (:mod:`.direct`), from wherever ``proto``
        stands; here, the acks of its appends, oldest first, as they reach the commit log, and
        why the thread ended. Returns when the thread handed the stream back (small frames)."""
        pending: collections.deque[tuple[int, concurrent.futures.Future[int]]] = collections.deque()
        ended: list[BaseException | None] = []
        wake = asyncio.Event()
        scheduled = threading.Event()  # (a wake-up is on its way to the loop)

        def notify(_: object = None) -> None:  # (any thread)
            if not scheduled.is_set():
                scheduled.set()
                with contextlib.suppress(RuntimeError):  # (the loop is closed: nobody waits)
                    loop.call_soon_threadsafe(wake.set)

        def appended(start: int, done: concurrent.futures.Future[int]) -> None:
            pending.append((start, done))
            done.add_done_callback(notify)

        def on_read() -> None:
            state.last_read = time.monotonic()
            state.anything_read = True
            self.last_read_ms = int(time.time() * 1000)

        def stopped(exc: BaseException | None) -> None:
            ended.append(exc)
            notify()

        sock.setblocking(True)
        receiver = FrameReceiver(sock, proto, self.store, on_read=on_read, appended=appended)
        receiver.start(stopped)
        handed_back = False
        try:
            while True:
                await wake.wait()
                wake.clear()
                scheduled.clear()
                size = 0
                while pending and pending[0][1].done():
                    start, done = pending.popleft()
                    size += done.result() - start  # (raises what the append raised)
                if size:
                    self._count(size, state)
                    await self._send_ack(sock, self.store.max_offset, state, loop)
                if ended and not pending:
                    if ended[0] is not None:
                        self._thread_ended(ended[0], state)
                    handed_back = True
                    return
        finally:
            receiver.stop(shutdown=not handed_back)
            for _, done in pending:  # the next session starts from the store's max offset
                with contextlib.suppress(Exception):
                    done.result()
            if handed_back:
                sock.setblocking(False)

    def _thread_ended(self, exc: BaseException, state: SessionState) -> None:
        """Raise why the receive thread ended, as the event loop's reads would have."""
        if isinstance(exc, (PeerClosedError, ConnectionResetError)):
            if state.authenticated and not state.anything_read:
                raise AuthFailedError(REJECTED) from None  # (closed with our offset unread)
            if isinstance(exc, PeerClosedError):
                raise SessionEndError(str(exc)) from None
        if isinstance(exc, ContinuityError):
            self._continuity_failed(exc, state)
        raise exc

    async def _recv_into(self, sock: socket.socket, view: memoryview, appends: Appends,
                         state: SessionState, loop: asyncio.AbstractEventLoop) -> int:
        """The next read; meanwhile every append of the writer thread is acked as soon as it
        is done (the master may have nothing more to send until it hears of it)."""
        try:
            if not appends.running:
                n = await loop.sock_recv_into(sock, view)
            else:
                reading = asyncio.ensure_future(loop.sock_recv_into(sock, view))
                try:
                    while appends.running and not reading.done():
                        await asyncio.wait({reading, appends.oldest_done()},
                                           return_when=asyncio.FIRST_COMPLETED)
                        await self._settle(appends, sock, state, loop)
                    n = await reading
                finally:
                    reading.cancel()
        except ConnectionResetError:
            if state.authenticated and not state.anything_read:
                raise AuthFailedError(REJECTED) from None  # (closed with our offset unread)
            raise
        if not n:
            if state.authenticated and not state.anything_read:
                raise AuthFailedError(REJECTED)
            raise SessionEndError("the master closed the connection")
        return n

    async def _settle(self, appends: Appends, sock: socket.socket, state: SessionState,
                      loop: asyncio.AbstractEventLoop, wait: asyncio.Future[int] | None = None) -> None:
        """Count and ack the appends that are in the commit log (after ``wait``, if given);
        raises what an append raised."""
        if wait is not None:
            with contextlib.suppress(Exception):  # (collect() raises it)
                await wait
        size = appends.collect()
        if size:
            self._count(size, state)
            await self._send_ack(sock, self.store.max_offset, state, loop)

    def _append(self, events: Sequence[Event]) -> int:
        """Append the received body bytes (contiguous: the protocol checked continuity) in one
        write; returns how many."""
        bodies = [event.body for event in events if type(event) is DataReceived]
        if not bodies:
            return 0
        start = next(event for event in events if type(event) is DataReceived).offset
        return self.store.append_data(start, bodies) - start

    def _queue_append(self, events: Sequence[Event], written: Write) -> None:
        """:meth:`_append` on the writer thread: returns once the bytes are taken (the receive
        buffer is free again); ``written`` gets how many once they are in the commit log."""
        start = next(event for event in events if type(event) is DataReceived).offset
        bodies = [event.body for event in events if type(event) is DataReceived]
        chain(self.store.queue_data(start, bodies), written, start)

    def _writer(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="HASlaveWriter")
        return self._executor

"""The slave's receive thread: frames read with blocking calls, bodies straight into the ring.

A plaintext session catching up (the master's frames are large) reads its frames on a thread
of its own (:class:`FrameReceiver`), until they are small again: each frame's 12-byte header
into a small buffer,
then its body with ``recv_into(..., MSG_WAITALL)`` (the GIL released while the kernel copies)
straight into the commit log's dispatch ring at the write position
(:meth:`MessageStore.ring_space <services.broker.storage.store.MessageStore.ring_space>`), from
where the write thread writes it direct and the reput thread dispatches it. No user-space copy
of a replicated byte, no event-loop work per read; the event loop only sends the acks (see
``docs/replication.md``, "The receive thread"). Bodies that cannot go into the ring (a small
frame, a new segment, a dispatcher a ring behind) are read into a buffer of the thread's and
appended with :meth:`MessageStore.queue_data
<services.broker.storage.store.MessageStore.queue_data>` as before. The protocol object checks
every header (continuity, size limit) exactly as on the event loop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Final

from services.broker.replication.framing import TRANSFER_HEADER_SIZE
from services.broker.replication.protocol import SlaveConnectionProtocol
from services.broker.storage.segment import DIRECT_MIN
from services.broker.storage.store import MessageStore

__all__ = ["BUFFER_SIZE", "HAND_BACK_BELOW", "HAND_OVER_MIN", "FrameReceiver", "PeerClosedError"]

#: The thread's own buffer for bodies that do not go into the ring (read in pieces of this).
BUFFER_SIZE: Final = 2 * 1024 * 1024

#: The event loop hands the stream to the receive thread after a bulk read that holds a frame of
#: at least this many bytes: only a master catching a slave up sends them (``CATCHUP_BATCH_SIZE``
#: frames; a steady stream's are ``haTransferBatchSize``, 32 KiB by default, and stays on the
#: loop, where a read of many small frames is one append and one ack).
HAND_OVER_MIN: Final = 256 * 1024

#: A frame smaller than this (the master's frames after a catch-up), or a heartbeat, hands the
#: stream back to the event loop (a bulk append's least: ``DIRECT_MIN``).
HAND_BACK_BELOW: Final = DIRECT_MIN

#: An append handed to the store: where it starts, and its future (the new max offset once the
#: bytes are in the commit log).
Appended = Callable[[int, concurrent.futures.Future[int]], None]


class PeerClosedError(Exception):
    """The master closed the connection (or it was shut down to stop the thread)."""


class FrameReceiver:
    """Reads frames from a blocking socket and appends their bodies (see the module doc).

    ``on_read`` is called after each header and body read (the session's liveness);
    ``appended(start, future)`` after each append handed to the store, on this thread, in
    order. :meth:`run` returns when it hands the stream back to the event loop, and raises
    otherwise: :class:`PeerClosedError`, a
    :class:`~services.broker.replication.errors.ProtocolError` from a bad header, an
    ``OSError``, or what an append raised. :meth:`stop` (any thread) ends it.
    """

    def __init__(self, sock: socket.socket, proto: SlaveConnectionProtocol, store: MessageStore, *,
                 on_read: Callable[[], None], appended: Appended) -> None:
        self.sock = sock
        self.proto = proto
        self.store = store
        self._on_read = on_read
        self._appended = appended
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._buffer: memoryview | None = None
        #: Body bytes received (ring and buffer).
        self.received = 0
        #: Of those, bytes received straight into the ring.
        self.received_in_ring = 0

    def start(self, done: Callable[[BaseException | None], None]) -> None:
        """Run on a new thread; ``done(exc)`` gets why it ended (on that thread): None when it
        handed the stream back."""
        def main() -> None:
            try:
                self.run()
            except BaseException as exc:  # (handed over: the session reports it)
                done(exc)
            else:
                done(None)

        self._thread = threading.Thread(target=main, name="HASlaveReceiver", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None, *, shutdown: bool = True) -> None:
        """End :meth:`run` (``shutdown``: shut the socket down, so a blocked read returns) and
        wait for it."""
        self._stopping = True
        if shutdown:
            with contextlib.suppress(OSError):  # (already closed by the peer)
                self.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def run(self) -> None:
        """Receive frames, from wherever the protocol stands (the event loop's last read may
        have ended inside a header or a body), until a heartbeat or a frame of less than
        :data:`HAND_BACK_BELOW` bytes (completed first): the stream is steady again, the event
        loop takes it back. Raises why it ended otherwise."""
        header = memoryview(bytearray(TRANSFER_HEADER_SIZE))
        proto = self.proto
        store = self.store
        if proto.frame_remaining:
            self._rest_of_body()
        while True:
            part = header[:TRANSFER_HEADER_SIZE - proto.buffered]
            self._fill(part)
            self._on_read()
            if proto.receive_data(part):  # (a heartbeat; a data frame's header gives no event)
                return
            size = proto.frame_remaining
            if size < HAND_BACK_BELOW:
                self._rest_of_body()
                return
            offset = proto.next_offset
            views = store.ring_space(offset, size)
            if views is not None:
                for view in views:
                    self._fill(view)
                proto.body_received(size)
                self._on_read()
                self.received += size
                self.received_in_ring += size
                self._appended(offset, store.queue_received(offset, size))
            else:
                self._rest_of_body()

    def _rest_of_body(self) -> None:
        """Receive the rest of the current frame's body into the thread's buffer and append it
        (a body that cannot go into the ring)."""
        proto = self.proto
        if self._buffer is None:
            self._buffer = memoryview(bytearray(BUFFER_SIZE))
        while proto.frame_remaining:
            piece = self._buffer[:min(proto.frame_remaining, BUFFER_SIZE)]
            self._fill(piece)
            start = proto.body_received(len(piece))
            self._on_read()
            self.received += len(piece)
            self._appended(start, self.store.queue_data(start, piece))

    def _fill(self, view: memoryview) -> None:
        """Read exactly ``len(view)`` bytes into ``view`` (usually one call: MSG_WAITALL)."""
        got = 0
        size = len(view)
        while got < size:
            if self._stopping:
                raise PeerClosedError("the session is stopping")
            n = self.sock.recv_into(view[got:], size - got, socket.MSG_WAITALL)
            if not n:
                raise PeerClosedError("the master closed the connection")
            got += n


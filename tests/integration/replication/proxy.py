"""TCP proxies for the HA port: one that stops forwarding the slave's acks (a slave that stalls)
and one that stops carrying anything either way and can then cut its connections (a broken link)."""

from __future__ import annotations

import contextlib
import socket
import threading

Pair = tuple[socket.socket, socket.socket]


class _Proxy:
    """Forwards ``listen`` to ``target``; a subclass's :meth:`_pump` moves the bytes of one
    direction (``acks``: from the connecting side, the slave)."""

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.target = target
        self._listener = socket.create_server(listen)
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self._pairs: list[Pair] = []
        self._lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._close_pairs()

    def _close_pairs(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _live(self, pair: Pair) -> bool:
        with self._lock:
            return pair in self._pairs

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.append(pair)
                self.connections += 1
            for src, dst, acks in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._run, args=(src, dst, acks, pair), daemon=True).start()

    def _run(self, src: socket.socket, dst: socket.socket, acks: bool, pair: Pair) -> None:
        try:
            self._pump(src, dst, acks, pair)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _pump(self, src: socket.socket, dst: socket.socket, acks: bool, pair: Pair) -> None:
        raise NotImplementedError


class StallingProxy(_Proxy):
    """After :meth:`stall_acks`, bytes from the slave (its offset reports) are no longer
    forwarded, while the master's data still flows."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._stalled = threading.Event()
        super().__init__(target)

    def stall_acks(self) -> None:
        self._stalled.set()

    def _pump(self, src: socket.socket, dst: socket.socket, acks: bool, pair: Pair) -> None:
        while not self._closing.is_set():
            if acks and self._stalled.is_set():
                self._closing.wait(0.05)  # stop reading: the slave's acks pile up unread
                continue
            data = src.recv(65536)
            if not data:
                break
            if acks and self._stalled.is_set():
                continue  # arrived while stalling: never delivered
            dst.sendall(data)


class FreezingProxy(_Proxy):
    """After :meth:`freeze` nothing more is forwarded either way (what arrives is held back,
    never delivered), while the connections stay open, as with a link that stopped carrying
    packets.  :meth:`cut` closes every connection without delivering what was held back."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self._frozen = threading.Event()
        super().__init__(target, listen)

    def freeze(self) -> None:
        self._frozen.set()

    def cut(self) -> None:
        """Close the connections open now (held-back bytes are dropped); new ones are forwarded."""
        self._close_pairs()
        self._frozen.clear()

    def _pump(self, src: socket.socket, dst: socket.socket, acks: bool, pair: Pair) -> None:
        while self._live(pair):
            if self._frozen.is_set():
                self._closing.wait(0.02)  # stop reading: the peer's bytes pile up unread
                continue
            data = src.recv(65536)
            if not data or not self._live(pair):
                break
            if self._frozen.is_set():
                continue  # arrived while freezing: held back for good (never delivered)
            dst.sendall(data)

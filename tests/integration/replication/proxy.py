"""A TCP proxy for the HA port that can stop forwarding the slave's acks (a slave that stalls)."""

from __future__ import annotations

import contextlib
import socket
import threading


class StallingProxy:
    """Forwards 127.0.0.1:<port> to ``target``; after :meth:`stall_acks`, bytes from the slave
    (its offset reports) are no longer forwarded, while the master's data still flows."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stalled = threading.Event()
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stall_acks(self) -> None:
        self._stalled.set()

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

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
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, acks: bool) -> None:
        try:
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
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class FreezingProxy:
    """Forwards ``listen`` to ``target`` in both directions until :meth:`freeze`: from then on
    nothing more is forwarded either way (what arrives is held back, never delivered), while the
    connections stay open, as with a link that stopped carrying packets.  :meth:`cut` closes every
    connection without delivering what was held back."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(listen)
        self._frozen = threading.Event()
        self._closing = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def freeze(self) -> None:
        self._frozen.set()

    def cut(self) -> None:
        """Close the connections open now (held-back bytes are dropped); new ones are forwarded."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self._frozen.clear()
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

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
            threading.Thread(target=self._pump, args=(client, upstream, pair), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair), daemon=True).start()

    def _live(self, pair: tuple[socket.socket, socket.socket]) -> bool:
        with self._lock:
            return pair in self._pairs

    def _pump(self, src: socket.socket, dst: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        try:
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
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

"""A TCP proxy for tests that drop a client's connection on purpose: in front of a real
server, it can cut every connection and stop listening (the network gone), listen again on
the same port, swallow the next answers (the server did the work, the client never hears
of it), and send new connections to another server (a restarted one)."""
from __future__ import annotations

import socket
import threading

from opdweb.embedded_servers import free_port


class TcpProxy:
    def __init__(self, target: str):
        self.target = target  # host:port, changeable while it runs
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.swallow = 0  # answers still to swallow
        self.swallowed = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Listen (again) on the same port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Drop every open connection and stop listening: new ones are refused."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def swallow_next(self, answers: int) -> None:
        with self._lock:
            self.swallow += answers

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
            except OSError:  # the server is down: the client sees its connection dropped
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        try:
            while data := source.recv(65536):
                if answers:
                    with self._lock:
                        swallowing = self.swallow > 0
                        if swallowing:
                            self.swallow -= 1
                            self.swallowed += 1
                    if swallowing:  # the server has answered (so it did the work): the client never hears
                        break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.difference_update((source, sink))
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv()
    except OSError:
        pass
    sock.close()

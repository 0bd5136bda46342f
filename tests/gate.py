"""A TCP gate for tests: a loopback port that forwards every connection to a loopback
server until it is shut, then cuts the connections it forwards and refuses new ones (the
server gone, as far as its clients can tell), and can be opened again on the same port."""

from __future__ import annotations

import contextlib
import socket
import threading


class Gate:
    """Forwards ``127.0.0.1:port`` to ``target`` (a loopback ``(host, port)``) while open."""

    def __init__(self, target: tuple[str, int]) -> None:
        assert target[0] in ("127.0.0.1", "localhost", "::1"), target
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.open()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        """Refuse new connections and cut those under way."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._open = self._open, []
        for sock in ([listener] if listener else []) + conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

"""A scripted origin for the pass-through's tests, without sockets: the byte stream an
origin's connection would read, handed to :class:`snapshotd.net.http1.Connection` (an
``asyncio.Protocol``) in the pieces a test chooses, one piece per turn of the event loop, as a
socket's reads would come; and what the connection writes, recorded.

The seam is asyncio's own: a pool makes its connections with the running loop's
``create_connection(protocol_factory, host, port, ...)``, which :meth:`ScriptedOrigin.installed`
replaces on that loop for as long as it is installed. Nothing else of the pass-through is
replaced: :class:`snapshotd.net.http1.Pool`, :class:`snapshotd.proxy.relay.Relay` and
:class:`snapshotd.proxy.passthrough.Upstream` run as they do in serve. No socket is opened, no name
resolved, and no test waits on the clock: a piece is read as soon as the loop turns.

The origin reads whole requests (a head, then a body of its ``Content-Length``) as
``tests.test_http1.RawOrigin`` does over loopback, and answers each with what its script
says; it closes the connection after an answer that says ``Connection: close`` or is
HTTP/1.0, and without answering when the script says None.

:class:`ClientTransport` is the other end: a client's connection to serve's HTTP protocol,
recording what the protocol writes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

# (connection number, request number on it, the request's bytes) -> bytes to answer, or None
# to close the connection without answering.
Script = Callable[[int, int, bytes], bytes | None]
# An answer's bytes -> the pieces the connection reads them in.
Split = Callable[[bytes], list[bytes]]


def whole(data: bytes) -> list[bytes]:
    return [data]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def at(*points: int) -> Split:
    """Pieces cut at ``points`` (offsets into the answer)."""

    def split(data: bytes) -> list[bytes]:
        cuts = [0, *(p for p in points if 0 < p < len(data)), len(data)]
        return [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    split.__name__ = f"at{points}"
    return split


def every(size: int) -> Split:
    """Pieces of ``size`` bytes."""

    def split(data: bytes) -> list[bytes]:
        return [data[i : i + size] for i in range(0, len(data), size)]

    split.__name__ = f"every({size})"
    return split


class _RecordingTransport(asyncio.Transport):
    """What both ends share: the protocol on it, every byte it wrote, whether it is closing
    and whether it reads."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.loop = asyncio.get_running_loop()
        self.written = bytearray()  # every byte the protocol wrote
        self.closing = False  # closed by either side
        self.reading = True

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self.closing


class ScriptedTransport(_RecordingTransport):
    """One connection to a :class:`ScriptedOrigin`, as the protocol on it sees it."""

    def __init__(self, origin: ScriptedOrigin, number: int, protocol: asyncio.Protocol):
        super().__init__(protocol)
        self.origin = origin
        self.number = number
        self._unread = bytearray()  # written, not yet a whole request
        self.asked = 0  # requests read
        self.outbox: deque[bytes] = deque()  # pieces not yet read by the protocol
        self.delivered = 0  # bytes read by the protocol
        self.most_unread = 0  # the most the origin had sent and the protocol not read
        self.aborted = False  # closed by the protocol, with abort()
        self.lost = False  # the protocol was told, connection_lost
        self._ends = False  # the origin closes once the outbox is read
        self._feeding = False  # a read is scheduled

    # The origin's side.

    def _take_requests(self) -> None:
        while (end := self._unread.find(b"\r\n\r\n")) >= 0:
            head = bytes(self._unread[: end + 4])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(self._unread) < len(head) + length:
                return
            request = bytes(self._unread[: len(head) + length])
            del self._unread[: len(request)]
            self.origin.requests.append(request)
            answer = self.origin.script(self.number, self.asked, request)
            self.asked += 1
            if answer is None:
                self._send([], ends=True)
                return
            ends = b"\r\nConnection: close\r\n" in answer or answer.startswith(b"HTTP/1.0")
            self._send(self.origin.split(answer), ends)
            if ends:
                return

    def _send(self, pieces: list[bytes], ends: bool) -> None:
        self.outbox.extend(pieces)
        self._ends = ends
        self.most_unread = max(self.most_unread, sum(map(len, self.outbox)))
        self._schedule()

    def _schedule(self) -> None:
        if not self._feeding and not self.closing and self.reading:
            self._feeding = True
            self.loop.call_soon(self._feed)

    def _feed(self) -> None:
        """One read: the next piece, or the end of the stream."""
        self._feeding = False
        if self.closing or not self.reading:
            return
        if self.outbox:
            piece = self.outbox.popleft()
            self.delivered += len(piece)
            self.protocol.data_received(piece)
            self._schedule()
        elif self._ends:
            if not self.protocol.eof_received():
                self.close()

    # asyncio.Transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:
            return  # as a socket's transport drops what is written after close
        self.written += data
        self._unread += data
        self._take_requests()

    def can_write_eof(self) -> bool:
        return False

    def resume_reading(self) -> None:
        super().resume_reading()
        self._schedule()

    def is_reading(self) -> bool:
        return self.reading and not self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.call_soon(self._lost)

    def abort(self) -> None:
        if not self.closing:
            self.aborted = True
        self.close()

    def _lost(self) -> None:
        self.lost = True
        self.protocol.connection_lost(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    @property
    def settled(self) -> bool:
        """Nothing is under way: no read due, no close the protocol was not told of."""
        return not self._feeding and (not self.closing or self.lost)


class ScriptedOrigin:
    """An origin answering as ``script`` says, each answer read in the pieces ``split``
    cuts it in; ``refuse``: no connection can be made (as to a port nothing listens on)."""

    def __init__(self, script: Script, split: Split = whole, refuse: bool = False) -> None:
        self.script = script
        self.split = split
        self.refuse = refuse
        self.requests: list[bytes] = []
        self.transports: list[ScriptedTransport] = []
        self.hosts: list[tuple[str, int]] = []  # where each connection was asked for

    @property
    def connections(self) -> int:
        return len(self.transports)

    @property
    def open_connections(self) -> int:
        return sum(not t.closing for t in self.transports)

    async def create_connection(
        self, protocol_factory: Callable[[], asyncio.Protocol], host: str, port: int,
        **_: Any,
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        """``loop.create_connection``, to this origin."""
        self.hosts.append((host, port))
        if self.refuse:
            raise ConnectionRefusedError(111, "Connection refused")
        protocol = protocol_factory()
        transport = ScriptedTransport(self, len(self.transports), protocol)
        self.transports.append(transport)
        protocol.connection_made(transport)
        return transport, protocol

    async def settle(self, asked: int = 0) -> None:
        """Until the origin was asked ``asked`` requests or more, and every connection has
        read what it can and been told of each close."""
        while len(self.requests) < asked or not all(t.settled for t in self.transports):
            await asyncio.sleep(0)

    @contextlib.contextmanager
    def installed(self) -> Iterator[ScriptedOrigin]:
        """Every connection the running loop makes, made to this origin meanwhile."""
        loop = asyncio.get_running_loop()
        loop.create_connection = self.create_connection  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            del loop.create_connection  # the loop's own method again


class ClientTransport(_RecordingTransport):
    """A client's connection to serve's HTTP protocol, as the protocol sees it: what the
    protocol writes, recorded; a close, told to the protocol on the loop's next turn."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closing:
            self.written += data

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

"""HTTP/1.1 connections to a site's origin, kept alive and reused: the pass-through's client.

Every person's request is forwarded over one of these, so each costs as little as it can:
a request is written in one call, and the answer is parsed by httptools (llhttp, the C
parser uvicorn reads the requests with) straight from the socket's protocol callbacks, with
no stream objects in between. Bytes go through as they are: header names and values,
compressed bodies, cookies.

Invariants:

- A connection serves one exchange at a time, and goes back to its pool only when the answer
  was read to its end, the request was written whole, and neither side asked to close.
- Reading the answer is bounded: its header at :data:`MAX_HEAD` bytes, the wait for any byte
  at :data:`READ_TIMEOUT`, and what is held unread at :data:`HIGH_WATER` bytes (then the
  socket is not read until the reader takes it).
- A kept-alive connection idle for :data:`IDLE_SECONDS` is closed rather than reused: an
  origin may close it at any moment after its own keep-alive timeout, and the shortest
  common one is Node.js's 5 s.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque

import httptools

__all__ = ["Connection", "OriginError", "Pool"]

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
MAX_HEAD = 256 * 1024
HIGH_WATER = 256 * 1024
IDLE_SECONDS = 4.0
# Idle connections kept per origin; more are closed when they come back.
MAX_IDLE = 256


class OriginError(Exception):
    """The origin could not be reached, or its answer broke off or was not HTTP."""


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to an origin, as a protocol with llhttp on its reads.

    An exchange: :meth:`begin`, :meth:`write` (and :meth:`drain`) the request,
    :meth:`response` for the status and headers, then :meth:`read` until it gives ``b""``.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        # A header value with a control character is taken, for the forwarder to drop the
        # header (as the server would refuse to send it) rather than fail the whole answer.
        self.parser.set_dangerous_leniencies(lenient_headers=True)
        self.closed = False
        self.idle_since = 0.0
        self.used = False  # an exchange was made on it before this one
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._error: OriginError | None = None
        self._paused = False
        self._begin(False)

    def _begin(self, head: bool) -> None:
        self.head = head
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.received = False  # any byte of this exchange's answer
        self._interim = False
        self._until_close = False
        self._head_bytes = 0
        self._chunks: deque[bytes] = deque()
        self._held = 0

    def begin(self, head: bool = False) -> None:
        """Start an exchange; ``head`` for a HEAD request, whose answer has no body."""
        self._begin(head)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.complete or self._error is not None:
            # Bytes after a whole answer, or after a broken one: the connection is done.
            self._fail("the origin sent more than one answer")
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the origin switched protocols")
        except httptools.HttpParserError as exc:
            self._fail(f"the origin's answer is not HTTP/1.1: {exc}")
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and self._until_close and not self.complete:
            self.complete = True  # an answer without a length ends when the origin closes
        elif not self.complete and self._error is None:
            self._error = OriginError(
                "the origin closed the connection"
                + (" before answering" if not self.headers_done else " mid-answer")
                + (f": {exc}" if exc else "")
            )
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self.complete:
            self._fail("the origin sent more than one answer")
            raise self._error  # type: ignore[misc]  # stops the parser
    def on_status(self, status: bytes) -> None:
        self._count(len(status))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # An interim answer (103 Early Hints, an unasked 100): the real one follows.
            self.headers = []
            self._interim = True
            return
        self.status = status
        self.headers_done = True
        if self.head:
            # llhttp would wait for the Content-Length of body a HEAD answer never has, so
            # the answer ends here and the connection with it.
            self.complete = True
            return
        framed = False
        for name, value in self.headers:
            lower = name.lower()
            if lower == b"content-length" or (
                lower == b"transfer-encoding" and value.lower().rstrip().endswith(b"chunked")
            ):
                framed = True
        self._until_close = not framed and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        if self.head:
            return
        self._chunks.append(body)
        self._held += len(body)
        if self._held >= HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if not self.complete:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()

    # the exchange

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD:
            self._fail(f"the origin's answer has over {MAX_HEAD} bytes of header")
            raise self._error  # type: ignore[misc]  # stops the parser

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = OriginError(reason)
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _time_out(self) -> None:
        self._fail(f"the origin sent nothing for {READ_TIMEOUT:g} s")
        self._wake()

    async def _wait(self) -> None:
        """Until something arrives from the origin, or the connection ends or fails."""
        if self.closed or self._error is not None:
            return
        self._waiter = self.loop.create_future()
        timer = self.loop.call_later(READ_TIMEOUT, self._time_out)
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise OriginError("the origin closed the connection")
        self.transport.write(data)

    async def drain(self) -> None:
        """Until the origin has taken enough of what was written."""
        if self._drain is not None:
            await self._drain
        if self.closed:
            raise self._error or OriginError("the origin closed the connection")

    async def response(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The answer's status and header lines, as sent."""
        while not self.headers_done:
            if self._error is not None:
                raise self._error
            if self.closed:
                raise OriginError("the origin closed the connection before answering")
            await self._wait()
        return self.status, self.headers

    async def read(self) -> bytes:
        """The next piece of the answer's body: all that is held, or ``b""`` at its end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            if self.closed:
                raise OriginError("the origin closed the connection mid-answer")
            await self._wait()
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._held = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def finished(self) -> bool:
        """The answer is whole and all of its body was read."""
        return self.complete and not self._chunks

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self._error is None

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True


class Pool:
    """Kept-alive connections per origin (``scheme://host:port``), the most recent first.

    There is no cap on connections: each request in flight holds at most one, so the
    server's own connections bound them.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[str, list[Connection]] = {}
        self._ssl = ssl_context
        self.opened = 0  # connections made, for tests and the curious

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def connect(self, scheme: str, host: str, port: int, fresh: bool = False) -> Connection:
        """A connection to the origin (``host`` without brackets): an idle one when there is
        one, unless ``fresh``, else a new one."""
        key = f"{scheme}://{host}:{port}"
        idle = None if fresh else self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                conn.used = True
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(key), host, port, ssl=tls,
                    server_hostname=host if tls else None,
                ),
                CONNECT_TIMEOUT,
            )
        except TimeoutError:
            raise OriginError(f"no connection within {CONNECT_TIMEOUT:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise OriginError(f"cannot connect: {exc.strerror or exc}") from None
        self.opened += 1
        return conn

    def release(self, conn: Connection) -> None:
        """Take back a connection after its exchange: kept when it can serve another."""
        if not conn.reusable:
            conn.close()
            return
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= MAX_IDLE:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

"""HTTP/1.1 connections to a site's origin, kept alive and reused: the pass-through's client.

Every person's request is forwarded over one of these, so each costs as little as it can:
a request is written in one call, and the answer is parsed by httptools (llhttp, the C
parser uvicorn reads the requests with) straight from the socket's protocol callbacks, with
no stream objects in between. Bytes go through as they are: header names and values,
compressed bodies, cookies.

Invariants:

- A connection serves one exchange at a time, and goes back to its pool only when its
  answer was read to the end, the request was written whole, and neither side asked to
  close.
- Waiting on the origin is bounded: :data:`READ_TIMEOUT` for any byte of the answer once
  the request is written whole, and as long for the origin to take more of a request body.
- What an answer may hold in memory is bounded: :data:`MAX_HEAD` bytes of its head and a
  chunked body's trailers (which are dropped), and :data:`HIGH_WATER` bytes of body not
  yet taken (then the socket is not read until the reader takes them).
- A kept-alive connection idle for :data:`IDLE_SECONDS` is never reused: an origin may
  close it at any moment after its own keep-alive timeout, and the shortest common one is
  Node.js's 5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import Callable

import httptools

__all__ = ["Connection", "OriginClosed", "OriginError", "Pool"]

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
MAX_HEAD = 256 * 1024
HIGH_WATER = 256 * 1024
IDLE_SECONDS = 4.0
# Idle connections kept per origin; more are closed when they come back.
MAX_IDLE = 256


class OriginError(Exception):
    """The origin could not be reached, or its answer broke off or was not HTTP."""


class OriginClosed(OriginError):
    """The origin closed the connection before any byte of an answer."""


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to an origin, as a protocol with llhttp on its reads.

    An exchange: :meth:`begin`, :meth:`write` (and :meth:`drain`) the request, the last
    piece with ``end=True``, :meth:`response` for the status and headers, then :meth:`read`
    until :attr:`finished`.
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
        self._timer: asyncio.TimerHandle | None = None
        self._drain: asyncio.Future[None] | None = None
        # Called instead of waking a waiter, when a relay (callbacks, no awaiting) reads.
        self.listener: Callable[[], None] | None = None
        self._error: OriginError | None = None
        self._paused = False
        self.begin()

    def begin(self, head: bool = False) -> None:
        """Start an exchange; ``head`` for a HEAD request, whose answer has no body."""
        self.head = head
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None  # the answer's Content-Length, when it says one
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.sent = False  # the request is written whole
        self.received = False  # any byte of this exchange's answer
        self._interim = False
        self._until_close = False
        self._head_bytes = 0  # of the header lines parsed
        self._head_read = 0  # read while the headers had not ended
        self._framing = 0  # read since the body's last byte: chunk lines, trailers
        self._chunks: deque[bytes] = deque()
        self._held = 0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.complete or self._error is not None:
            # Bytes after a whole answer, or after a broken one: the connection is done.
            self._fail("the origin sent more than one answer")
            return
        if self.headers_done:
            self._framing += len(data)  # back to 0 at each piece of body
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the origin switched protocols")
        except httptools.HttpParserError as exc:
            self._fail(f"the origin's answer is not HTTP/1.1: {exc}")
        if not self.headers_done:
            # llhttp holds a header line whole until it ends: all read so far is header.
            self._head_read += len(data)
            if self._head_read > MAX_HEAD:
                self._fail(f"the origin's answer has over {MAX_HEAD} bytes of header")
        elif self._framing > MAX_HEAD:
            # Trailers too are held whole until their line ends.
            self._fail(f"the origin's answer has over {MAX_HEAD} bytes of trailers")
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete:
            pass
        elif self.headers_done and self._until_close and exc is None and self._error is None:
            self.complete = True  # an answer without a length ends when the origin closes
        elif self._error is None:
            why = f": {exc}" if exc else ""
            if self.received:
                self._error = OriginError(f"the origin closed the connection mid-answer{why}")
            else:
                self._error = OriginClosed(f"the origin closed the connection{why}")
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
        if not self.headers_done:  # after them, a chunked body's trailers: not sent on
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status == 101:
            self._fail("the origin switched protocols")
            raise self._error  # type: ignore[misc]  # stops the parser
        if status > 599:
            self._fail(f"the origin answered with status {status}")
            raise self._error  # type: ignore[misc]  # stops the parser
        if status < 200:
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
            if lower == b"content-length":
                framed = True
                if self.length is None:
                    with contextlib.suppress(ValueError):
                        self.length = int(value)
            elif lower == b"transfer-encoding" and value.lower().rstrip().endswith(b"chunked"):
                framed = True
        self._until_close = not framed and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        self._framing = 0
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
        if self.listener is not None:
            self.listener()
        elif self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def time_out(self) -> None:
        """Give up on the origin: it sent or took nothing for :data:`READ_TIMEOUT`."""
        self._fail(f"the origin sent or took nothing for {READ_TIMEOUT:g} s")
        self._wake()

    async def _wait(self) -> None:
        """Until something arrives from the origin, or the connection ends or fails; the
        wait is bounded once the request is written whole."""
        if self.closed or self._error is not None:
            return
        self._waiter = self.loop.create_future()
        if self.sent:
            self._arm()
        try:
            await self._waiter
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._waiter = None

    def _arm(self) -> None:
        self._timer = self.loop.call_later(READ_TIMEOUT, self.time_out)

    def write(self, data: bytes, end: bool = False) -> None:
        """Write a piece of the request; ``end`` for its last."""
        if self.closed or self.transport is None:
            raise self._error or OriginError("the origin closed the connection")
        self.transport.write(data)
        if end:
            self.sent = True
            if self._waiter is not None and self._timer is None:
                self._arm()  # the answer was awaited while the request went out

    async def drain(self) -> None:
        """Until the origin has taken enough of what was written."""
        if self._drain is not None:
            timer = self.loop.call_later(READ_TIMEOUT, self.time_out)
            try:
                await self._drain
            finally:
                timer.cancel()
        if self.closed:
            raise self._error or OriginError("the origin closed the connection")

    def head_ready(self) -> bool:
        """Whether the answer's status and headers are in (:attr:`status`, :attr:`headers`);
        raises when they never will be."""
        if self.headers_done:
            return True
        if self._error is not None:
            raise self._error
        if self.closed:
            raise OriginClosed("the origin closed the connection")
        return False

    async def response(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The answer's status and header lines, as sent."""
        while not self.head_ready():
            await self._wait()
        return self.status, self.headers

    async def read(self) -> bytes:
        """The next piece of the answer's body: all that is held, or ``b""`` at its end."""
        while (data := self.take()) is None:
            await self._wait()
        return data

    def take(self) -> bytes | None:
        """All that is held of the answer's body, ``b""`` at its end, or None when nothing
        is held yet; raises when the answer broke off."""
        if not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            if self.closed:
                raise OriginError("the origin closed the connection mid-answer")
            return None
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
        return (
            self.finished and self.sent and self.keep_alive and not self.closed
            and not self._paused and self._error is None
        )

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True


class Pool:
    """Kept-alive connections per origin (``scheme://host:port``), the most recent last.

    There is no cap on connections: each request in flight holds at most one, so the
    server's own connections bound them.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[str, list[Connection]] = {}
        self._ssl = ssl_context
        self._closed = False
        self.opened = 0  # connections made, for tests and the curious

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def connect(self, scheme: str, host: str, port: int, fresh: bool = False) -> Connection:
        """A connection to the origin (``host`` without brackets): an idle one when there is
        one, unless ``fresh``, else a new one."""
        kept = None if fresh else self.idle(scheme, host, port)
        if kept is not None:
            return kept
        key = f"{scheme}://{host}:{port}"
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

    def idle(self, scheme: str, host: str, port: int) -> Connection | None:
        """An idle connection to the origin, if there is one."""
        idle = self._idle.get(f"{scheme}://{host}:{port}")
        if idle:
            _drop_stale(idle, time.monotonic())
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    conn.used = True
                    return conn
        return None

    def release(self, conn: Connection) -> None:
        """Take back a connection after its exchange: kept when it can serve another."""
        if self._closed or not conn.reusable:
            conn.close()
            return
        now = time.monotonic()
        idle = self._idle.setdefault(conn.key, [])
        _drop_stale(idle, now)
        if len(idle) >= MAX_IDLE:
            conn.close()
            return
        conn.idle_since = now
        idle.append(conn)

    def close(self) -> None:
        """Close the idle connections, and each in use when it comes back."""
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _drop_stale(idle: list[Connection], now: float) -> None:
    """Close the connections idle too long; they are the first of the list."""
    stale = 0
    while stale < len(idle) and now - idle[stale].idle_since >= IDLE_SECONDS:
        idle[stale].close()
        stale += 1
    if stale:
        del idle[:stale]

"""Pass-through to the origin: kept-alive connections, bodies streamed both ways.

Every person's request goes through this path, so it is written for the cost of one
request: the request's head is built as bytes from the client's own header bytes and
written in one call, and the answer is parsed in C by httptools (:mod:`snapshotd.net.http1`).

The outgoing target is the request's own path and query, byte for byte, sent to the
scheme and authority of the site's origin. Only an origin-form target (a path starting with
``/``) is forwarded; any other gets 400, so no request target can name another host.

Only the proxy frames what it forwards: a request's body goes with the length the server
read it by, or chunked, never with the client's framing headers as they came, and no token
of a ``Connection`` header removes a message's framing (so no body is ever read by the
origin as a request of its own) nor the headers the proxy writes from the client's.

A request goes to the origin one of two ways: :meth:`Upstream.forward`, an ASGI call, or a
:class:`~snapshotd.proxy.relay.Relay` run from the protocol's callbacks. What both decide is decided
here, once: the target sent (:func:`request_target`), whether the request has a body and how
it is framed (:func:`body_framing`), which requests a relay may take (:func:`relay_target`),
and when a request the origin did not answer is asked again (:func:`may_ask_again`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import re
from asyncio import FIRST_COMPLETED
from typing import Any

from starlette.types import Receive, Scope, Send

from snapshotd.http_text.headers import BAD_HEADER_NAME, BAD_HEADER_VALUE
from snapshotd.http_text.urls import BadRequest, check_origin_form, origin_parts
from snapshotd.net.http1 import Connection, OriginClosed, OriginError, Pool

log = logging.getLogger("snapshotd.proxy.passthrough")

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)

BAD_GATEWAY_PAGE = (
    b"<!doctype html><html><head><meta charset=utf-8><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><p>The site's server could not be reached. "
    b"Please try again in a moment.</p></body></html>"
)

# A body of at most this many bytes (by its Content-Length) is sent on without watching
# for the client to leave: reading it to its end costs less than the watch.
READ_THROUGH = 2**20
# Not forwarded as they came: Host and X-Forwarded-* are the proxy's to write, and so is the
# framing of the body (Content-Length, and Transfer-Encoding, hop-by-hop), from what the
# server parsed; the server in front already answered the client's "100-continue", and the
# origin gets the body at once (waiting for its own 100 could wait for ever).
_NOT_FORWARDED = frozenset(
    {
        b"host", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"expect",
        b"content-length",
    }
)
# What a Connection token never removes: the framing, which says where a message ends (a
# body forwarded without it would be read as a request of its own), and the headers the
# proxy writes from the client's (Host, X-Forwarded-*).
_NEVER_NAMED = frozenset(
    {
        b"content-length", b"transfer-encoding", b"host", b"x-forwarded-for",
        b"x-forwarded-proto", b"x-forwarded-host",
    }
)
CHUNKED = b"transfer-encoding: chunked\r\n"
# What a request target may not hold.
_BAD_TARGET = re.compile(b"[\x00-\x20\x7f]")
# Methods whose request goes without a body and without saying so; any other says
# Content-Length: 0 (some servers answer 411 to a POST without it).
_NO_BODY_EXPECTED = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


async def send_text(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A complete answer with a short ``text/plain`` body."""
    body = text.encode("utf-8")
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@functools.lru_cache(maxsize=1024)  # a few front servers and schemes, on every request
def forwarded_proto(peer: bytes, incoming: bytes, scheme: str) -> bytes:
    """The scheme the client used, for X-Forwarded-Proto: the one a front server on this
    host (a loopback ``peer``) says it took the request with, when ``http`` or ``https``;
    else the scheme of the connection snapshotd took it on (SPEC 3.1)."""
    incoming = incoming.strip().lower()
    if incoming in (b"http", b"https"):
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(peer.decode("latin-1")).is_loopback:
                return incoming
    return scheme.encode("latin-1")


def request_head(
    method: str, target: bytes, authority: bytes, scope: Scope, framing: bytes = b""
) -> bytes:
    """The request line and headers for the origin: the client's headers as they came,
    less hop-by-hop ones and its framing, with Host the origin's, the X-Forwarded-* headers
    added, and ``framing``, the body's (:func:`body_framing`)."""
    original_host = prior_xff = prior_proto = b""
    lines = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode("ascii"), target, authority)]
    for k, v in _sendable(scope["headers"], "client"):
        lk = k.lower()
        if lk in _NOT_FORWARDED:
            if lk == b"host":
                original_host = v
            elif lk == b"x-forwarded-for":
                prior_xff = v
            elif lk == b"x-forwarded-proto":
                prior_proto = v
            continue
        lines += (k, b": ", v, b"\r\n")
    client_host = (scope.get("client") or ("", 0))[0].encode("latin-1")
    lines += (
        b"x-forwarded-for: ",
        prior_xff + b", " + client_host if prior_xff else client_host,
        b"\r\nx-forwarded-proto: ",
        forwarded_proto(client_host, prior_proto, scope.get("scheme", "http")),
        b"\r\n",
    )
    if original_host:
        lines += (b"x-forwarded-host: ", original_host, b"\r\n")
    lines += (framing, b"\r\n")
    return b"".join(lines)


def body_framing(method: str, headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The header that frames a request's body for the origin, from the framing the server
    read it by, and whether it has a body: chunked (any Transfer-Encoding, which the server
    takes only ending in chunked), else the Content-Length it checked; without either, no
    body, and ``Content-Length: 0`` for a method other than GET, HEAD, OPTIONS and TRACE."""
    length = None
    for k, v in headers:
        lk = k.lower()
        if lk == b"transfer-encoding":
            return CHUNKED, True
        if lk == b"content-length":
            length = int(v)
    if length is not None:
        return b"content-length: %d\r\n" % length, True
    return no_body_framing(method), False


def no_body_framing(method: str) -> bytes:
    """The framing header of a request without a body: ``Content-Length: 0`` for a method
    other than GET, HEAD, OPTIONS and TRACE (some servers answer 411 to a POST without it),
    else none."""
    return b"" if method in _NO_BODY_EXPECTED else b"content-length: 0\r\n"


def request_target(raw_path: bytes, query: bytes) -> bytes:
    """The target sent to the origin: the request's path and query as they came; raises
    :class:`BadRequest` for any but an origin-form one (a path starting with ``/``) without
    control characters or spaces."""
    target = raw_path + b"?" + query if query else raw_path
    check_origin_form(raw_path.decode("latin-1"))
    if _BAD_TARGET.search(target):
        raise BadRequest("the request target holds control characters or spaces")
    return target


def relay_target(
    method: str, raw_path: bytes, query: bytes, headers: list[tuple[bytes, bytes]]
) -> bytes | None:
    """The target a :class:`~snapshotd.proxy.relay.Relay` passes a request to the origin with,
    when one may: the request has no body (:func:`body_framing`) and its target is one
    :func:`request_target` forwards. None otherwise: the ASGI way takes it (and says what is
    wrong with a target it refuses)."""
    if body_framing(method, headers)[1]:
        return None
    try:
        return request_target(raw_path, query)
    except BadRequest:
        return None


def may_ask_again(exc: BaseException, conn: Connection | None, has_body: bool) -> bool:
    """Whether a request the origin failed is asked once more, on a new connection: when
    the origin closed a kept-alive connection (one used before) as it was taken, before any
    byte of the answer, and nothing of the request is lost by that (it has no body). The
    new connection was never used, so a request is asked again at most once."""
    return isinstance(exc, OriginClosed) and conn is not None and conn.used and not has_body


def bad_gateway_head() -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", b"%d" % len(BAD_GATEWAY_PAGE)),
    ]


def _reason(exc: BaseException) -> str:
    """One short line for the log: the error's kind and the first line of its message."""
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def log_origin_failed(origin: str, exc: BaseException) -> None:
    """The line for an origin that gave no answer (the client gets a 502 page)."""
    log.warning("origin failed origin=%s error=%s", origin, _reason(exc))


def log_stream_broke(origin: str, exc: BaseException) -> None:
    """The line for an answer that broke off after its head (the client's is cut off)."""
    log.warning("origin stream broke origin=%s error=%s", origin, _reason(exc))


class _ClientGone(Exception):
    """The client left while its request body was being sent on."""


def _sendable(headers: list[tuple[bytes, bytes]], sender: str) -> list[tuple[bytes, bytes]]:
    """The headers that may be sent on, either way: no hop-by-hop ones (nor any the
    ``Connection`` header names, but for the framing and the headers the proxy writes from
    the client's), and none the server would refuse to send."""
    named: set[bytes] = set()
    for k, v in headers:
        if k.lower() == b"connection":
            named.update(t.strip().lower() for t in v.split(b","))
    if named:
        named -= _NEVER_NAMED
    # A character class finds the same bytes in the names (or values) joined as apart: one
    # search each tells whether any header needs looking at alone.
    suspect = BAD_HEADER_NAME.search(b"".join([k for k, _ in headers])) or (
        BAD_HEADER_VALUE.search(b"".join([v for _, v in headers]))
    )
    out = []
    for k, v in headers:
        if (lk := k.lower()) in HOP_BY_HOP or lk in named:
            continue
        if suspect and (BAD_HEADER_NAME.search(k) or BAD_HEADER_VALUE.search(v)):
            log.debug("%s header not sent on (invalid): %r", sender, k[:100])
            continue
        out.append((k, v))
    return out


def response_headers(
    status: int, headers: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """The origin's headers to send on (:func:`_sendable`), with no Content-Length on a 204
    or 304 (which have no body here)."""
    if status in (204, 304):
        return [(k, v) for k, v in _sendable(headers, "origin") if k.lower() != b"content-length"]
    return _sendable(headers, "origin")


async def _pump(conn: Connection, send: Send) -> None:
    """The answer's body to the client; the last piece read ends the response."""
    while True:
        chunk = await conn.read()
        if conn.finished:
            await send({"type": "http.response.body", "body": chunk})
            return
        await send({"type": "http.response.body", "body": chunk, "more_body": True})


def _settle(task: asyncio.Future[Any] | None) -> None:
    """Cancel a task still running, or take the outcome of one that ended, so that nothing
    is logged about it."""
    if task is not None:
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()


async def _disconnected(receive: Receive, body_read: asyncio.Event) -> None:
    await body_read.wait()
    while (await receive())["type"] != "http.disconnect":
        pass


async def _bad_gateway(send: Send) -> int:
    await send({"type": "http.response.start", "status": 502, "headers": bad_gateway_head()})
    await send({"type": "http.response.body", "body": BAD_GATEWAY_PAGE})
    return 502


class Upstream:
    """Forwards requests to an origin and streams the answer back, over kept-alive
    connections (:mod:`snapshotd.net.http1`); ``pool`` (tests) replaces the pool."""

    def __init__(self, pool: Pool | None = None) -> None:
        self.pool = pool or Pool()

    async def close(self) -> None:
        self.pool.close()

    async def forward(self, origin: str, scope: Scope, receive: Receive, send: Send) -> int:
        """Proxy one request to ``origin``; returns the status sent."""
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        try:
            target = request_target(raw_path, query)
        except BadRequest as exc:
            log.warning(
                "not forwarded: %s, got path=%r query=%r",
                exc, raw_path[:200].decode("latin-1"), query[:200].decode("latin-1"),
            )
            await send_text(send, 400, f"Bad Request: {exc}\n")
            return 400
        exchange = _Exchange(self.pool, origin, scope, receive, target)
        try:
            status, headers = await exchange.ask()
        except (OriginError, _ClientGone) as exc:
            if exchange.client_gone:
                log.debug("client left during its upload origin=%s", origin)
                return 499
            log_origin_failed(origin, exc)
            return await _bad_gateway(send)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": response_headers(status, headers),
                }
            )
            await exchange.stream(send)
        except OriginError as exc:
            # Headers are out. The response is left unfinished, so the server drops the
            # connection and the user sees a cut-off answer rather than a whole-looking one.
            if exchange.client_gone:
                log.debug("client left during its upload origin=%s", origin)
            else:
                log_stream_broke(origin, exc)
        finally:
            exchange.end()
        return status


class _Exchange:
    """One request forwarded and its answer: the request written on a connection of the
    pool (its body as the client sends it), then the answer streamed to the client."""

    def __init__(
        self, pool: Pool, origin: str, scope: Scope, receive: Receive, target: bytes
    ) -> None:
        self.pool = pool
        self.receive = receive
        self.scheme, self.host, self.port, authority = origin_parts(origin)
        self.method: str = scope["method"]
        framing, self.has_body = body_framing(self.method, scope["headers"])
        self.chunked = framing is CHUNKED
        self.head = request_head(self.method, target, authority, scope, framing)
        self.client_gone = False
        # The request body is read while the answer may already stream (an origin answering
        # early): only once it is all read may the disconnect watcher call ``receive``.
        self.body_read = asyncio.Event()
        if not self.has_body:
            self.body_read.set()
        self.conn: Connection | None = None
        self.uploading: asyncio.Future[None] | None = None

    async def ask(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """Write the request and read the answer's status and headers; asked once more on
        a new connection when :func:`may_ask_again` says so. Nothing is left open when this
        raises (or is cancelled)."""
        answer: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] | None = None
        try:
            for fresh in (False, True):
                self.conn = conn = await self.pool.connect(
                    self.scheme, self.host, self.port, fresh=fresh
                )
                conn.begin(head=self.method == "HEAD")
                try:
                    conn.write(self.head, end=not self.has_body)
                    if not self.has_body:
                        return await conn.response()
                    self.uploading = asyncio.ensure_future(self._upload(conn))
                    answer = asyncio.ensure_future(conn.response())
                    await asyncio.wait({self.uploading, answer}, return_when=FIRST_COMPLETED)
                    if self.client_gone:
                        raise _ClientGone
                    return await answer
                except OriginClosed as exc:
                    if fresh or not may_ask_again(exc, conn, self.has_body):
                        raise
                    conn.close()
            raise AssertionError("unreachable")
        except BaseException:
            if self.conn is not None:
                self.conn.close()
            _settle(self.uploading)
            _settle(answer)
            raise

    async def _upload(self, conn: Connection) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                # The origin must not take a cut-off body as whole: the connection is
                # closed before the body ends.
                self.client_gone = True
                self.body_read.set()
                raise _ClientGone
            chunk = message.get("body", b"")
            last = not message.get("more_body", False)
            if self.chunked:
                if chunk:
                    conn.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if last:
                    conn.write(b"0\r\n\r\n", end=True)
            else:
                conn.write(chunk, end=last)
            if last:
                self.body_read.set()
                return
            await conn.drain()

    async def stream(self, send: Send) -> None:
        """The answer's body to the client."""
        assert self.conn is not None
        length = self.conn.length
        if self.method == "HEAD" or (length is not None and length <= READ_THROUGH):
            # A short body is read to its end even for a client gone meanwhile.
            await _pump(self.conn, send)
            return
        # The server drops what is sent after the client has gone, so watch for that: an
        # endless origin stream (server-sent events) must not be read on for nobody.
        pump = asyncio.ensure_future(_pump(self.conn, send))
        gone = asyncio.ensure_future(_disconnected(self.receive, self.body_read))
        try:
            await asyncio.wait({pump, gone}, return_when=FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not pump.done():
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
        if not pump.cancelled():
            pump.result()

    def end(self) -> None:
        """The connection back to the pool. The origin may have answered before it read
        the whole body (or the client left meanwhile): the connection is then mid-request,
        and the pool closes it."""
        _settle(self.uploading)
        assert self.conn is not None
        self.pool.release(self.conn)

"""Pass-through to the origin: one pooled aiohttp session, bodies streamed both ways.

aiohttp's client parses responses in C: on a 40 KB page it forwards about five times the
requests per second of httpx on the same core (bench/bench_proxy.py), which matters here
because every person's request goes through this path.

The outgoing URL is built from parts: the scheme and authority of the site's origin, then
the request's path and query. Only an origin-form target (a path starting with ``/``) is
forwarded; any other gets 400, so no request target can name another host.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import AsyncIterator

import aiohttp
from starlette.types import Receive, Scope, Send
from yarl import URL

from snapshotd.urls import BadRequest, check_origin_form

log = logging.getLogger("snapshotd.upstream")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

BAD_GATEWAY_PAGE = (
    b"<!doctype html><html><head><meta charset=utf-8><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><p>The site's server could not be reached. "
    b"Please try again in a moment.</p></body></html>"
)

# The TCP connection may take 5 s; once the request is sent, the origin may be silent for
# 30 s between two reads. There is no cap on connections: each request in flight holds at
# most one, so the server's own connections bound them (a cap would make ordinary requests
# wait behind long-lived streams).
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=30.0)
# A body of at most this many bytes (by its Content-Length) is sent on without watching
# for the client to leave: reading it to its end costs less than the watch.
READ_THROUGH = 2**20
# What reaching the origin can raise, before or while its answer streams.
_ORIGIN_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
# Not forwarded: the server in front already answered the client's "100-continue", and the
# origin gets the body at once (waiting for its own 100 could wait for ever).
_NOT_FORWARDED = frozenset(
    {b"host", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"expect"}
)
# What the server refuses to send in a header (uvicorn's own checks).
_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")


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


@functools.lru_cache(maxsize=256)
def _origin_parts(origin: str) -> tuple[str, str]:
    """The scheme and the (encoded) authority of an origin URL."""
    url = URL(origin)
    return url.scheme, url.raw_authority


def origin_url(origin: str, raw_path: str, query: str) -> URL:
    """The URL on ``origin`` of an origin-form target, its path and query byte for byte."""
    scheme, authority = _origin_parts(origin)
    return URL.build(
        scheme=scheme, authority=authority, path=raw_path, query_string=query, encoded=True
    )


def _reason(exc: BaseException) -> str:
    """One short line for the log: the error's kind and the first line of its message."""
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _ClientGone(Exception):
    """The client left while its request body was being sent on."""


def _strip_hop_by_hop(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    named: set[str] = set()
    for k, v in headers:
        if k.lower() == b"connection":
            named.update(t.strip().lower() for t in v.decode("latin-1").split(","))
    return [
        (k, v)
        for k, v in headers
        if (key := k.decode("latin-1").lower()) not in HOP_BY_HOP and key not in named
    ]


def _response_headers(response: aiohttp.ClientResponse) -> list[tuple[bytes, bytes]]:
    """The origin's headers to send on: no hop-by-hop ones, none the server would refuse, and
    no Content-Length on a 204 or 304 (which have no body here)."""
    out = []
    for k, v in _strip_hop_by_hop(list(response.raw_headers)):
        if _BAD_NAME.search(k) or _BAD_VALUE.search(v):
            log.debug("origin header not sent on (invalid): %r", k[:100])
            continue
        if response.status in (204, 304) and k.lower() == b"content-length":
            continue
        out.append((k, v))
    return out


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        timeout=TIMEOUT,
        # One session serves every user: an origin's Set-Cookie must reach only the user it
        # answered, never be kept and sent along with someone else's request.
        cookie_jar=aiohttp.DummyCookieJar(),
        # The origin's bytes go to the user as they are: no decompression, and none of the
        # client's own headers added to what the user sent.
        auto_decompress=False,
        skip_auto_headers=(
            "User-Agent",
            "Accept",
            "Accept-Encoding",
            "Content-Type",
            "Content-Length",
        ),
        # Cookies and CSP headers can be long: a header line may be up to 64 KiB.
        max_line_size=65536,
        max_field_size=65536,
    )


async def _pump(response: aiohttp.ClientResponse, send: Send) -> None:
    async for chunk in response.content.iter_any():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive, body_read: asyncio.Event) -> None:
    await body_read.wait()
    while (await receive())["type"] != "http.disconnect":
        pass


class Upstream:
    """Forwards requests to an origin and streams the answer back.

    The session is made on first use, inside the server's event loop; ``session`` (tests)
    replaces it.
    """

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = _session()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, origin: str, scope: Scope, receive: Receive, send: Send) -> int:
        """Proxy one request to ``origin``; returns the status sent."""
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        try:
            check_origin_form(raw_path)
        except BadRequest as exc:
            log.warning("not forwarded: %s, got %r", exc, raw_path[:200])
            await send_text(send, 400, f"Bad Request: {exc}\n")
            return 400
        url = origin_url(origin, raw_path, scope.get("query_string", b"").decode("latin-1"))
        client_host = (scope.get("client") or ("", 0))[0]
        original_host = b""
        prior_xff = b""
        out: list[tuple[str, str]] = []
        for k, v in _strip_hop_by_hop(list(scope["headers"])):
            lk = k.lower()
            if lk == b"host":
                original_host = v
            elif lk == b"x-forwarded-for":
                prior_xff = v
            if lk in _NOT_FORWARDED:
                continue
            try:
                # aiohttp writes header text as UTF-8: valid UTF-8 goes through byte for byte.
                out.append((k.decode("latin-1"), v.decode("utf-8")))
            except UnicodeDecodeError:
                log.debug("header not forwarded (not UTF-8): %s", k.decode("latin-1"))
        xff = (prior_xff + b", " if prior_xff else b"") + client_host.encode("latin-1")
        out += [
            ("x-forwarded-for", xff.decode("utf-8", "replace")),
            ("x-forwarded-proto", scope.get("scheme", "http")),
        ]
        if original_host:
            out.append(("x-forwarded-host", original_host.decode("utf-8", "replace")))

        method = scope["method"]
        has_body = any(
            k.lower() in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"]
        )

        client_gone = False
        # The request body is read while the answer may already stream (an origin answering
        # early): only once it is all read may the disconnect watcher call ``receive``.
        body_read = asyncio.Event()
        if not has_body:
            body_read.set()

        async def body() -> AsyncIterator[bytes]:
            nonlocal client_gone
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    # Raised, not returned: the origin must not take a cut-off body as whole.
                    client_gone = True
                    body_read.set()
                    raise _ClientGone
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    body_read.set()
                    return

        try:
            response = await self.session.request(
                method,
                url,
                headers=out,
                data=body() if has_body else None,
                allow_redirects=False,
            )
        except (*_ORIGIN_ERRORS, _ClientGone) as exc:
            if client_gone:
                log.debug("client left during its upload origin=%s", origin)
                return 499
            log.warning("origin failed origin=%s error=%s", origin, _reason(exc))
            await send(
                {
                    "type": "http.response.start",
                    "status": 502,
                    "headers": [
                        (b"content-type", b"text/html; charset=utf-8"),
                        (b"content-length", str(len(BAD_GATEWAY_PAGE)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": BAD_GATEWAY_PAGE})
            return 502
        complete = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": _response_headers(response),
                }
            )
            if method == "HEAD":
                await send({"type": "http.response.body", "body": b""})
                complete = True
                return response.status
            length = response.content_length
            if length is not None and length <= READ_THROUGH:
                # A short body is read to its end even for a client gone meanwhile.
                await _pump(response, send)
                complete = True
                return response.status
            # The server drops what is sent after the client has gone, so watch for that:
            # an endless origin stream (server-sent events) must not be read on for nobody.
            pump = asyncio.ensure_future(_pump(response, send))
            gone = asyncio.ensure_future(_disconnected(receive, body_read))
            try:
                await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
                if not pump.done():
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
            if not pump.cancelled():
                pump.result()
                complete = True
        except _ORIGIN_ERRORS as exc:
            # Headers are out. The response is left unfinished, so the server drops the
            # connection and the user sees a cut-off answer rather than a whole-looking one.
            if client_gone:
                log.debug("client left during its upload origin=%s", origin)
            else:
                log.warning("origin stream broke origin=%s error=%s", origin, _reason(exc))
        finally:
            if complete:
                response.release()  # the connection goes back to the pool
            else:
                response.close()  # the rest is unread: the connection cannot be reused
        return response.status

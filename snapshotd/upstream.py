"""Pass-through to the origin: one pooled aiohttp session, bodies streamed both ways.

aiohttp's client parses responses in C: on a 40 KB page it forwards about five times the
requests per second of httpx on the same core (bench/bench_proxy.py), which matters here
because every person's request goes through this path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
from starlette.types import Receive, Scope, Send
from yarl import URL

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

# Connecting may take 5 s; after that the origin may be silent for 30 s between two reads.
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=30.0)
MAX_CONNECTIONS = 256
# What reaching the origin can raise, before or while its answer streams.
_ORIGIN_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


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


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0),
        timeout=TIMEOUT,
        # One session serves every user: an origin's Set-Cookie must reach only the user it
        # answered, never be kept and sent along with someone else's request.
        cookie_jar=aiohttp.DummyCookieJar(),
        # The origin's bytes go to the user as they are: no decompression, and none of the
        # client's own headers added to what the user sent.
        auto_decompress=False,
        skip_auto_headers=(
            "User-Agent", "Accept", "Accept-Encoding", "Content-Type", "Content-Length"
        ),
        # Cookies and CSP headers can be long; h11 and uvicorn accept up to 64 KiB too.
        max_line_size=65536,
        max_field_size=65536,
    )


async def _pump(response: aiohttp.ClientResponse, send: Send) -> None:
    async for chunk in response.content.iter_any():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive) -> None:
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
        raw_path = scope.get("raw_path") or scope["path"].encode()
        target = raw_path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        headers = _strip_hop_by_hop(list(scope["headers"]))
        client_host = (scope.get("client") or ("", 0))[0]
        original_host = b""
        prior_xff = b""
        out: list[tuple[bytes, bytes]] = []
        for k, v in headers:
            lk = k.lower()
            if lk == b"host":
                original_host = v
                continue
            if lk == b"x-forwarded-for":
                prior_xff = v
                continue
            if lk in (b"x-forwarded-proto", b"x-forwarded-host"):
                continue
            out.append((k, v))
        xff = (prior_xff + b", " if prior_xff else b"") + client_host.encode("latin-1")
        out += [
            (b"x-forwarded-for", xff),
            (b"x-forwarded-proto", scope.get("scheme", "http").encode()),
        ]
        if original_host:
            out.append((b"x-forwarded-host", original_host))

        method = scope["method"]
        has_body = any(
            k.lower() in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"]
        )

        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return

        try:
            response = await self.session.request(
                method,
                # Encoded already: the path goes to the origin byte for byte.
                URL(origin.rstrip("/") + target, encoded=True),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in out],
                data=body() if has_body else None,
                allow_redirects=False,
            )
        except _ORIGIN_ERRORS as exc:
            log.warning("origin unreachable origin=%s error=%s", origin, type(exc).__name__)
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
                    "headers": _strip_hop_by_hop(list(response.raw_headers)),
                }
            )
            if method == "HEAD":
                await send({"type": "http.response.body", "body": b""})
                complete = True
                return response.status
            # The server drops what is sent after the client has gone, so watch for that:
            # an endless origin stream (server-sent events) must not be read on for nobody.
            pump = asyncio.ensure_future(_pump(response, send))
            gone = asyncio.ensure_future(_disconnected(receive))
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
            log.warning("origin stream broke origin=%s error=%s", origin, type(exc).__name__)
        finally:
            if complete:
                response.release()  # the connection goes back to the pool
            else:
                response.close()  # the rest is unread: the connection cannot be reused
        return response.status

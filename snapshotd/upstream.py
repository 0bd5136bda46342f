"""Pass-through to the origin: one pooled httpx client, bodies streamed both ways."""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import logging
from collections.abc import AsyncIterator

import httpx
from starlette.types import Receive, Scope, Send

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


def _client() -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(30.0, connect=5.0),
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        follow_redirects=False,
        trust_env=False,
    )
    # One client serves every user: an origin's Set-Cookie must reach only the user it
    # answered, never be kept and sent along with someone else's request.
    refuse_all = http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
    client.cookies = http.cookiejar.CookieJar(refuse_all)
    return client


async def _pump(response: httpx.Response, send: Send) -> None:
    async for chunk in response.aiter_raw():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Upstream:
    """Forwards requests to an origin and streams the answer back.

    httpcore's pool spends time quadratic in its number of connections on every request,
    so the connections are spread over a few small pools (``shards``) taken in turn.
    """

    def __init__(self, client: httpx.AsyncClient | None = None, *, shards: int = 8) -> None:
        self.clients = [client] if client is not None else [_client() for _ in range(shards)]
        self._turn = 0

    @property
    def client(self) -> httpx.AsyncClient:
        self._turn = (self._turn + 1) % len(self.clients)
        return self.clients[self._turn]

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()

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

        client = self.client
        # Not client.build_request: that would add the client's default headers
        # (Accept-Encoding, User-Agent...) and its cookies to what the user sent.
        request = httpx.Request(
            method,
            origin.rstrip("/") + target,
            headers=out,
            content=body() if has_body else None,
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
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
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": _strip_hop_by_hop(list(response.headers.raw)),
                }
            )
            if method == "HEAD":
                await send({"type": "http.response.body", "body": b""})
                return response.status_code
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
        except httpx.HTTPError as exc:
            # Headers are out; all we can do is end the body early.
            log.warning("origin stream broke origin=%s error=%s", origin, type(exc).__name__)
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()
        return response.status_code

"""The HTTP fetches snapshotd makes itself (robots.txt, sitemaps), under the address policy.

The browser reaches the network through its egress guard; this is the same policy for the
process's own requests. Invariants:

- every fetch is made for one site, and judged with that site's origin: the URL and then each
  redirect hop by :func:`snapshotd.net.address_policy.check_url` (http and https only), at most
  ``max_redirects`` hops, followed here one at a time, never by httpx;
- every connection is judged again where it is opened, by :func:`snapshotd.net.egress.judge`: a
  name is resolved once, each of its addresses judged, and the connection made to a judged
  address, so nothing resolves the name again in between. TLS keeps the URL's host name for
  SNI and the certificate check;
- each site origin has its own connection pool: a connection opened for one site is never
  reused for another, whose policy differs;
- no proxy from the environment is used, so the connection judged is the one made;
- a refusal raises :class:`Refused` (an ``httpx.HTTPError``) before anything is sent to the
  refused host; :func:`describe` gives any fetch error as one line;
- a URL in a message is written by :func:`snapshotd.http_text.urls.redact`: never with a user
  name or
  password.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpcore
import httpx

from snapshotd.http_text.urls import redact
from snapshotd.net.address_policy import check_url
from snapshotd.net.egress import Resolver, judge, resolve_host

__all__ = ["MAX_REDIRECTS", "Fetcher", "Refused", "check_hop", "describe", "read_body"]

MAX_REDIRECTS = 5
TIMEOUT = 15.0


class Refused(httpx.RequestError):
    """A fetch the address policy refuses; its text says why, in one line."""


def describe(exc: httpx.HTTPError) -> str:
    """One line for a failed fetch: the refusal as it is, else the kind of failure."""
    if isinstance(exc, Refused):
        return str(exc)
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"fetch failed ({type(exc).__name__}{': ' + detail if detail else ''})"


def check_hop(url: str, origin: str) -> str | None:
    """None when a fetch for the site at ``origin`` may request ``url``; else why not."""
    reason = check_url(url, origin)
    scheme = url.partition(":")[0].strip().lower()
    if reason is None and scheme not in ("http", "https"):
        return f"scheme {scheme}"  # data: and blob:, which only a browser can fetch
    return reason


class _JudgedBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to addresses :func:`judge` allows for ``origin``."""

    def __init__(self, origin: str, resolve: Resolver) -> None:
        self.origin = origin
        self._resolve = resolve
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        reason, addresses = await judge(host, port, self.origin, self._resolve)
        if reason is not None:
            raise Refused(f"refused: {reason}")
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # judge allows nothing without an address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Refused("refused: unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Transport(httpx.AsyncHTTPTransport):
    """httpx's own transport, on a connection pool whose connections :func:`judge` allowed."""

    def __init__(self, backend: _JudgedBackend) -> None:
        super().__init__(trust_env=False)
        limits = httpx.Limits()
        # httpx 0.28 takes no network backend: the pool it made is replaced by one with it.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


async def read_body(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a streamed answer's body, and whether it holds more:
    reading stops as soon as it does."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


class Fetcher:
    """GET requests for sites, each judged with the origin of the site it is for."""

    def __init__(
        self,
        *,
        resolve: Resolver = resolve_host,
        headers: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        self._resolve = resolve
        self._headers = dict(headers or {})
        self._timeout = timeout
        self.max_redirects = max_redirects
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, origin: str) -> httpx.AsyncClient:
        client = self._clients.get(origin)
        if client is None:
            client = self._clients[origin] = httpx.AsyncClient(
                transport=_Transport(_JudgedBackend(origin, self._resolve)),
                headers=self._headers,
                timeout=self._timeout,
                follow_redirects=False,
                trust_env=False,
            )
        return client

    @asynccontextmanager
    async def stream(self, url: str, *, origin: str) -> AsyncIterator[httpx.Response]:
        """The answer to ``GET url`` for the site at ``origin``, after the redirects the
        policy allows; its body is read from the response. Raises ``httpx.HTTPError``
        (:class:`Refused` for what the policy refuses)."""
        reason = check_hop(url, origin)
        if reason is not None:
            raise Refused(f"refused: {reason}")
        client = self._client(origin)
        try:
            request = client.build_request("GET", url)
        except httpx.InvalidURL as exc:
            raise httpx.RequestError(f"invalid URL {redact(url)[:200]!r}: {exc}") from None
        hops = 0
        while True:
            reason = check_hop(str(request.url), origin)
            if reason is not None:
                where = f" redirect to {redact(str(request.url))}" if hops else ""
                raise Refused(f"refused{where}: {reason}")
            response = await client.send(request, stream=True)
            following = response.next_request
            if following is None:
                break
            await response.aclose()
            if hops == self.max_redirects:
                raise httpx.TooManyRedirects(
                    f"more than {self.max_redirects} redirects", request=request
                )
            hops += 1
            request = following
        try:
            yield response
        finally:
            await response.aclose()

    async def post_json(
        self, url: str, body: Any, *, origin: str, headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """``POST url`` with a JSON body, judged as a request of the site at ``origin`` (""
        for none: only public addresses); redirects are not followed. Raises
        ``httpx.HTTPError`` (:class:`Refused` for what the policy refuses)."""
        reason = check_hop(url, origin)
        if reason is not None:
            raise Refused(f"refused: {reason}")
        try:
            return await self._client(origin).post(url, json=body, headers=headers)
        except httpx.InvalidURL as exc:
            raise httpx.RequestError(f"invalid URL {redact(url)[:200]!r}: {exc}") from None

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

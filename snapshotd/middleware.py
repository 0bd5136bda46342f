"""Middleware for Python web apps: :class:`SnapshotdASGI` (Starlette, FastAPI, Django's
ASGI handler, any ASGI app) and :class:`SnapshotdWSGI` (Flask, Django's WSGI handler, any
WSGI app) send bot and ``_escaped_fragment_`` requests to snapshotd's render endpoint and
everyone else to the app, as prerender-node does for Express.

    app = SnapshotdASGI(app, "http://127.0.0.1:8080", token="...")     # ASGI
    app.wsgi_app = SnapshotdWSGI(app.wsgi_app, "http://127.0.0.1:8080", token="...")  # Flask

snapshotd runs with the app's own address as its origin and the site's public names as its
hosts (``snapshotd serve --origin http://127.0.0.1:8000 --hosts shop.example.com``); the token
is one of its render tokens (``server.render_tokens``, ``SNAPSHOTD_RENDER_TOKEN``), which
open the render endpoint alone.

Invariants:
- the choice is snapshotd's own (:class:`Choice`): GET and HEAD with a valid Host, not a
  static asset, and a User-Agent snapshotd's bot data takes for a bot
  (:class:`~snapshotd.crawlers.bots.BotMatcher`, the same categories and ``add``/``remove`` a site
  takes) or an ``_escaped_fragment_`` query;
  a request carrying ``X-Snapshotd`` (snapshotd's own browser) or ``X-Snapshotd-Middleware``
  (snapshotd handing a request back to the origin when it had no snapshot in time) always
  goes to the app, so the two never send a request round in a loop;
- it fails open: when snapshotd cannot be reached, does not answer whole within ``timeout``
  seconds, or answers with anything but a snapshot answer (one carrying
  ``X-Snapshotd-Cache``: a refused token, an unknown host, an error), the app answers, and
  nothing has been sent to the client before that is decided (the answer is read whole);
- the page goes to snapshotd as one URL, whatever the client sent: percent-encoded whole
  in the render endpoint's ``url`` parameter, which no client or server on the way resolves
  or splits; a path with a dot segment (``..``, ``%2e``, between ``/`` or ``\\``, which some
  client, server or browser resolves into another path) is the app's to answer;
- only the headers a snapshot depends on go to snapshotd (never Cookie or Authorization),
  with the token as ``X-Prerender-Token`` and the client's address added to
  ``X-Forwarded-For``; ``Accept-Encoding`` is the client's, or ``identity`` when it sent
  none, so the body, passed on as snapshotd sent it, is in an encoding the client took.
The only address fetched is the operator's ``snapshotd_url``, never one a client names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from string import printable
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from snapshotd.crawlers.bots import DEFAULT_BOT_CATEGORIES, BotMatcher, is_static_asset
from snapshotd.http_text.urls import has_dot_segment, has_escaped_fragment, valid_host

__all__ = ["LOOP_HEADER", "Choice", "SnapshotdASGI", "SnapshotdWSGI"]

log = logging.getLogger("snapshotd.middleware")

# Sent to snapshotd with every request; snapshotd passes it on when it hands a request
# back to the origin (BYPASS), where this middleware then lets the app answer.
LOOP_HEADER = "x-snapshotd-middleware"
# The client's headers a snapshot answer depends on; nothing else is sent on.
SENT_ON = ("user-agent", "accept", "accept-language", "accept-encoding", "if-none-match",
           "if-modified-since", "x-forwarded-proto")
# Not copied from snapshotd's answer: the connection's own.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer"})
DEFAULT_TIMEOUT = 20.0
# What stays as it is when the request's bytes (read as latin-1) are written as a URL: the
# visible ASCII characters but '#', which would end it.
_URL_KEEPS = "".join(c for c in printable if c.isprintable() and c not in " #")


class Choice:
    """Which requests go to snapshotd, and how one is asked of it."""

    def __init__(
        self,
        snapshotd_url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        bots_add: Iterable[str] = (),
        bots_remove: Iterable[str] = (),
        bots_categories: Iterable[str] = DEFAULT_BOT_CATEGORIES,
    ) -> None:
        if not snapshotd_url.startswith(("http://", "https://")):
            raise ValueError(f"snapshotd_url must be an http(s) URL, got {snapshotd_url!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be above 0 seconds, got {timeout!r}")
        self.render_base = snapshotd_url.rstrip("/") + "/_snapshotd/render"
        self.token = token
        self.timeout = float(timeout)
        self.bots = BotMatcher(bots_add, bots_remove, bots_categories)

    def wanted(self, method: str, path: str, query: str, headers: Mapping[str, str]) -> bool:
        """Whether snapshotd should answer this request (``headers`` with lower-case names)."""
        if method not in ("GET", "HEAD") or not valid_host(headers.get("host", "")):
            return False  # a Host that is no host:port cannot name the page asked for
        if "x-snapshotd" in headers or LOOP_HEADER in headers or is_static_asset(path):
            return False
        return self.bots(headers.get("user-agent", "")) or has_escaped_fragment(query)

    def render_url(self, scheme: str, host: str, raw_path: str, query: str) -> str | None:
        """The render endpoint's URL naming the page asked for (``raw_path`` and ``query``
        the request's bytes read as latin-1); None for a path the app answers itself."""
        if has_dot_segment(raw_path):
            return None
        page = f"{scheme}://{host}{raw_path}" + (f"?{query}" if query else "")
        page = quote(page, _URL_KEEPS, encoding="latin-1")
        return f"{self.render_base}?{urlencode({'url': page})}"

    def headers_out(self, headers: Mapping[str, str], client: str | None) -> dict[str, str]:
        out = {k: headers[k] for k in SENT_ON if k in headers}
        # Exactly the client's: the HTTP client would add its own, and the answer is sent on
        # as it comes.
        out.setdefault("accept-encoding", "identity")
        forwarded = [v for v in (headers.get("x-forwarded-for"), client) if v]
        if forwarded:
            out["x-forwarded-for"] = ", ".join(forwarded)
        out[LOOP_HEADER] = "1"
        if self.token:
            out["x-prerender-token"] = self.token
        return out

    @staticmethod
    def usable(headers: httpx.Headers) -> bool:
        """Whether snapshotd's answer is a snapshot answer (or its BYPASS), to pass on."""
        return "x-snapshotd-cache" in headers

    @staticmethod
    def headers_back(headers: httpx.Headers) -> list[tuple[str, str]]:
        return [(k, v) for k, v in headers.multi_items() if k.lower() not in _HOP]


class _TooSlow(Exception):
    pass


def _failed(url: str, why: str) -> None:
    log.warning("snapshotd not used url=%s: %s; the app answers", url[:300], why)


class SnapshotdASGI:
    """ASGI middleware: bots' and ``_escaped_fragment_`` requests answered by snapshotd,
    everything else (and anything snapshotd cannot answer in time) by ``app``."""

    def __init__(self, app: Any, snapshotd_url: str, token: str | None = None,
                 **options: Any) -> None:
        self.app = app
        self.choice = Choice(snapshotd_url, token, **options)
        self._clients: dict[int, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        """One client per event loop (a client's connections belong to the loop they were
        opened on)."""
        key = id(asyncio.get_running_loop())
        client = self._clients.get(key)
        if client is None:
            client = httpx.AsyncClient(timeout=self.choice.timeout, trust_env=False)
            self._clients[key] = client
        return client

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            name = k.decode("latin-1").lower()
            value = v.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        query = scope.get("query_string", b"").decode("latin-1")
        if not self.choice.wanted(scope["method"], scope["path"], query, headers):
            await self.app(scope, receive, send)
            return
        # The request's own target when the server gives it; else its path (which holds
        # root_path), escaped again.
        raw = scope.get("raw_path")
        raw_path = raw.decode("latin-1") if raw else quote(scope["path"], safe="/%:@!$&'()*+,;=")
        url = self.choice.render_url(
            scope.get("scheme", "http"), headers["host"], raw_path.split("?", 1)[0], query
        )
        if url is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        out = self.choice.headers_out(headers, client[0] if client else None)
        try:
            status, got, body = await asyncio.wait_for(
                self._ask(url, scope["method"], out), self.choice.timeout
            )
        except (httpx.HTTPError, TimeoutError) as exc:
            _failed(url, f"{type(exc).__name__} {exc}".strip())
            await self.app(scope, receive, send)
            return
        if not self.choice.usable(got):
            _failed(url, f"status {status} without a snapshot")
            await self.app(scope, receive, send)
            return
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                        for k, v in Choice.headers_back(got)],
        })
        await send({"type": "http.response.body", "body": body})

    async def _ask(
        self, url: str, method: str, headers: dict[str, str]
    ) -> tuple[int, httpx.Headers, bytes]:
        async with self._client().stream(method, url, headers=headers) as r:
            body = b"".join([part async for part in r.aiter_raw()])
        return r.status_code, r.headers, body

    async def _lifespan(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        """The app's lifespan, the middleware's connections closed at shutdown. An app that
        takes no lifespan (Django's ASGI handler refuses the scope before it reads or sends
        anything) gets none: the middleware answers the server itself."""
        spoke = False

        async def app_receive() -> Any:
            nonlocal spoke
            spoke = True
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.aclose()
            return message

        async def app_send(message: Any) -> None:
            nonlocal spoke
            spoke = True
            await send(message)

        try:
            await self.app(scope, app_receive, app_send)
            return
        except Exception:
            if spoke:
                raise
        while (await receive())["type"] != "lifespan.shutdown":  # lifespan.startup
            await send({"type": "lifespan.startup.complete"})
        await self.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class SnapshotdWSGI:
    """WSGI middleware: bots' and ``_escaped_fragment_`` requests answered by snapshotd,
    everything else (and anything snapshotd cannot answer in time) by ``app``."""

    def __init__(self, app: Callable, snapshotd_url: str, token: str | None = None,
                 **options: Any) -> None:
        self.app = app
        self.choice = Choice(snapshotd_url, token, **options)
        # One client, its connections shared by the server's threads.
        self.client = httpx.Client(timeout=self.choice.timeout, trust_env=False)

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        headers = {
            k[5:].replace("_", "-").lower(): v for k, v in environ.items()
            if k.startswith("HTTP_")
        }
        query = environ.get("QUERY_STRING", "")
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        if not self.choice.wanted(environ.get("REQUEST_METHOD", ""), path, query, headers):
            return self.app(environ, start_response)
        # WSGI strings are the request's bytes read as latin-1: escaped again as they came
        # (a server's RAW_URI or REQUEST_URI, when it gives one, is the target itself).
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
        raw_path = raw.split("?", 1)[0] if raw and raw.startswith("/") else quote(
            path, safe="/%:@!$&'()*+,;=", encoding="latin-1"
        )
        url = self.choice.render_url(
            environ.get("wsgi.url_scheme", "http"), headers["host"], raw_path, query
        )
        if url is None:
            return self.app(environ, start_response)
        out = self.choice.headers_out(headers, environ.get("REMOTE_ADDR"))
        deadline = time.monotonic() + self.choice.timeout
        try:
            with self.client.stream(environ["REQUEST_METHOD"], url, headers=out) as r:
                parts = []
                for part in r.iter_raw():  # each read bounded by the client's timeout
                    parts.append(part)
                    if time.monotonic() > deadline:
                        raise _TooSlow(f"not answered whole in {self.choice.timeout:g} s")
        except (httpx.HTTPError, _TooSlow) as exc:
            _failed(url, f"{type(exc).__name__} {exc}".strip())
            return self.app(environ, start_response)
        if not self.choice.usable(r.headers):
            _failed(url, f"status {r.status_code} without a snapshot")
            return self.app(environ, start_response)
        try:
            reason = HTTPStatus(r.status_code).phrase
        except ValueError:
            reason = "Unknown"
        start_response(f"{r.status_code} {reason}", Choice.headers_back(r.headers), None)
        return [b"".join(parts)]

    def close(self) -> None:
        self.client.close()


"""The token check in front of every API route: :class:`TokenAuth`, an ASGI middleware.

Invariants:
- every route but ``healthz``, ``readyz``, the console's static files, Crawlbot's endpoints
  and recache (which check the same tokens themselves, the token being an argument there)
  passes the token check first, so
  nothing about the store (not even which sites exist) is told to a client without a valid
  token, whatever address it comes from; with no tokens, every such request is refused (the
  application hands in the token drawn at start when none is configured);
- a token is compared with every configured token, each in constant time, without stopping
  at the first match;
- a path holding control characters is refused before routing, which would not see them;
- ``GET /_snapshotd/metrics`` also takes the metrics token kept in the store
  (:mod:`~snapshotd.api.scrape_token`), which opens nothing else;
- the render endpoint (``/render``, ``/render/...``, nothing else) also takes a render token
  (``server.render_tokens``), which opens nothing else: not the screenshot endpoint, the API,
  metrics, recache or Crawlbot's endpoints;
- the render and screenshot endpoints (nothing else) take, without a token, a client whose
  own address (the connection's, never a header's) is in ``render_clients``; that list is
  empty unless configured.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.api.console import CONSOLE_FILES
from snapshotd.api.inputs import CONTROL
from snapshotd.api.scrape_token import ScrapeToken
from snapshotd.api.shared import PREFIX, send_error
from snapshotd.store import raised_by_stores

log = logging.getLogger("snapshotd.api")

# Paths that hold no data: reachable without a token.
OPEN_PATHS = frozenset({PREFIX + "/healthz", PREFIX + "/readyz", PREFIX + "/console"})
# Crawlbot's endpoints take the token as an argument, maybe in the body: they check it
# themselves (api/crawlbot.py), with the same tokens and comparison; so does recache.
SELF_CHECKED = PREFIX + "/v3/"
RECACHE = PREFIX + "/recache"
# The endpoints that take X-Prerender-Token, and clients of ``render_clients``.
RENDERING = (PREFIX + "/render", PREFIX + "/screenshot")
METRICS = PREFIX + "/metrics"
# The endpoint a render token opens: the render endpoint alone.
RENDER = PREFIX + "/render"


def render_only(path: str) -> bool:
    return path == RENDER or path.startswith(RENDER + "/")


def token_from(scope: Scope, *, prerender: bool) -> str | None:
    for key, value in scope.get("headers", []):
        key = key.lower()
        if key == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif prerender and key == b"x-prerender-token" and value.strip():
            return value.decode("latin-1").strip()
    return None


def token_matches(given: str, tokens: Sequence[str]) -> bool:
    """Compare against every configured token, each in constant time, without stopping early."""
    given_b = given.encode("utf-8", "surrogateescape")
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(given_b, token.encode("utf-8"))
    return ok


class TokenAuth:
    """ASGI middleware: a Bearer token for all but the open paths; the render endpoint also
    takes ``X-Prerender-Token``. With no tokens, every request to a checked path is refused."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: Sequence[str],
        render_clients: Sequence[str] = (),
        scrape: ScrapeToken | None = None,
        *,
        render_tokens: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.scrape = scrape
        self.tokens = tuple(t for t in tokens if t)
        self.render_tokens = tuple(t for t in render_tokens if t)
        self.render_clients = tuple(ipaddress.ip_network(n) for n in render_clients)

    def render_client(self, scope: Scope) -> bool:
        """Whether the connection comes from a network of ``render_clients``."""
        if not self.render_clients:
            return False
        try:
            address = ipaddress.ip_address((scope.get("client") or ("",))[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        return any(address in network for network in self.render_clients)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        rendering = path.startswith(RENDERING)
        if path in OPEN_PATHS or path.startswith(SELF_CHECKED) or path == RECACHE or (
            path.startswith(PREFIX + "/console/")
            and path.removeprefix(PREFIX + "/console/") in CONSOLE_FILES
        ):
            await self.app(scope, receive, send)
            return
        refusal = None
        if not (rendering and self.render_client(scope)):
            tokens = self.tokens + self.render_tokens if render_only(path) else self.tokens
            refusal = self.refusal(scope, tokens, prerender=rendering)
        if refusal is not None and path == METRICS and scope["method"] in ("GET", "HEAD"):
            try:
                if await self.scraper_matches(scope):
                    refusal = None
            except raised_by_stores():
                await send_error(send, 503, "store unavailable")
                return
        if refusal is not None:
            status, message = refusal
            log.info(
                "refused path=%s client=%s status=%d",
                path[:200],
                (scope.get("client") or ("-",))[0],
                status,
            )
            await send_error(send, status, message)
            return
        if CONTROL.search(path):
            # Routing would not see them (a regex '$' matches before a final newline).
            await send_error(send, 400, "the path holds control characters", "path")
            return
        await self.app(scope, receive, send)

    async def scraper_matches(self, scope: Scope) -> bool:
        """Whether the request's Bearer token is the metrics token kept in the store."""
        token = token_from(scope, prerender=False)
        return token is not None and self.scrape is not None and await self.scrape.matches(token)

    def refusal(
        self, scope: Scope, tokens: Sequence[str], *, prerender: bool
    ) -> tuple[int, str] | None:
        token = token_from(scope, prerender=prerender)
        if token is None:
            return 401, "a token is required: send 'Authorization: Bearer <token>'"
        if not token_matches(token, tokens):
            return 401, "the token was not accepted"
        return None

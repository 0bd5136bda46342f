"""Wiring: the ASGI application that ``snapshotd serve`` runs.

``create_app`` takes the frozen settings and, optionally, the I/O pieces (store, renderer,
upstream) so tests can hand in real small ones; the process's pieces are made by
:func:`snapshotd.services.build_services` and opened and closed by the lifespan through
:meth:`~snapshotd.services.Services.running`.

With no ``server.api_tokens`` configured, ``create_app`` draws a random token for the API of
this process (``serve --workers N`` draws one for all of its workers and logs the URL
itself); the lifespan logs the console URL holding it once, at start.

Shutdown, in this order: ``begin_shutdown`` (called by the server as soon as it stops, and
by the lifespan) starts no capture and lets every request waiting on one be answered with
the origin's page; then captures under way get their grace and the rest are cut short,
their paths pending again (``CaptureService.close``); then the crawler, the renderer, the
upstream and the store close.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.api import PREFIX as API_PREFIX
from snapshotd.api import create_api
from snapshotd.api.crawlbot_port import CrawlbotPort
from snapshotd.config.settings import Settings
from snapshotd.crawl.hostlock import HostLock
from snapshotd.crawlers.verification.resolver import Resolver
from snapshotd.proxy.handler import Proxy, local_port
from snapshotd.proxy.passthrough import Upstream
from snapshotd.proxy.relay import AtOnce
from snapshotd.render.renderer import Renderer
from snapshotd.rewrite import RuleSet
from snapshotd.server.shared_pool import SharedPool
from snapshotd.services import Services, build_services
from snapshotd.store import Store

log = logging.getLogger("snapshotd")


def console_url(settings: Settings, token: str) -> str:
    """The console's URL on the address ``serve`` listens on, the token in its fragment (which
    browsers never send, so it stays out of every server's log)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(settings.host, settings.host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}{API_PREFIX}/console#token={token}"


class SnapshotdApp:
    """Routes ``/_snapshotd/...`` to the API and everything else to the proxy."""

    def __init__(self, ctx: Services, *, announce: bool = True) -> None:
        assert ctx.proxy is not None, "serve's services hold a proxy"
        self.ctx = ctx
        self.announce = announce
        self.proxy: Proxy = ctx.proxy
        self.api: ASGIApp = create_api(ctx)
        # Every request taken on crawlbot_port is Crawlbot's (snapshotd.api.crawlbot_port).
        self.crawlbot_port = ctx.settings.crawlbot_port
        self.crawlbot: ASGIApp = CrawlbotPort(self.api)
        self.startup_error: BaseException | None = None

    def begin_shutdown(self) -> None:
        """The server is stopping: start no capture, and answer the requests waiting on one
        now (fail open), while the server still lets them finish; a worker that does not run
        the browser no longer takes it over."""
        self.ctx.capture.stop()
        if isinstance(self.ctx.renderer, SharedPool):
            self.ctx.renderer.stop_taking()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        ctx = self.ctx
        async with ctx.running():
            try:
                log.info(
                    "serving sites=%s crawler=%s",
                    ",".join(f"{s.name}->{s.origin}" for s in ctx.sites.sites) or "none",
                    "on" if ctx.crawler is not None else "off",
                )
                if ctx.generated_token is not None and self.announce:
                    log.info("console: %s", console_url(ctx.settings, ctx.generated_token))
                yield
            finally:
                self.begin_shutdown()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._crawlbots(scope):
            await self.crawlbot(scope, receive, send)
        elif _is_api(scope.get("path", "")):
            await self.api(scope, receive, send)
        else:
            await self.proxy(scope, receive, send)

    def answer_at_once(
        self,
        method: str,
        raw_path: str,
        query: str,
        headers: list[tuple[bytes, bytes]],
        scope: dict[str, Any],
    ) -> AtOnce:
        """A bot's cache hit answered, or a person's GET passed through, before it becomes
        an ASGI call (serve's HTTP protocol, :mod:`snapshotd.server.protocol`); None for anything
        else. The API's paths, a path with escapes (which may decode to one of them) and every
        request on ``crawlbot_port`` go the ASGI way."""
        if "%" in raw_path or _is_api(raw_path) or self._crawlbots(scope):
            return None
        return self.proxy.answer_at_once(method, raw_path, query, headers, scope)

    def _crawlbots(self, scope: Scope | dict[str, Any]) -> bool:
        """Whether the request came in on ``crawlbot_port``."""
        return bool(self.crawlbot_port) and local_port(scope) == self.crawlbot_port

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        cm = self.lifespan()
        try:
            await cm.__aenter__()
        except BaseException as exc:
            self.startup_error = exc
            await send({"type": "lifespan.startup.failed", "message": f"start-up failed: {exc}"})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        try:
            await cm.__aexit__(None, None, None)
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})


def _is_api(path: str) -> bool:
    """Whether a request's path (decoded) is the API's, ``/_snapshotd/...``."""
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    renderer: Renderer | None = None,
    upstream: Upstream | None = None,
    crawler: bool = True,
    rules: dict[str, RuleSet] | None = None,
    token: str | None = None,
    crawler_lock: HostLock | None = None,
    processes: int = 1,
    resolver: Resolver | None = None,
) -> SnapshotdApp:
    """The application of one process. ``token``, ``crawler_lock`` and ``processes``: the
    token drawn for all workers of one ``serve`` (whose console URL is logged by their
    supervisor), the lock whose holder among them runs the crawler, and how many they are;
    ``resolver``: the DNS that verifies crawlers (the system's name servers by default)."""
    announce = token is None  # else the supervisor logged the console URL
    if settings.api_tokens:
        token = None
    elif token is None:
        token = draw_token()
    return SnapshotdApp(
        build_services(
            settings,
            store=store,
            renderer=renderer,
            rules=rules,
            upstream=upstream or Upstream(),
            crawler=crawler,
            generated_token=token,
            crawler_lock=crawler_lock,
            processes=processes,
            resolver=resolver,
        ),
        announce=announce,
    )


def draw_token() -> str:
    """A token for the API of a ``serve`` whose settings name none."""
    return secrets.token_urlsafe(32)

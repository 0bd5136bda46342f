"""Wiring: the ASGI application that ``snapshotd serve`` runs.

``create_app`` takes the frozen settings and, optionally, the I/O pieces (store, renderer,
upstream) so tests can hand in real small ones; it opens and closes them in the lifespan.

With no ``server.api_tokens`` configured, ``create_app`` draws a random token for the API of
this process; the lifespan logs the console URL holding it once, at start.

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
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.api import PREFIX as API_PREFIX
from snapshotd.capture import CaptureService
from snapshotd.config import Settings
from snapshotd.metrics import Metrics
from snapshotd.proxy import Proxy
from snapshotd.render.base import Renderer
from snapshotd.rewrite import RuleSet, load_rules
from snapshotd.store import Store, open_store
from snapshotd.upstream import Upstream

log = logging.getLogger("snapshotd")


def load_site_rules(settings: Settings) -> dict[str, RuleSet]:
    """Every site's rules, parsed now so a broken file stops start-up (raises RulesError)."""
    return {s.name: load_rules(s.rules) if s.rules else RuleSet.empty() for s in settings.sites}


@dataclass
class Context:
    """The long-lived pieces one application shares between proxy, crawler and API."""

    settings: Settings
    store: Store
    renderer: Renderer
    upstream: Upstream
    rules: dict[str, RuleSet]
    metrics: Metrics
    capture: CaptureService
    crawler: Any = None
    proxy: Proxy | None = None
    # Drawn at start when no token is configured; the API of this process takes only it.
    generated_token: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def console_url(settings: Settings, token: str) -> str:
    """The console's URL on the address ``serve`` listens on, the token in its fragment (which
    browsers never send, so it stays out of every server's log)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(settings.host, settings.host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}{API_PREFIX}/console#token={token}"


def _default_renderer(settings: Settings) -> Renderer:
    from snapshotd.render import BrowserPool

    return BrowserPool(settings.browser)


class SnapshotdApp:
    """Routes ``/_snapshotd/...`` to the API and everything else to the proxy."""

    def __init__(self, ctx: Context, *, crawler: bool) -> None:
        from snapshotd.api import create_api

        self.ctx = ctx
        self.run_crawler = crawler
        self.proxy = ctx.proxy = Proxy(
            ctx.settings, ctx.store, ctx.capture, ctx.upstream, ctx.rules, metrics=ctx.metrics
        )
        self.api: ASGIApp = create_api(ctx)

    def begin_shutdown(self) -> None:
        """The server is stopping: start no capture, and answer the requests waiting on one
        now (fail open), while the server still lets them finish."""
        self.ctx.capture.stop()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        ctx = self.ctx
        await ctx.store.open()
        try:
            await ctx.renderer.start()
            try:
                await ctx.capture.start()
                try:
                    if self.run_crawler:
                        from snapshotd.crawler import Crawler

                        ctx.crawler = Crawler(
                            ctx.settings,
                            ctx.store,
                            ctx.capture,
                            metrics=ctx.metrics,
                            rules=ctx.rules,
                        )
                        await ctx.crawler.start()
                    log.info(
                        "serving sites=%s crawler=%s",
                        ",".join(f"{s.name}->{s.origin}" for s in ctx.settings.sites),
                        "on" if self.run_crawler else "off",
                    )
                    if ctx.generated_token is not None:
                        log.info("console: %s", console_url(ctx.settings, ctx.generated_token))
                    yield
                finally:
                    self.begin_shutdown()
                    await ctx.capture.close()
                    if ctx.crawler is not None:
                        await ctx.crawler.stop()
            finally:
                await ctx.renderer.close()
                await ctx.upstream.close()
        finally:
            await ctx.store.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope.get("path", "")
        if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
            await self.api(scope, receive, send)
        else:
            await self.proxy(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        cm = self.lifespan()
        try:
            await cm.__aenter__()
        except BaseException as exc:
            log.error("start-up failed: %s", exc)
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        try:
            await cm.__aexit__(None, None, None)
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    renderer: Renderer | None = None,
    upstream: Upstream | None = None,
    crawler: bool = True,
    rules: dict[str, RuleSet] | None = None,
) -> SnapshotdApp:
    store = store or open_store(settings.db)
    renderer = renderer or _default_renderer(settings)
    metrics = Metrics()
    ctx = Context(
        settings=settings,
        store=store,
        renderer=renderer,
        upstream=upstream or Upstream(),
        rules=rules if rules is not None else load_site_rules(settings),
        metrics=metrics,
        capture=CaptureService(settings, store, renderer, metrics=metrics),
        generated_token=None if settings.api_tokens else secrets.token_urlsafe(32),
    )
    return SnapshotdApp(ctx, crawler=crawler)

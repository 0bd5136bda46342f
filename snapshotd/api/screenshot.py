"""Rendertron-compatible screenshots: ``/_snapshotd/screenshot/<absolute URL>`` or
``/_snapshotd/screenshot?url=<absolute URL>``, a PNG of the page's first screen, for link
previews and visual checks.

Invariants:
- what may be named is what the render endpoint takes (:func:`~snapshotd.api.render.page_named`:
  a configured site's URL, 403 otherwise, nothing fetched);
- a page is admitted as a bot's request for it is, by the proxy's one admission decision
  (:meth:`~snapshotd.proxy.handler.Proxy.admission`: rules, ignore list, ``max_pages``,
  ``new_paths_per_minute``, a pause), before any cached picture is looked at; only a page
  the decision would serve or capture is captured, anything else gets its refusal
  (:func:`refusal`) and nothing is fetched; a new page captured counts against
  ``new_paths_per_minute`` as a bot's does;
- the picture comes from a
  capture like any other (the site's settings, readiness, address guard and cleanup), taken
  when the page is ready, the moment its HTML is taken; the stored snapshot is left alone
  (the viewport is the request's, not the crawl's);
- ``width`` and ``height`` are bounded (:data:`SIZES`), so is every PNG; at most
  :data:`IN_FLIGHT` screenshot captures run at once in a process, the rest get 503 at once;
- each PNG is kept :data:`TTL` seconds in a cache of at most :data:`CACHE_BYTES` per
  process, and concurrent requests for one screenshot share one capture.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from snapshotd.api.inputs import is_number, query
from snapshotd.api.openapi import operation, param
from snapshotd.api.render import page_named, render_target
from snapshotd.api.shared import ApiError, context, error_response
from snapshotd.proxy.handler import header_map
from snapshotd.render.renderer import CaptureResult, Shot, ShotRenderer

if TYPE_CHECKING:
    from snapshotd.config.settings import SiteSettings
    from snapshotd.services import Services
    from snapshotd.sites.admission import Decision

log = logging.getLogger("snapshotd.api")

# Rendertron's defaults (1000 x 1000), and the bounds of each side in CSS pixels.
DEFAULT_SIZE = 1000
SIZES = {"width": (100, 2000), "height": (100, 2000)}
TTL = 600.0
CACHE_BYTES = 64 * 2**20
IN_FLIGHT = 2
# A refused page's answer, by admission's refusal reason (any other: 403).
REFUSED_STATUS = {"rate": 429, "paused": 503}
RETRY_AFTER = "60"

Key = tuple[str, str, int, int, str]  # site, path, width, height, device profile


class Screenshots:
    """The process's screenshots: cached PNGs, and the captures under way."""

    def __init__(self, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        self.clock = clock
        self._kept: OrderedDict[Key, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._running: dict[Key, asyncio.Future[CaptureResult]] = {}

    def cached(self, key: Key) -> bytes | None:
        entry = self._kept.get(key)
        if entry is None:
            return None
        if entry[0] <= self.clock():
            self._drop(key)
            return None
        self._kept.move_to_end(key)
        return entry[1]

    def keep(self, key: Key, png: bytes) -> None:
        if len(png) > CACHE_BYTES // 4:
            return
        if key in self._kept:
            self._drop(key)
        self._kept[key] = (self.clock() + TTL, png)
        self._bytes += len(png)
        while self._bytes > CACHE_BYTES:
            self._drop(next(iter(self._kept)))

    def _drop(self, key: Key) -> None:
        _, png = self._kept.pop(key)
        self._bytes -= len(png)

    async def take(
        self, ctx: Services, key: Key, site: SiteSettings, shot: Shot
    ) -> CaptureResult:
        """The capture for ``key`` (a page of ``site``), shared with any request already
        waiting for it."""
        running = self._running.get(key)
        if running is not None:
            return await asyncio.shield(running)
        if len(self._running) >= IN_FLIGHT:
            raise ApiError(503, "screenshots are busy: try again shortly")
        renderer = ctx.renderer
        if not isinstance(renderer, ShotRenderer):
            raise ApiError(501, "this renderer takes no screenshots")
        future = asyncio.ensure_future(
            renderer.capture(site.url_for(key[1]), site, key[4], shot=shot)
        )
        self._running[key] = future
        try:
            return await asyncio.shield(future)
        finally:
            if future.done():
                self._running.pop(key, None)
            else:
                future.add_done_callback(lambda _: self._running.pop(key, None))


def _side(raw: str | None, name: str) -> int:
    if raw is None:
        return DEFAULT_SIZE
    low, high = SIZES[name]
    if not is_number(raw) or not low <= int(raw) <= high:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}", name)
    return int(raw)


def refusal(decision: Decision) -> Response | None:
    """The answer to a screenshot of a page admission does not let a bot have rendered:
    the rules' redirect or status as the render endpoint answers it, 403 for a page the
    site ignores, does not process or keeps from this claimant, or past ``max_pages``, 429
    past ``new_paths_per_minute`` and 503 while the site is paused (both with Retry-After);
    None for a page to capture."""
    kind, path = decision.kind, decision.path[:200]
    if kind in ("serve", "fill", "capture"):
        return None
    if kind == "redirect":
        location = decision.location or decision.path
        answer = error_response(decision.status or 302, f"the site's rules redirect to {location}")
        answer.headers["location"] = location
        return answer
    if kind == "status":
        status = decision.status or 404
        return error_response(status, f"the site's rules answer {status} for {path}", "url")
    why = {"ignored": "on the site's ignore list", "person": "not from a crawler it trusts"}.get(
        kind, decision.reason or kind
    )
    status = REFUSED_STATUS.get(decision.reason, 403) if kind == "refused" else 403
    answer = error_response(status, f"no screenshot of {path}: {why}", "url")
    if status in (429, 503):
        answer.headers["retry-after"] = RETRY_AFTER
    return answer


async def screenshot(request: Request) -> Response:
    ctx = context(request)
    args = query(request, {"url", "width", "height", "mobile"})
    width, height = _side(args.get("width"), "width"), _side(args.get("height"), "height")
    # The request's query is this endpoint's: a URL in the path keeps its own query escaped
    # (%3F), as Rendertron's clients send it.
    scope = request.scope if "url" in args else {**request.scope, "query_string": b""}
    site, parts, path = page_named(ctx, render_target(scope, "screenshot"))
    # Rendertron's ``mobile`` option: the phone crawler's device, else the desktop one's.
    profile = "mobile" if "mobile" in args else "desktop"
    proxy = ctx.proxy
    assert proxy is not None  # serve builds it
    headers = {**header_map(request.scope["headers"]), "host": parts.netloc}
    who = proxy.claims.who(site.name, headers, request.scope)
    decision = await proxy.admission(site, path, headers, who, profile)
    refused = refusal(decision)
    if refused is not None:
        log.info("screenshot refused site=%s path=%s decision=%s %s status=%d", site.name,
                 path[:200], decision.kind, decision.reason, refused.status_code)
        return refused
    path = decision.path
    key = (site.name, path, width, height, profile)
    shots: Screenshots = request.app.state.screenshots
    png = shots.cached(key)
    result = "HIT"
    if png is None:
        result = "MISS"
        captured = await shots.take(ctx, key, site, Shot(width, height))
        if not captured.png:
            why = captured.error or f"http {captured.status}, nothing to show"
            log.info("screenshot failed site=%s path=%s: %s", site.name, path[:200], why)
            raise ApiError(502, f"the page could not be captured: {why}")
        png = captured.png
        shots.keep(key, png)
        if decision.new and not decision.queue:  # as a bot's new path (not a trusted one's)
            proxy.new_paths.spent(site.name)
    return Response(
        png,
        media_type="image/png",
        headers={"x-snapshotd-cache": result, "cache-control": f"max-age={int(TTL)}"},
    )


def _described(where: str) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint with its OpenAPI operation, for a route naming the URL ``where``."""

    async def endpoint(request: Request) -> Response:
        return await screenshot(request)

    return operation(
        "Rendertron-compatible: a PNG of the first screen of a configured site's page "
        f"(the absolute URL in the {where}), as snapshotd captures it",
        params=[
            param("url", where, "absolute http(s) URL", {"type": "string"}, required=True),
            param("width", "query", "viewport width, 100-2000 (1000)", {"type": "integer"}),
            param("height", "query", "viewport height, 100-2000 (1000)", {"type": "integer"}),
        ],
        responses={
            "200": "image/png (X-Snapshotd-Cache: HIT or MISS)",
            "400": "a bad url, width or height (named)",
            "401": "no token, or a wrong one",
            "403": "the host is not a configured site's, or admission refuses the page",
            "429": "a new page past the site's new_paths_per_minute (Retry-After)",
            "502": "the page could not be captured (why, in error)",
            "503": "too many screenshots under way, or the site is paused",
        },
        content="image/png",
        security=[{"bearer": []}, {"prerenderToken": []}],
    )(endpoint)


screenshot_in_path = _described("path")
screenshot_in_query = _described("query")

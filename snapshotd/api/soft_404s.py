"""A site's soft 404s (SPEC 5.6): the not-found view it learned, how many of its paths show it,
and learning it again at the operator's word."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.openapi import AUTH_ERRORS, NOT_FOUND, SITE, operation
from snapshotd.api.paths import site_or_404
from snapshotd.api.shared import context
from snapshotd.capture.soft_404 import describe
from snapshotd.config.settings import SiteSettings

__all__ = ["learn_not_found_view", "not_found_answer"]


async def not_found_answer(ctx: Any, site: SiteSettings) -> dict[str, Any]:
    """The site's view as :func:`~snapshotd.capture.soft_404.describe` tells it, with
    ``paths`` (its paths whose last capture showed it) and ``answered`` (those answered
    404 or 410)."""
    shown, answered = await ctx.store.not_found_count(site.name)
    known = await ctx.capture.not_found.stored(site.name, fresh=True)
    return {"view": describe(known, site), "paths": shown, "answered": answered}


@operation(
    "learn the site's not-found view again now: two paths no one can guess and the site's "
    "first seed with the pages it links to, rendered through the browser pool; answers what "
    "the site's 'not_found' then is",
    params=[SITE],
    responses={"200": '{"view": {...}, "paths": n, "answered": n}', **AUTH_ERRORS, **NOT_FOUND},
)
async def learn_not_found_view(request: Request) -> Response:
    ctx = context(request)
    site = site_or_404(request)
    if site.soft_404 != "off":
        await ctx.capture.not_found.learn_now(site)
    return JSONResponse(await not_found_answer(ctx, site))

"""Everything under ``/_snapshotd/`` (SPEC section 7): the JSON API, the Prerender-compatible
render endpoint, health, metrics and the web console, built from one route table.

Modules: :mod:`~snapshotd.api.shared` (prefix, errors, the shared context),
:mod:`~snapshotd.api.auth` (the token check), :mod:`~snapshotd.api.inputs` (checked input),
:mod:`~snapshotd.api.paths` and :mod:`~snapshotd.api.sitemap` (a site's paths),
:mod:`~snapshotd.api.monitoring`, :mod:`~snapshotd.api.render`, :mod:`~snapshotd.api.console`,
:mod:`~snapshotd.api.openapi` (the document, derived from the routes).

Invariants:
- every route but ``healthz`` and the console's static files passes :class:`TokenAuth` first,
  so nothing about the store (not even which sites exist) is told to a client without a valid
  token, whatever address it comes from; with no token configured, the one token is the one
  drawn at start (``Services.generated_token``);
- a write validates its whole input before it touches the store, and a batch is one
  ``enqueue_many`` transaction: a request is applied entirely or not at all;
- request bodies are bounded while they are read, not after;
- every route carries its OpenAPI operation: :func:`create_api` refuses a table with one that
  does not, so the document served describes exactly the routes served.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from snapshotd.api import (
    console,
    crawlbot,
    monitoring,
    paths,
    ready,
    recache,
    render,
    screenshot,
    sitemap,
    sites,
    soft_404s,
)
from snapshotd.api import query_params as params
from snapshotd.api.auth import TokenAuth, token_matches
from snapshotd.api.fresh import FreshSites
from snapshotd.api.inputs import MAX_BODY
from snapshotd.api.openapi import document, openapi_json
from snapshotd.api.paths import MAX_PATHS_PER_CALL
from snapshotd.api.scrape_token import ScrapeToken
from snapshotd.api.shared import API, PREFIX, ApiError, api_error, http_error, store_error
from snapshotd.crawl.sitemaps import MAX_SITEMAP_URLS
from snapshotd.store import raised_by_stores

if TYPE_CHECKING:
    from snapshotd.services import Services

__all__ = [
    "MAX_BODY",
    "MAX_PATHS_PER_CALL",
    "MAX_SITEMAP_URLS",
    "PREFIX",
    "ROUTES",
    "create_api",
    "openapi",
    "token_matches",
]

_SITE = API + "/sites/{site}"

ROUTES: tuple[BaseRoute, ...] = (
    Route(f"{PREFIX}/healthz", monitoring.healthz),
    Route(f"{PREFIX}/readyz", ready.readyz),
    Route(f"{PREFIX}/metrics", monitoring.metrics),
    Route(f"{PREFIX}/api/openapi.json", openapi_json),
    Route(f"{API}/sites", monitoring.sites),
    Route(f"{API}/stats", monitoring.stats),
    Route(_SITE, sites.get_site, methods=["GET"]),
    Route(_SITE, sites.put_site, methods=["PUT"]),
    Route(_SITE, sites.delete_site, methods=["DELETE"]),
    Route(f"{_SITE}/pause", sites.pause_site, methods=["POST"]),
    Route(f"{_SITE}/site-token", sites.rotate_site_token, methods=["POST"]),
    Route(f"{_SITE}/resume", sites.resume_site, methods=["POST"]),
    Route(f"{_SITE}/restart", sites.restart_site, methods=["POST"]),
    Route(f"{_SITE}/round", sites.round_site, methods=["POST"]),
    Route(f"{_SITE}/params", params.get_params, methods=["GET"]),
    Route(f"{_SITE}/params/{{name}}", params.put_param, methods=["PUT"]),
    Route(f"{_SITE}/params/{{name}}", params.delete_param, methods=["DELETE"]),
    Route(f"{_SITE}/paths", paths.list_paths, methods=["GET"]),
    Route(f"{_SITE}/paths", paths.post_paths, methods=["POST"]),
    Route(f"{_SITE}/paths/{{path:path}}", paths.get_path, methods=["GET"]),
    Route(f"{_SITE}/paths/{{path:path}}", paths.delete_path, methods=["DELETE"]),
    Route(f"{_SITE}/snapshot/{{path:path}}", paths.get_snapshot),
    Route(f"{_SITE}/sitemap", sitemap.post_sitemap, methods=["POST"]),
    Route(f"{_SITE}/sitemap", sitemap.get_sitemap, methods=["GET"]),
    Route(f"{_SITE}/not-found-view", soft_404s.learn_not_found_view, methods=["POST"]),
    Route(f"{PREFIX}/render", render.render_in_query, methods=["GET", "HEAD"]),
    Route(f"{PREFIX}/render/{{url:path}}", render.render_in_path, methods=["GET", "HEAD"]),
    Route(f"{PREFIX}/screenshot", screenshot.screenshot_in_query, methods=["GET", "HEAD"]),
    Route(
        f"{PREFIX}/screenshot/{{url:path}}", screenshot.screenshot_in_path, methods=["GET", "HEAD"]
    ),
    Route(f"{PREFIX}/recache", recache.recache, methods=["POST"]),
    Route(f"{crawlbot.V3}/crawl", crawlbot.crawl, methods=["GET", "POST"]),
    Route(f"{crawlbot.V3}/crawl/data", crawlbot.crawl_data, methods=["GET"]),
    Route(f"{crawlbot.V3}/crawl/download/{{download}}", crawlbot.crawl_download, methods=["GET"]),
    Route(f"{PREFIX}/console", console.console_page),
    Route(f"{PREFIX}/console/{{file}}", console.console_file),
)


def openapi() -> dict[str, Any]:
    """The OpenAPI 3 description of every route :func:`create_api` serves."""
    return document(ROUTES)


def create_api(ctx: Services, routes: Sequence[BaseRoute] = ROUTES) -> ASGIApp:
    """The API for ``ctx``: ``routes`` behind the token check. ValueError names a route that
    carries no OpenAPI operation."""
    app = Starlette(
        routes=list(routes),
        exception_handlers={
            ApiError: api_error,
            HTTPException: http_error,
            **dict.fromkeys(raised_by_stores(), store_error),
        },
    )
    app.router.redirect_slashes = False
    app.state.ctx = ctx
    app.state.openapi = document(app.routes)
    app.state.rate_samples = deque()
    app.state.console_files = console.read_console_files()
    app.state.screenshots = screenshot.Screenshots()
    app.state.readiness = ready.Readiness()
    tokens = ctx.settings.api_tokens or ((ctx.generated_token,) if ctx.generated_token else ())
    return TokenAuth(
        FreshSites(app, ctx.sites), tokens, ctx.settings.render_clients, ScrapeToken(ctx.store),
        render_tokens=ctx.settings.render_tokens,
    )

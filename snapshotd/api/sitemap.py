"""A sitemap uploaded to queue its URLs, and the site's own sitemap read back
(:mod:`snapshotd.search.own_sitemap`).

Invariants:
- the body is bounded while it is read; a file past :data:`MAX_SITEMAP_URLS` URLs is refused
  whole (unlike the crawler, which keeps the first ones), so nothing is half-applied;
- every URL is checked before any is queued: one of another site's host, or not an http(s)
  URL, is skipped and named in the answer; the rest are queued by
  :func:`~snapshotd.api.paths.queue`, in chunks only so the crawler and the proxy can write too.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.inputs import (
    check_priority,
    is_number,
    normalise_site_path,
    query,
    query_flag,
    read_body,
)
from snapshotd.api.openapi import SITE, WRITE_ERRORS, operation, param
from snapshotd.api.paths import queue, site_or_404
from snapshotd.api.shared import ApiError, context
from snapshotd.crawl.sitemaps import MAX_SITEMAP_URLS, SitemapError, parse_sitemap
from snapshotd.http_text.urls import BadRequest, site_path_from_url
from snapshotd.search.own_sitemap import build_sitemap, part_of, wants_gzip
from snapshotd.store.interface import PRIORITY_API

log = logging.getLogger("snapshotd.api")

SITEMAP_CHUNK = 2_000


def parse_sitemap_upload(body: bytes) -> list[str]:
    """The URLs of an uploaded sitemap (XML or a text list, gzip allowed); ApiError if bad.

    Unlike the crawler, which keeps the first 50,000 URLs of a longer file, an upload past the
    bound is refused whole, so nothing is half-applied."""
    if not body.strip():
        raise ApiError(400, "the body is empty: send a sitemap's XML", "body")
    try:
        sitemap = parse_sitemap(body, max_urls=MAX_SITEMAP_URLS)
    except SitemapError as exc:
        raise ApiError(400, f"not a readable sitemap: {exc}", "body") from None
    if sitemap.kind == "sitemapindex":
        raise ApiError(
            400,
            "this is a sitemap index: upload the sitemaps it lists, or name it in the site's "
            "'sitemaps' setting for the crawler to follow",
            "body",
        )
    if sitemap.truncated:
        raise ApiError(400, f"the sitemap lists more than {MAX_SITEMAP_URLS} URLs", "body")
    if sitemap.kind == "text" and not sitemap.entries:
        raise ApiError(400, "neither a sitemap's XML nor a list of http(s) URLs", "body")
    return [entry.loc for entry in sitemap.entries]


@operation(
    f"queue the URLs of a sitemap (XML, gzip allowed, at most "
    f"{MAX_SITEMAP_URLS} URLs) at priority 2 unless ?priority= says otherwise",
    params=[
        SITE,
        param("priority", "query", "0-3", {"type": "integer", "default": PRIORITY_API}),
        param(
            "force",
            "query",
            "recapture fresh paths too",
            {"type": "boolean", "default": False},
        ),
    ],
    body={"required": True, "content": {"application/xml": {}}},
    responses={
        "200": '{"found": n, "results": {...}, "skipped": [...]}',
        "400": "not a sitemap, or bad XML",
        **WRITE_ERRORS,
    },
)
async def post_sitemap(request: Request) -> Response:
    ctx = context(request)
    site = site_or_404(request)
    q = query(request, {"priority", "force"})
    raw_priority = q.get("priority", str(PRIORITY_API))
    if not is_number(raw_priority):
        raise ApiError(400, "priority must be an integer from 0 to 3", "priority")
    priority = check_priority(int(raw_priority))
    force = query_flag(q.get("force"), "force")
    urls = parse_sitemap_upload(await read_body(request))
    paths: list[str] = []
    skipped: list[dict[str, str]] = []
    for url in urls:
        reason = None
        try:
            parts = urlsplit(url)
            hostname, _port = parts.hostname, parts.port
        except ValueError:
            skipped.append({"url": url[:500], "reason": "not a URL"})
            continue
        if parts.scheme or parts.netloc:
            if parts.scheme not in ("http", "https") or not hostname:
                reason = "not an http(s) URL"
            elif ctx.sites.site_for_url(url) is not site:
                reason = "another site's host"
        if reason is None:
            try:
                site_path = site_path_from_url(url, site.ignored_params)
                if site_path is None:
                    raise BadRequest("not an http(s) URL")
                paths.append(normalise_site_path(site_path, site.ignored_params))
            except BadRequest as exc:
                reason = str(exc)
        if reason is not None:
            skipped.append({"url": url[:500], "reason": reason})
    # Every URL is checked by now; chunks only let the crawler and the proxy write too.
    results, counts = await queue(ctx, site, paths, priority, force, chunk=SITEMAP_CHUNK)
    log.info(
        "api sitemap site=%s urls=%d skipped=%d priority=%d %s",
        site.name,
        len(urls),
        len(skipped),
        priority,
        " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
    )
    return JSONResponse(
        {
            "site": site.name,
            "priority": priority,
            "found": len(urls),
            "counts": counts,
            "skipped": skipped[:100],
            "skipped_count": len(skipped),
            "results": results[:1000],
        }
    )


@operation(
    "the site's own sitemap, built from its snapshots: its 200 pages that are no copy, "
    "lastmod when each page's main text last changed; past 50,000 pages a sitemap index "
    "of ?part=N files; gzip when Accept-Encoding takes it",
    params=[SITE, param("part", "query", "a part of a sitemap index, from 1", {"type": "integer"})],
    responses={"200": "sitemaps.org XML", "400": "a query other than ?part=N",
               "404": "no such site or part"},
    content="application/xml",
)
async def get_sitemap(request: Request) -> Response:
    ctx = context(request)
    site = site_or_404(request)
    try:
        part = part_of(request.url.query)
    except ValueError as exc:
        raise ApiError(400, str(exc), "part") from None
    address = str(request.url.replace(query=""))
    answer = await build_sitemap(
        ctx.store, site, address, part,
        gzipped=wants_gzip(request.headers.get("accept-encoding", "")),
    )
    if answer is None:
        what = "the site has no page to list yet" if part is None else f"no part {part}"
        raise ApiError(404, f"no sitemap: {what}", "part")
    return Response(answer.body, headers=answer.headers)

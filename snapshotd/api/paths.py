"""A site's paths: list, queue, read and delete them, and read a stored snapshot.

Invariants:
- a write validates its whole input before it touches the store, and is applied entirely or
  not at all: :func:`queue` asks admission about every path first (no writes), then queues
  them in one ``enqueue_many`` transaction (or one per chunk of a long, already checked list);
- a path is admitted exactly as the proxy and the crawler admit one
  (:mod:`snapshotd.sites.admission`);
- a snapshot is served so that, opened in a browser, it cannot run or reach this origin.
"""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.inputs import (
    check_bool,
    check_priority,
    is_number,
    normalise_site_path,
    parse_json_object,
    query,
    query_flag,
    read_body,
    record_json,
    site_path_from_param,
)
from snapshotd.api.openapi import (
    AUTH_ERRORS,
    NOT_FOUND,
    PATH,
    SITE,
    WRITE_ERRORS,
    operation,
    param,
)
from snapshotd.api.shared import ApiError, context
from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.http_text.urls import BadRequest
from snapshotd.proxy.snapshots import accepts_gzip
from snapshotd.sites.admission import StoreFacts, admit, decide
from snapshotd.store.interface import PRIORITY_API, STATES, iso_time

if TYPE_CHECKING:
    from snapshotd.services import Services

log = logging.getLogger("snapshotd.api")

MAX_PATHS_PER_CALL = 10_000
MAX_PAGE = 1000
DEFAULT_PAGE = 50


def site_or_404(request: Request) -> SiteSettings:
    """The site named by the ``{site}`` parameter."""
    name = request.path_params["site"]
    site = context(request).sites.site(name)
    if site is None:
        raise ApiError(404, f"no site is named {name!r}", "site")
    return site


async def site_and_path(request: Request) -> tuple[SiteSettings, str]:
    """The site named by ``{site}`` and the site path named by ``{path}``: the path exactly
    as named when the store holds it (a path an older version stored in another form, such
    as ``/#!/café``, is its own ``ref``), else its normal form."""
    site, param = site_or_404(request), request.path_params["path"]
    path = site_path_from_param(param)
    if "/" + param != path and await context(request).store.get_path(site.name, "/" + param):
        return site, "/" + param
    return site, path


async def queue(
    ctx: Services,
    site: SiteSettings,
    paths: Sequence[str],
    priority: int,
    force: bool,
    *,
    chunk: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rules first (no writes), then one transaction for every path that is queued, or
    one per ``chunk`` paths, so a long list does not hold the store's writer for long."""
    view = ctx.sites.view_of(site)  # its settings and rules of one version
    site, rules = view.settings, view.rules
    facts = StoreFacts(ctx.store, site.name)
    now = time.time()
    results: list[dict[str, Any]] = []
    to_queue: list[tuple[int, str]] = []
    for p in paths:
        entry: dict[str, Any] = {"path": p}
        decision = await admit(
            decide(site, rules, p, source="api", now=now, host=site.request_host), facts
        )
        if decision.kind in ("redirect", "status"):
            entry.update(result=decision.kind, status=decision.status)
            if decision.kind == "redirect":
                entry["location"] = decision.location
        elif decision.kind in ("ignored", "refused"):
            entry["result"] = decision.kind
            if decision.reason:
                entry["reason"] = decision.reason
        else:
            if decision.path != p:
                entry["queued_as"] = decision.path
            to_queue.append((len(results), decision.path))
        results.append(entry)
    step = chunk or len(to_queue) or 1
    for start in range(0, len(to_queue), step):
        part = to_queue[start : start + step]
        answers = await ctx.store.enqueue_many(
            site.name, [(t, 0) for _, t in part], priority, force=force
        )
        for (i, _), answer in zip(part, answers, strict=True):
            results[i]["result"] = answer
    if to_queue and ctx.crawler is not None:
        ctx.crawler.wake()
    counts: dict[str, int] = {}
    for entry in results:
        counts[entry["result"]] = counts.get(entry["result"], 0) + 1
    return results, counts


@operation(
    "one page of paths, newest first or in crawl order",
    params=[
        SITE,
        param("state", "query", "one state", {"type": "string", "enum": list(STATES)}),
        param("prefix", "query", "paths starting with this", {"type": "string"}),
        param(
            "limit",
            "query",
            f"page size, 1-{MAX_PAGE}",
            {"type": "integer", "default": DEFAULT_PAGE},
        ),
        param("cursor", "query", "next_cursor of the page before", {"type": "string"}),
        param(
            "order",
            "query",
            "newest (by insertion, the default) or crawl (the order the crawler takes them)",
            {"type": "string", "enum": ["newest", "crawl"]},
        ),
        param("not_found", "query", "true: only the paths whose last capture showed the "
              "site's not-found view", {"type": "boolean"}),
    ],
    responses={
        "200": '{"paths": [Path], "next_cursor": string|null}',
        "400": "a bad parameter (named)",
        **AUTH_ERRORS,
        **NOT_FOUND,
    },
)
async def list_paths(request: Request) -> Response:
    site = site_or_404(request)
    q = query(request, {"state", "prefix", "limit", "cursor", "order", "not_found"})
    state = q.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(400, f"state must be one of {', '.join(STATES)}", "state")
    prefix = q.get("prefix") or None
    if prefix is not None and not prefix.startswith("/"):
        raise ApiError(400, "prefix must start with '/'", "prefix")
    raw_limit = q.get("limit", str(DEFAULT_PAGE))
    if not is_number(raw_limit) or not 1 <= int(raw_limit) <= MAX_PAGE:
        raise ApiError(400, f"limit must be an integer from 1 to {MAX_PAGE}", "limit")
    order = q.get("order") or "newest"
    if order not in ("newest", "crawl"):
        raise ApiError(400, "order must be newest or crawl", "order")
    raw_cursor = q.get("cursor") or None
    if raw_cursor is not None and not (is_number(raw_cursor) and len(raw_cursor) < 19):
        raise ApiError(400, "cursor must be a next_cursor this API gave", "cursor")
    records, next_cursor = await context(request).store.list_paths(
        site.name,
        state=state,
        prefix=prefix,
        limit=int(raw_limit),
        cursor=int(raw_cursor) if raw_cursor else None,
        crawl_order=order == "crawl",
        not_found=query_flag(q.get("not_found"), "not_found"),
    )
    profiles = await context(request).store.own_profiles(site.name, [r.path for r in records])
    return JSONResponse(
        {
            "site": site.name,
            "paths": [record_json(r, profiles.get(r.path, ())) for r in records],
            "next_cursor": None if next_cursor is None else str(next_cursor),
        }
    )


@operation(
    f"set paths pending (at most {MAX_PATHS_PER_CALL} per call, all or none); "
    "answers per path: queued, requeued, reprioritised, pending, processing, "
    "fresh (captured and not expired: use force), ignored, redirect or status "
    "(by the site's rewrite rules)",
    params=[SITE],
    body={
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["paths"],
                    "properties": {
                        "paths": {
                            "type": "array",
                            "items": {"type": "string"},
                            "maxItems": MAX_PATHS_PER_CALL,
                        },
                        "priority": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 3,
                            "default": PRIORITY_API,
                        },
                        "force": {"type": "boolean", "default": False},
                    },
                }
            }
        },
    },
    responses={
        "200": '{"results": [...], "counts": {...}}',
        "400": "a bad field (named)",
        **WRITE_ERRORS,
    },
)
async def post_paths(request: Request) -> Response:
    site = site_or_404(request)
    data = parse_json_object(await read_body(request))
    unknown = set(data) - {"paths", "priority", "force"}
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(400, f"unknown field {name!r}: expected paths, priority, force", name)
    if "paths" not in data:
        raise ApiError(400, 'paths is required: a list of site paths like "/a"', "paths")
    raw = data["paths"]
    if not isinstance(raw, list):
        raise ApiError(400, "paths must be a list of strings", "paths")
    if not raw:
        raise ApiError(400, "paths is empty", "paths")
    if len(raw) > MAX_PATHS_PER_CALL:
        raise ApiError(
            400,
            f"paths holds {len(raw)} entries; at most {MAX_PATHS_PER_CALL} per call",
            "paths",
        )
    priority = check_priority(data.get("priority", PRIORITY_API))
    force = check_bool(data.get("force", False), "force")
    paths = []
    for i, p in enumerate(raw):
        if not isinstance(p, str):
            raise ApiError(400, f"paths[{i}] must be a string, got {p!r:.40}", f"paths[{i}]")
        try:
            paths.append(normalise_site_path(p, site.ignored_params))
        except BadRequest as exc:
            raise ApiError(400, f"paths[{i}] {p[:80]!r}: {exc}", f"paths[{i}]") from None
    results, counts = await queue(context(request), site, paths, priority, force)
    log.info(
        "api queue site=%s paths=%d priority=%d force=%s %s",
        site.name,
        len(paths),
        priority,
        force,
        " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
    )
    return JSONResponse(
        {
            "site": site.name,
            "priority": priority,
            "force": force,
            "counts": counts,
            "results": results,
        }
    )


@operation(
    "one path",
    params=[SITE, PATH],
    responses={"200": "Path", "400": "a bad path", **AUTH_ERRORS, **NOT_FOUND},
)
async def get_path(request: Request) -> Response:
    site, path = await site_and_path(request)
    store = context(request).store
    record = await store.get_path(site.name, path)
    if record is None:
        raise ApiError(404, f"no path {path!r} in site {site.name!r}", "path")
    profiles = await store.own_profiles(site.name, [path])
    return JSONResponse(record_json(record, profiles.get(path, ())))


@operation(
    "remove the path and its snapshot",
    params=[SITE, PATH],
    responses={
        "200": '{"deleted": path}',
        "400": "a bad path",
        **AUTH_ERRORS,
        **NOT_FOUND,
    },
)
async def delete_path(request: Request) -> Response:
    site, path = await site_and_path(request)
    if not await context(request).store.delete_path(site.name, path):
        raise ApiError(404, f"no path {path!r} in site {site.name!r}", "path")
    log.info("api delete site=%s path=%s", site.name, path)
    return JSONResponse({"site": site.name, "deleted": path})


@operation(
    "the stored snapshot HTML served for a device profile (its own status in "
    "X-Snapshotd-Status, the profile it was rendered as in X-Snapshotd-Profile)",
    params=[
        SITE,
        PATH,
        param(
            "profile", "query", "mobile or desktop; default: the path's own snapshot",
            {"type": "string", "enum": list(PROFILE_NAMES)},
        ),
    ],
    responses={"200": "HTML", "400": "a bad path or profile", **AUTH_ERRORS, **NOT_FOUND},
    content="text/html",
)
async def get_snapshot(request: Request) -> Response:
    site, path = await site_and_path(request)
    profile = request.query_params.get("profile")
    if profile is not None and profile not in PROFILE_NAMES:
        raise ApiError(400, f"profile must be one of {', '.join(PROFILE_NAMES)}", "profile")
    snapshot = await context(request).store.get_snapshot(site.name, path, profile)
    if snapshot is None:
        raise ApiError(404, f"no snapshot of {path!r} in site {site.name!r}", "path")
    if snapshot.unrendered:
        raise ApiError(
            404, f"{path!r} of site {site.name!r} is not rendered as {profile} yet: it is when "
            f"a crawler of that profile first asks for it", "profile",
        )
    headers = {
        # Opened directly in a browser, the page must not run or reach our origin.
        "Content-Security-Policy": "sandbox",
        "X-Content-Type-Options": "nosniff",
        "X-Snapshotd-Status": str(snapshot.status),
        "X-Snapshotd-Profile": snapshot.profile,
        "X-Snapshotd-Captured-At": iso_time(snapshot.captured_at) or "",
        "ETag": snapshot.etag,
        "Vary": "Accept-Encoding",
    }
    if accepts_gzip(request.headers.get("accept-encoding", "")):
        headers["Content-Encoding"] = "gzip"
        body = snapshot.body_gz
    else:
        body = gzip.decompress(snapshot.body_gz)
    return Response(body, 200, headers=headers, media_type="text/html; charset=utf-8")

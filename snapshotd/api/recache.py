"""prerender.io's recache API: ``POST /_snapshotd/recache`` with ``{"prerenderToken": ...,
"url": "https://..."}`` or ``"urls": [...]``, an alias of recapturing paths
(``POST .../sites/{site}/paths`` with ``force``), for the tools that call prerender.io's.

Invariants:
- the token is checked here, as prerender.io takes it: ``prerenderToken`` in the body, or
  ``X-Prerender-Token`` or Bearer, against the API's tokens in constant time (the token
  check in front of the API lets this path through);
- every URL must name a configured site's page (400 naming ``url`` or ``urls[i]``); the
  whole body is checked before anything is queued, and each site's paths are queued as
  the recapture API queues them (priority 2, ``force``);
- ``adaptiveType`` (prerender.io's ``mobile`` or ``desktop``, its default) recaptures the
  path either way: a recapture renders again every device profile the site serves that page
  in (:mod:`snapshotd.capture.profiles`), the phones' snapshot with the desktop one.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.auth import token_from, token_matches
from snapshotd.api.inputs import parse_json_object, read_body
from snapshotd.api.openapi import operation
from snapshotd.api.paths import MAX_PATHS_PER_CALL, queue
from snapshotd.api.render import page_named
from snapshotd.api.shared import ApiError, context
from snapshotd.config.settings import SiteSettings
from snapshotd.store.interface import PRIORITY_API

log = logging.getLogger("snapshotd.api")

FIELDS = {"prerenderToken", "url", "urls", "adaptiveType"}
# prerender.io's device of a recache; a recapture renders every profile the site serves.
ADAPTIVE_TYPES = ("mobile", "desktop")


def _authorize(request: Request, data: dict[str, Any]) -> None:
    ctx = context(request)
    tokens = ctx.settings.api_tokens or ((ctx.generated_token,) if ctx.generated_token else ())
    given = token_from(request.scope, prerender=True) or data.get("prerenderToken")
    if not isinstance(given, str) or not given or not token_matches(given, tokens):
        raise ApiError(
            401, "a valid token is required (prerenderToken, X-Prerender-Token or Bearer)",
            "prerenderToken",
        )


@operation(
    "prerender.io-compatible recache: queue the pages of `url` or `urls` (absolute URLs of "
    "configured sites, at most 10,000) for recapture, as POST .../paths with force does",
    body={
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "prerenderToken": {"type": "string"},
                        "url": {"type": "string"},
                        "urls": {"type": "array", "items": {"type": "string"},
                                 "maxItems": MAX_PATHS_PER_CALL},
                        "adaptiveType": {"type": "string", "enum": list(ADAPTIVE_TYPES)},
                    },
                }
            }
        }
    },
    responses={
        "200": '{"sites": {name: {"counts": {...}, "results": [...]}}}',
        "400": "a bad field (named)",
        "401": "no token, or a wrong one",
        "413": "a body over 10 MiB",
    },
    security=[],
)
async def recache(request: Request) -> Response:
    data = parse_json_object(await read_body(request))
    _authorize(request, data)
    unknown = set(data) - FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(400, f"unknown field {name!r}: expected url or urls", name)
    if data.get("adaptiveType", "desktop") not in ADAPTIVE_TYPES:
        raise ApiError(400, "adaptiveType: expected mobile or desktop", "adaptiveType")
    if ("url" in data) == ("urls" in data):
        raise ApiError(400, "give url (one URL) or urls (a list of URLs)", "url")
    if "url" in data:
        named: list[tuple[str, Any]] = [("url", data["url"])]
    else:
        urls = data["urls"]
        if not isinstance(urls, list) or not urls:
            raise ApiError(400, "urls must be a non-empty list of URLs", "urls")
        if len(urls) > MAX_PATHS_PER_CALL:
            raise ApiError(400, f"urls holds {len(urls)}; at most {MAX_PATHS_PER_CALL}", "urls")
        named = [(f"urls[{i}]", u) for i, u in enumerate(urls)]
    ctx = context(request)
    by_site: dict[str, tuple[SiteSettings, list[str]]] = {}
    for field, url in named:
        if not isinstance(url, str) or not url:
            raise ApiError(400, f"{field} must be an absolute URL", field)
        try:
            site, _parts, path = page_named(ctx, url)
        except ApiError as exc:
            raise ApiError(400, f"{field}: {exc}", field) from None
        by_site.setdefault(site.name, (site, []))[1].append(path)
    out = {}
    for name, (site, paths) in by_site.items():
        results, counts = await queue(ctx, site, paths, PRIORITY_API, True)
        log.info(
            "api recache site=%s paths=%d %s", name, len(paths),
            " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
        )
        out[name] = {"counts": counts, "results": results}
    return JSONResponse({"sites": out})

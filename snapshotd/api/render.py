"""The Prerender-compatible render endpoint: ``/_snapshotd/render/<absolute URL>`` or
``/_snapshotd/render?url=<absolute URL>``, answered as the proxy answers a bot asking for
that URL.

Invariants:
- only a URL on the host of a configured site is answered (403 otherwise), so the endpoint
  never makes the server fetch an address of a client's choosing;
- the client's token and Host are not passed on: the request goes on as one for the named
  URL, with that URL's host;
- the endpoint is an ASGI app rather than a request handler: the proxy needs the raw call;
- the device profile served is Rendertron's way: ``mobile`` in the query of the ``?url=``
  form (any value, or none) asks for ``mobile``; otherwise the caller's user agent decides,
  as for a bot asking the proxy (a middleware passes on the bot's).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlsplit

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from snapshotd.api.inputs import URL_SAFE, no_dot_segments
from snapshotd.api.openapi import operation, param
from snapshotd.api.shared import PREFIX, ApiError, context, send_error
from snapshotd.crawlers.bots import is_static_asset
from snapshotd.http_text.urls import BadRequest, hashbang, site_path_from_request
from snapshotd.proxy.handler import header_map

if TYPE_CHECKING:
    from snapshotd.config.settings import SiteSettings
    from snapshotd.services import Services

log = logging.getLogger("snapshotd.api")


_FRONT_ESCAPED = re.compile(r"%3[Ff]|%25[0-9A-Fa-f]{2}")


def _reescape(url: str, encoding: str) -> str:
    """``url`` with what a browser would have percent-encoded (non-ASCII, spaces) encoded."""
    return url if url.isascii() and " " not in url else quote(url, URL_SAFE, encoding)


def render_profile(scope: Scope) -> str | None:
    """``mobile`` when the ``?url=`` form asks for it (Rendertron's ``mobile`` parameter),
    else None: the caller's user agent decides."""
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    marker = PREFIX + "/render"
    rest = raw_path.split("?", 1)[0]
    rest = rest[rest.find(marker) + len(marker) :] if marker in rest else ""
    if rest.strip("/"):
        return None  # the path form: the query is the target URL's own
    query = scope.get("query_string", b"").decode("latin-1")
    names = {k for k, _ in parse_qsl(query, keep_blank_values=True)}
    return "mobile" if "mobile" in names else None


def render_target(scope: Scope, endpoint: str = "render") -> str:
    """The absolute URL a render (or screenshot) request names: after ``/render/`` (raw,
    query included), or in ``?url=``."""
    query = scope.get("query_string", b"").decode("latin-1")
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    raw_path = raw_path.split("?", 1)[0]  # some servers leave the query on raw_path
    marker = f"{PREFIX}/{endpoint}"
    rest = raw_path[raw_path.find(marker) + len(marker) :] if marker in raw_path else ""
    if not rest.strip("/"):
        values = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "url"]
        if not values or not values[0]:
            raise ApiError(
                400,
                f"url is required: {marker}/<absolute URL> or {marker}?url=<absolute URL>",
                "url",
            )
        return _reescape(values[0], "utf-8")
    target = rest[1:]
    if target[:8].lower() in ("http%3a%", "https%3a"):
        target = _reescape(unquote(target), "utf-8")  # a middleware that encoded the whole URL
    elif not query and "?" not in target and _FRONT_ESCAPED.search(target):
        # A front server that escaped the URL it was given whole, query and all (nginx's
        # ``rewrite .* /$scheme://$host$request_uri? break``: '?' as %3F, '%' as %25).
        target = _reescape(unquote(target, "latin-1"), "latin-1")
    else:
        # Raw bytes of the request line, read as latin-1: the same bytes, escaped.
        target = _reescape(target, "latin-1")
        if query:
            target += "?" + query
    lower = target[:8].lower()
    # A proxy in front may have merged the '//' after the scheme.
    if lower.startswith("http:/") and not lower.startswith("http://"):
        target = "http://" + target[6:]
    elif lower.startswith("https:/") and not lower.startswith("https://"):
        target = "https://" + target[7:]
    return target


class RenderEndpoint:
    """An ASGI app rather than a request handler: the proxy needs the raw ASGI call."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await render_endpoint(context(Request(scope)), scope, receive, send)


def page_named(ctx: Services, target: str) -> tuple[SiteSettings, SplitResult, str]:
    """The configured site an absolute URL belongs to, the URL's parts and its site path;
    ApiError (400 naming ``url``, or 403 for a host no site serves) otherwise."""
    try:
        parts = urlsplit(target)
        hostname = parts.hostname
    except ValueError as exc:
        raise ApiError(400, f"url is not a URL ({exc}): {target[:200]!r}", "url") from None
    if parts.scheme.lower() not in ("http", "https") or not hostname:
        raise ApiError(400, f"url must be an absolute http(s) URL, got {target[:200]!r}", "url")
    site = ctx.sites.site_for_url(target)
    if site is None:
        log.info("render refused host=%s: no configured site", parts.netloc[:200])
        raise ApiError(403, f"{parts.hostname!r} is not the host of a configured site", "url")
    raw_path = parts.path or "/"
    try:
        path, _escaped = site_path_from_request(
            raw_path, parts.query, site.ignored_params, hashbang(parts.fragment)
        )
        no_dot_segments(raw_path)
    except BadRequest as exc:
        raise ApiError(exc.status, f"url: {exc}", "url") from None
    return site, parts, path


async def render_endpoint(ctx: Services, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer a Prerender-style request as the proxy answers a bot asking for that URL."""
    try:
        site, parts, path = page_named(ctx, render_target(scope))
    except ApiError as exc:
        await send_error(send, exc.status, str(exc), exc.field)
        return
    raw_path = parts.path or "/"
    dropped = {b"authorization", b"x-prerender-token", b"host", b"content-length"}
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in dropped]
    headers.append((b"host", parts.netloc.encode("latin-1")))
    target_scope = {
        **scope,
        "path": unquote(raw_path),
        "raw_path": raw_path.encode("latin-1"),
        "query_string": parts.query.encode("latin-1"),
        "root_path": "",
        "headers": headers,
    }
    by_name = header_map(headers)
    assert ctx.proxy is not None and ctx.upstream is not None  # serve builds both
    if "x-snapshotd" in by_name or is_static_asset(raw_path):
        ctx.metrics.request("PASS")
        await ctx.upstream.forward(site.origin, target_scope, receive, send)
        return
    await ctx.proxy.snapshot_request(
        ctx.sites.view_of(site), path, by_name, target_scope, receive, send,
        profile=render_profile(scope),
    )


def _endpoint(summary: str, where: str, bad_url: str) -> RenderEndpoint:
    """The endpoint for a route naming the URL ``where`` (``path`` or ``query``)."""
    return operation(
        summary,
        params=[param("url", where, "absolute http(s) URL", {"type": "string"}, required=True)],
        responses={
            "200": "the snapshot (or the origin's page, BYPASS)",
            "400": bad_url,
            "401": "no token, or a wrong one",
            "403": "the host is not a configured site's",
        },
        content="text/html",
        security=[{"bearer": []}, {"prerenderToken": []}],
    )(RenderEndpoint())


render_in_path = _endpoint(
    "Prerender-compatible: the absolute URL of a configured site's page "
    "(slashes and query included), answered as a bot request for it",
    "path",
    "not an http(s) URL",
)
render_in_query = _endpoint(
    "Prerender-compatible, the URL as a query parameter",
    "query",
    "no url, or not an http(s) URL",
)

"""Everything under ``/_snapshotd/`` (SPEC section 7): the JSON API, the Prerender-compatible
render endpoint, health, metrics and the web console.

Invariants:
- every route but ``healthz`` and the console's static files passes :class:`Guard` first, so
  nothing about the store (not even which sites exist) is told to a client without a valid
  token, whatever address it comes from; with no token configured, the one token is the one
  drawn at start (``Context.generated_token``);
- a write validates its whole input before it touches the store, and a batch is one
  ``enqueue_many`` transaction: a request is applied entirely or not at all;
- request bodies are bounded while they are read, not after.
"""

from __future__ import annotations

import gzip
import hmac
import json
import logging
import re
import time
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.admission import StoreFacts, admit, decide
from snapshotd.bots import is_static_asset
from snapshotd.config import SiteSettings
from snapshotd.proxy import accepts_gzip
from snapshotd.sitemaps import MAX_SITEMAP_URLS, SitemapError, parse_sitemap
from snapshotd.store.base import PRIORITY_API, STATES, PathRecord
from snapshotd.urls import (
    KEEP_ALL,
    BadRequest,
    IgnoredParams,
    site_path_from_request,
    site_path_from_url,
)

if TYPE_CHECKING:
    from snapshotd.app import Context

__all__ = ["MAX_BODY", "MAX_PATHS_PER_CALL", "MAX_SITEMAP_URLS", "create_api", "openapi"]

log = logging.getLogger("snapshotd.api")

PREFIX = "/_snapshotd"
API = PREFIX + "/api/v1"
MAX_BODY = 10 * 1024 * 1024
MAX_PATHS_PER_CALL = 10_000
SITEMAP_CHUNK = 2_000
MAX_PAGE = 1000
DEFAULT_PAGE = 50
RATE_WINDOW = 60.0

# Paths that hold no data: reachable without a token.
OPEN_PATHS = frozenset({PREFIX + "/healthz", PREFIX + "/console"})
CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; "
    "style-src 'self' 'unsafe-inline' http: https:; img-src 'self' data: http: https:; "
    "font-src 'self' data: http: https:; frame-src 'self' about:; form-action 'self'; "
    "frame-ancestors 'none'"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Left as they are when escaping a URL or path as a browser would.
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


class ApiError(Exception):
    """A client error: answered as ``{"error": message, "field": field}`` with ``status``."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


def _error_response(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if field:
        body["field"] = field
    headers = {"WWW-Authenticate": 'Bearer realm="snapshotd"'} if status == 401 else None
    return JSONResponse(body, status, headers=headers)


async def _send_error(send: Send, status: int, message: str, field: str | None = None) -> None:
    response = _error_response(status, message, field)
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


# ---------------------------------------------------------------------------- auth


def _token_from(scope: Scope, *, prerender: bool) -> str | None:
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


class Guard:
    """ASGI middleware: a Bearer token for all but the open paths; the render endpoint also
    takes ``X-Prerender-Token``. With no tokens, every request to a guarded path is refused."""

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        self.app = app
        self.tokens = tuple(t for t in tokens if t)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or (
            path.startswith(PREFIX + "/console/")
            and path.removeprefix(PREFIX + "/console/") in CONSOLE_FILES
        ):
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope, prerender=path.startswith(PREFIX + "/render"))
        if refusal is not None:
            status, message = refusal
            log.info(
                "refused path=%s client=%s status=%d",
                path[:200],
                (scope.get("client") or ("-",))[0],
                status,
            )
            await _send_error(send, status, message)
            return
        if _CONTROL.search(path):
            # Routing would not see them (a regex '$' matches before a final newline).
            await _send_error(send, 400, "the path holds control characters", "path")
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope, *, prerender: bool) -> tuple[int, str] | None:
        token = _token_from(scope, prerender=prerender)
        if token is None:
            return 401, "a token is required: send 'Authorization: Bearer <token>'"
        if not token_matches(token, self.tokens):
            return 401, "the token was not accepted"
        return None


# ---------------------------------------------------------------------------- input


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not _is_number(declared.strip()):
            raise ApiError(400, "Content-Length is not a number", "Content-Length")
        if int(declared) > limit:
            raise ApiError(413, f"the body is larger than {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "the client went away before the body ended", "body") from None
    return b"".join(chunks)


def parse_json_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise ApiError(400, "the body is empty: send a JSON object", "body")
    try:
        value = json.loads(body)
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8 JSON", "body") from None
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            "body",
        ) from None
    except RecursionError:
        raise ApiError(400, "the body is nested too deeply", "body") from None
    except ValueError as exc:  # a number past the interpreter's digit limit
        raise ApiError(400, f"the body is not usable JSON: {exc}"[:200], "body") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object", "body")
    return value


def _is_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also holds for '²' or '١', which ``int`` refuses."""
    return text.isascii() and text.isdigit()


def _check_priority(value: Any, field: str = "priority") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
        raise ApiError(400, f"{field} must be an integer from 0 to 3, got {value!r:.40}", field)
    return value


def _check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, f"{field} must be true or false, got {value!r:.40}", field)
    return value


def _query_flag(raw: str | None, field: str) -> bool:
    if raw is None:
        return False
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("", "0", "false", "no", "off"):
        return False
    raise ApiError(400, f"{field} must be true or false, got {raw!r:.40}", field)


def _no_dot_segments(path: str) -> None:
    for segment in path.split("/"):
        if unquote(segment) in (".", ".."):
            raise BadRequest("'.' and '..' segments are not allowed")


def normalise_site_path(value: str, ignore: IgnoredParams) -> str:
    """A site path given by a client (``/a?b#!c``), checked as a request target would be,
    without the query parameters ``ignore`` names.

    A plain ``#fragment`` is dropped, as browsers never send it. Raises :class:`BadRequest`.
    """
    if not value.startswith("/"):
        raise BadRequest("must start with '/'")
    if _CONTROL.search(value):
        raise BadRequest("holds control characters")
    try:
        # Non-ASCII characters are escaped, as in the request a browser makes for the path.
        value = _NON_ASCII.sub(lambda m: quote(m.group(), safe=""), value)
    except UnicodeEncodeError:
        raise BadRequest("holds a lone surrogate, which is not text") from None
    rest, _hash, fragment = value.partition("#")  # the fragment starts at the first '#'
    bang = fragment.startswith("!")
    fragment = fragment[1:]
    raw_path, _, query = rest.partition("?")
    _no_dot_segments(raw_path)
    path, _escaped = site_path_from_request(raw_path, query, ignore)
    if bang:
        path = path.split("#!", 1)[0] + "#!" + fragment
    return path


def site_path_from_param(param: str) -> str:
    """The site path named by ``{path}`` (already percent-decoded once by the server).

    Characters a browser would have percent-encoded (non-ASCII, spaces, quotes) are encoded
    again, so ``/paths/caf%C3%A9`` and ``/paths/caf%25C3%25A9`` both name ``/caf%C3%A9``.
    No parameter is ignored: ``{path}`` names a stored path as it is.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in param):
        raise ApiError(400, "path holds control characters", "path")
    encoded = quote(param, safe=_URL_SAFE)
    try:
        return normalise_site_path("/" + encoded, KEEP_ALL)
    except BadRequest as exc:
        raise ApiError(400, f"path: {exc}", "path") from None


def api_param(path: str) -> str:
    """The inverse of :func:`site_path_from_param`: a site path as a ``{path}`` segment."""
    return quote(path[1:], safe="/")


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def record_json(r: PathRecord) -> dict[str, Any]:
    return {
        "site": r.site,
        "path": r.path,
        "ref": api_param(r.path),
        "state": r.state,
        "priority": r.priority,
        "status": r.status,
        "hops": r.hops,
        "attempts": r.attempts,
        "created_at": _iso(r.created_at),
        "queued_at": _iso(r.queued_at),
        "captured_at": _iso(r.captured_at),
        "expires_at": _iso(r.expires_at),
        "error": r.error,
        "duplicate_of": r.duplicate_of,
    }


# ---------------------------------------------------------------------------- sitemaps


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


# ---------------------------------------------------------------------------- OpenAPI


def _op(
    summary: str,
    *,
    params: Sequence[dict[str, Any]] = (),
    body: dict[str, Any] | None = None,
    responses: dict[str, str],
    content: str = "application/json",
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": list(params),
        "responses": {
            code: {
                "description": text,
                **({"content": {content: {}}} if code.startswith("2") else {}),
            }
            for code, text in responses.items()
        },
    }
    if body is not None:
        op["requestBody"] = body
    return op


def _param(
    name: str, where: str, description: str, schema: dict[str, Any], required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "description": description,
        "required": required or where == "path",
        "schema": schema,
    }


def openapi() -> dict[str, Any]:
    """The OpenAPI 3 description of every route :func:`create_api` serves."""
    site = _param("site", "path", "a site's name", {"type": "string"})
    path = _param(
        "path",
        "path",
        "the site path without its leading '/', its query percent-encoded into it "
        "(item/7, search%3Fq%3Dshoes); empty for '/'",
        {"type": "string"},
    )
    auth_errors = {"401": "no token, or a wrong one"}
    not_found = {"404": "no such site, path or snapshot"}
    record = {
        "type": "object",
        "properties": {
            k: {"type": t}
            for k, t in {
                "site": "string",
                "path": "string",
                "ref": "string",
                "state": "string",
                "priority": "integer",
                "status": "integer",
                "hops": "integer",
                "attempts": "integer",
                "created_at": "string",
                "queued_at": "string",
                "captured_at": "string",
                "expires_at": "string",
                "error": "string",
                "duplicate_of": "string",
            }.items()
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "snapshotd API",
            "version": "1",
            "description": "Drive snapshotd: queue, inspect and delete paths and snapshots. "
            "Send 'Authorization: Bearer <token>' (one of server.api_tokens, or with none "
            "configured the one in the console URL logged at start). Errors are "
            '{"error": message, "field": name}.',
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "prerenderToken": {"type": "apiKey", "in": "header", "name": "X-Prerender-Token"},
            },
            "schemas": {"Path": record},
        },
        "security": [{"bearer": []}],
        "paths": {
            f"{PREFIX}/healthz": {
                "get": {
                    **_op(
                        "whether the store answers",
                        responses={"200": '{"status": "ok"}', "503": "the store is down"},
                    ),
                    "security": [],
                }
            },
            f"{PREFIX}/metrics": {
                "get": _op(
                    "Prometheus metrics: requests by cache result, captures by outcome, queue "
                    "depth by priority, render seconds, paths by state",
                    responses={"200": "text exposition format", **auth_errors},
                    content="text/plain",
                )
            },
            f"{PREFIX}/api/openapi.json": {
                "get": _op("this document", responses={"200": "OpenAPI 3", **auth_errors})
            },
            f"{API}/sites": {
                "get": _op(
                    "sites with counts per state, queue depth by priority, captures by outcome "
                    "and the capture rate of this process (per minute)",
                    responses={"200": '{"sites": [...]}', **auth_errors},
                )
            },
            f"{API}/sites/{{site}}/paths": {
                "get": _op(
                    "one page of paths, newest first",
                    params=[
                        site,
                        _param(
                            "state", "query", "one state", {"type": "string", "enum": list(STATES)}
                        ),
                        _param("prefix", "query", "paths starting with this", {"type": "string"}),
                        _param(
                            "limit",
                            "query",
                            f"page size, 1-{MAX_PAGE}",
                            {"type": "integer", "default": DEFAULT_PAGE},
                        ),
                        _param(
                            "cursor", "query", "next_cursor of the page before", {"type": "string"}
                        ),
                    ],
                    responses={
                        "200": '{"paths": [Path], "next_cursor": string|null}',
                        "400": "a bad parameter (named)",
                        **auth_errors,
                        **not_found,
                    },
                ),
                "post": _op(
                    f"set paths pending (at most {MAX_PATHS_PER_CALL} per call, all or none); "
                    "answers per path: queued, requeued, reprioritised, pending, processing, "
                    "fresh (captured and not expired: use force), ignored, redirect or status "
                    "(by the site's rewrite rules)",
                    params=[site],
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
                        "413": "body over 10 MiB",
                        **auth_errors,
                        **not_found,
                    },
                ),
            },
            f"{API}/sites/{{site}}/paths/{{path}}": {
                "get": _op(
                    "one path",
                    params=[site, path],
                    responses={"200": "Path", "400": "a bad path", **auth_errors, **not_found},
                ),
                "delete": _op(
                    "remove the path and its snapshot",
                    params=[site, path],
                    responses={
                        "200": '{"deleted": path}',
                        "400": "a bad path",
                        **auth_errors,
                        **not_found,
                    },
                ),
            },
            f"{API}/sites/{{site}}/snapshot/{{path}}": {
                "get": _op(
                    "the stored snapshot HTML (its own status in X-Snapshotd-Status)",
                    params=[site, path],
                    responses={"200": "HTML", "400": "a bad path", **auth_errors, **not_found},
                    content="text/html",
                )
            },
            f"{API}/sites/{{site}}/sitemap": {
                "post": _op(
                    f"queue the URLs of a sitemap (XML, gzip allowed, at most "
                    f"{MAX_SITEMAP_URLS} URLs) at priority 2 unless ?priority= says otherwise",
                    params=[
                        site,
                        _param(
                            "priority", "query", "0-3", {"type": "integer", "default": PRIORITY_API}
                        ),
                        _param(
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
                        "413": "body over 10 MiB",
                        **auth_errors,
                        **not_found,
                    },
                )
            },
            f"{PREFIX}/render/{{url}}": {
                "get": {
                    **_op(
                        "Prerender-compatible: the absolute URL of a configured site's page "
                        "(slashes and query included), answered as a bot request for it",
                        params=[_param("url", "path", "absolute http(s) URL", {"type": "string"})],
                        responses={
                            "200": "the snapshot (or the origin's page, BYPASS)",
                            "400": "not an http(s) URL",
                            "401": "no token, or a wrong one",
                            "403": "the host is not a configured site's",
                        },
                        content="text/html",
                    ),
                    "security": [{"bearer": []}, {"prerenderToken": []}],
                }
            },
            f"{PREFIX}/render": {
                "get": {
                    **_op(
                        "Prerender-compatible, the URL as a query parameter",
                        params=[
                            _param(
                                "url",
                                "query",
                                "absolute http(s) URL",
                                {"type": "string"},
                                required=True,
                            )
                        ],
                        responses={
                            "200": "the snapshot (or the origin's page, BYPASS)",
                            "400": "no url, or not an http(s) URL",
                            "401": "no token, or a wrong one",
                            "403": "the host is not a configured site's",
                        },
                        content="text/html",
                    ),
                    "security": [{"bearer": []}, {"prerenderToken": []}],
                }
            },
            f"{PREFIX}/console": {
                "get": {
                    **_op(
                        "the web console (holds no data; asks for a token)",
                        responses={"200": "HTML"},
                        content="text/html",
                    ),
                    "security": [],
                }
            },
            f"{PREFIX}/console/{{file}}": {
                "get": {
                    **_op(
                        "the console's script and style sheet",
                        params=[
                            _param(
                                "file",
                                "path",
                                "a console file",
                                {"type": "string", "enum": ["console.js", "console.css"]},
                            )
                        ],
                        responses={"200": "JavaScript or CSS", "404": "no such file"},
                        content="text/plain",
                    ),
                    "security": [],
                }
            },
        },
    }


# ---------------------------------------------------------------------------- the app


def create_api(ctx: Context) -> ASGIApp:
    settings = ctx.settings
    rate_samples: deque[tuple[float, float]] = deque()
    console_files = {
        name: resources.files("snapshotd").joinpath("console", name).read_bytes()
        for name in CONSOLE_FILES
    }
    openapi_doc = openapi()

    def site_or_404(name: str) -> SiteSettings:
        site = settings.site(name)
        if site is None:
            raise ApiError(404, f"no site is named {name!r}", "site")
        return site

    def capture_rate() -> tuple[dict[str, int], float | None]:
        """Captures by outcome, and per minute over the last minute of samples."""
        by_outcome = ctx.metrics.captures_by_outcome()
        total = float(sum(by_outcome.values()))
        now = time.monotonic()
        rate_samples.append((now, total))
        while len(rate_samples) > 2 and rate_samples[1][0] <= now - RATE_WINDOW:
            rate_samples.popleft()
        t0, n0 = rate_samples[0]
        rate = (total - n0) / (now - t0) * 60 if now - t0 >= 1.0 else None
        return by_outcome, rate

    async def queue(
        site: SiteSettings,
        paths: Sequence[str],
        priority: int,
        force: bool,
        *,
        chunk: int | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Rules first (no writes), then one transaction for every path that is queued, or
        one per ``chunk`` paths, so a long list does not hold the store's writer for long."""
        rules = ctx.rules.get(site.name)
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

    # ------------------------------------------------------------------ handlers

    async def healthz(request: Request) -> Response:
        ok = await ctx.store.ping()
        return JSONResponse({"status": "ok" if ok else "unavailable"}, 200 if ok else 503)

    async def metrics(request: Request) -> Response:
        for prio, n in (await ctx.store.queue_depth()).items():
            ctx.metrics.queue_depth.labels(str(prio)).set(n)
        counts = await ctx.store.counts()
        for s in settings.sites:
            for state in STATES:
                ctx.metrics.paths.labels(s.name, state).set(counts.get(s.name, {}).get(state, 0))
        return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(openapi_doc)

    async def sites(request: Request) -> Response:
        counts = await ctx.store.counts()
        depth = await ctx.store.queue_depth()
        by_outcome, rate = capture_rate()
        out = []
        for s in settings.sites:
            c = {state: counts.get(s.name, {}).get(state, 0) for state in STATES}
            out.append(
                {
                    "name": s.name,
                    "origin": s.origin,
                    "hosts": list(s.hosts),
                    "counts": c,
                    "total": sum(c.values()),
                }
            )
        return JSONResponse(
            {
                "sites": out,
                "queue_depth": {str(k): v for k, v in sorted(depth.items())},
                "captures": by_outcome,
                "capture_rate": None if rate is None else round(rate, 2),
            }
        )

    async def list_paths(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
        q = request.query_params
        unknown = set(q) - {"state", "prefix", "limit", "cursor"}
        if unknown:
            name = sorted(unknown)[0]
            raise ApiError(400, f"unknown parameter {name!r}", name)
        state = q.get("state") or None
        if state is not None and state not in STATES:
            raise ApiError(400, f"state must be one of {', '.join(STATES)}", "state")
        prefix = q.get("prefix") or None
        if prefix is not None and not prefix.startswith("/"):
            raise ApiError(400, "prefix must start with '/'", "prefix")
        raw_limit = q.get("limit", str(DEFAULT_PAGE))
        if not _is_number(raw_limit) or not 1 <= int(raw_limit) <= MAX_PAGE:
            raise ApiError(400, f"limit must be an integer from 1 to {MAX_PAGE}", "limit")
        raw_cursor = q.get("cursor") or None
        if raw_cursor is not None and not (_is_number(raw_cursor) and len(raw_cursor) < 19):
            raise ApiError(400, "cursor must be a next_cursor this API gave", "cursor")
        records, next_cursor = await ctx.store.list_paths(
            site.name,
            state=state,
            prefix=prefix,
            limit=int(raw_limit),
            cursor=int(raw_cursor) if raw_cursor else None,
        )
        return JSONResponse(
            {
                "site": site.name,
                "paths": [record_json(r) for r in records],
                "next_cursor": None if next_cursor is None else str(next_cursor),
            }
        )

    async def post_paths(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
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
        priority = _check_priority(data.get("priority", PRIORITY_API))
        force = _check_bool(data.get("force", False), "force")
        paths = []
        for i, p in enumerate(raw):
            if not isinstance(p, str):
                raise ApiError(400, f"paths[{i}] must be a string, got {p!r:.40}", f"paths[{i}]")
            try:
                paths.append(normalise_site_path(p, site.ignored_params))
            except BadRequest as exc:
                raise ApiError(400, f"paths[{i}] {p[:80]!r}: {exc}", f"paths[{i}]") from None
        results, counts = await queue(site, paths, priority, force)
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

    async def get_path(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
        path = site_path_from_param(request.path_params["path"])
        record = await ctx.store.get_path(site.name, path)
        if record is None:
            raise ApiError(404, f"no path {path!r} in site {site.name!r}", "path")
        return JSONResponse(record_json(record))

    async def delete_path(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
        path = site_path_from_param(request.path_params["path"])
        if not await ctx.store.delete_path(site.name, path):
            raise ApiError(404, f"no path {path!r} in site {site.name!r}", "path")
        log.info("api delete site=%s path=%s", site.name, path)
        return JSONResponse({"site": site.name, "deleted": path})

    async def get_snapshot(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
        path = site_path_from_param(request.path_params["path"])
        snapshot = await ctx.store.get_snapshot(site.name, path)
        if snapshot is None:
            raise ApiError(404, f"no snapshot of {path!r} in site {site.name!r}", "path")
        headers = {
            # Opened directly in a browser, the page must not run or reach our origin.
            "Content-Security-Policy": "sandbox",
            "X-Content-Type-Options": "nosniff",
            "X-Snapshotd-Status": str(snapshot.status),
            "X-Snapshotd-Captured-At": _iso(snapshot.captured_at) or "",
            "ETag": snapshot.etag,
            "Vary": "Accept-Encoding",
        }
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            headers["Content-Encoding"] = "gzip"
            body = snapshot.body_gz
        else:
            body = gzip.decompress(snapshot.body_gz)
        return Response(body, 200, headers=headers, media_type="text/html; charset=utf-8")

    async def post_sitemap(request: Request) -> Response:
        site = site_or_404(request.path_params["site"])
        q = request.query_params
        unknown = set(q) - {"priority", "force"}
        if unknown:
            name = sorted(unknown)[0]
            raise ApiError(400, f"unknown parameter {name!r}", name)
        raw_priority = q.get("priority", str(PRIORITY_API))
        if not _is_number(raw_priority):
            raise ApiError(400, "priority must be an integer from 0 to 3", "priority")
        priority = _check_priority(int(raw_priority))
        force = _query_flag(q.get("force"), "force")
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
                elif _site_for_netloc(ctx, parts.netloc) is not site:
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
        results, counts = await queue(site, paths, priority, force, chunk=SITEMAP_CHUNK)
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

    async def console(request: Request) -> Response:
        name = request.path_params.get("file") or "index.html"
        if name not in console_files:
            raise ApiError(404, "no such console file")
        return Response(
            console_files[name],
            media_type=CONSOLE_FILES[name],
            headers={
                "Content-Security-Policy": CONSOLE_CSP,
                "X-Frame-Options": "DENY",
                "Referrer-Policy": "no-referrer",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-cache",
            },
        )

    render = RenderEndpoint(ctx)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error_response(exc.status, str(exc), exc.field)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return _error_response(404, f"no such endpoint: {request.url.path[:200]}")
        if exc.status_code == 405:
            return _error_response(405, f"{request.method} is not allowed here")
        return _error_response(exc.status_code, str(exc.detail))

    site_param = "/sites/{site}"
    app = Starlette(
        routes=[
            Route(f"{PREFIX}/healthz", healthz),
            Route(f"{PREFIX}/metrics", metrics),
            Route(f"{PREFIX}/api/openapi.json", openapi_json),
            Route(f"{API}/sites", sites),
            Route(f"{API}{site_param}/paths", list_paths, methods=["GET"]),
            Route(f"{API}{site_param}/paths", post_paths, methods=["POST"]),
            Route(f"{API}{site_param}/paths/{{path:path}}", get_path, methods=["GET"]),
            Route(f"{API}{site_param}/paths/{{path:path}}", delete_path, methods=["DELETE"]),
            Route(f"{API}{site_param}/snapshot/{{path:path}}", get_snapshot),
            Route(f"{API}{site_param}/sitemap", post_sitemap, methods=["POST"]),
            Route(f"{PREFIX}/render", render, methods=["GET", "HEAD"]),
            Route(f"{PREFIX}/render/{{url:path}}", render, methods=["GET", "HEAD"]),
            Route(f"{PREFIX}/console", console),
            Route(f"{PREFIX}/console/{{file}}", console),
        ],
        exception_handlers={ApiError: api_error, HTTPException: http_error},
    )
    app.router.redirect_slashes = False
    tokens = settings.api_tokens or ((ctx.generated_token,) if ctx.generated_token else ())
    return Guard(app, tokens)


# ---------------------------------------------------------------------------- render


def _site_for_netloc(ctx: Context, netloc: str) -> SiteSettings | None:
    """The site a URL's host belongs to: ``host:port`` first, then the bare host name."""
    netloc = netloc.lower().rsplit("@", 1)[-1]
    site = ctx.settings.site_for_url_host(netloc)
    if site is None and not netloc.startswith("["):
        site = ctx.settings.site_for_url_host(netloc.rsplit(":", 1)[0])
    return site


def _reescape(url: str, encoding: str) -> str:
    """``url`` with what a browser would have percent-encoded (non-ASCII, spaces) encoded."""
    return url if url.isascii() and " " not in url else quote(url, _URL_SAFE, encoding)


def render_target(scope: Scope) -> str:
    """The absolute URL a render request names: after ``/render/`` (raw, query included) or
    in ``?url=``."""
    query = scope.get("query_string", b"").decode("latin-1")
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    raw_path = raw_path.split("?", 1)[0]  # some servers leave the query on raw_path
    marker = PREFIX + "/render"
    rest = raw_path[raw_path.find(marker) + len(marker) :] if marker in raw_path else ""
    if not rest.strip("/"):
        values = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "url"]
        if not values or not values[0]:
            raise ApiError(
                400,
                "url is required: /_snapshotd/render/<absolute URL> or "
                "/_snapshotd/render?url=<absolute URL>",
                "url",
            )
        return _reescape(values[0], "utf-8")
    target = rest[1:]
    if target[:8].lower() in ("http%3a%", "https%3a"):
        target = _reescape(unquote(target), "utf-8")  # a middleware that encoded the whole URL
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

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await render_endpoint(self.ctx, scope, receive, send)


async def render_endpoint(ctx: Context, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer a Prerender-style request as the proxy answers a bot asking for that URL."""
    try:
        target = render_target(scope)
    except ApiError as exc:
        await _send_error(send, exc.status, str(exc), exc.field)
        return
    try:
        parts = urlsplit(target)
        hostname = parts.hostname
    except ValueError as exc:
        await _send_error(send, 400, f"url is not a URL ({exc}): {target[:200]!r}", "url")
        return
    if parts.scheme.lower() not in ("http", "https") or not hostname:
        await _send_error(
            send, 400, f"url must be an absolute http(s) URL, got {target[:200]!r}", "url"
        )
        return
    site = _site_for_netloc(ctx, parts.netloc)
    if site is None:
        log.info("render refused host=%s: no configured site", parts.netloc[:200])
        await _send_error(
            send, 403, f"{parts.hostname!r} is not the host of a configured site", "url"
        )
        return
    raw_path = parts.path or "/"
    try:
        path, _escaped = site_path_from_request(raw_path, parts.query, site.ignored_params)
        _no_dot_segments(raw_path)
    except BadRequest as exc:
        await _send_error(send, exc.status, f"url: {exc}", "url")
        return
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
    header_map = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
    assert ctx.proxy is not None
    if "x-snapshotd" in header_map or is_static_asset(raw_path):
        ctx.metrics.requests.labels("PASS").inc()
        await ctx.upstream.forward(site.origin, target_scope, receive, send)
        return
    await ctx.proxy.snapshot_request(
        site, path, parts.netloc, header_map, target_scope, receive, send
    )

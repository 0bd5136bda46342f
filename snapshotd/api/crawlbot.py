"""A Crawlbot-compatible endpoint (SPEC 7.2): a crawl job is a site, its name the job's name,
so scripts written for Diffbot's Crawlbot work with the host changed.

``/_snapshotd/v3/crawl`` takes its arguments from the query, a form or a JSON body (GET and
POST alike, as Crawlbot does), the token as a ``token`` argument or a Bearer header; it
checks the token itself, since it may be in the body. What becomes of each argument is one
rule (:mod:`snapshotd.api.crawlbot_args`): carried out, done otherwise and said in the answer's
``warnings``, or refused by name with 400; never ignored.
"""

from __future__ import annotations

import csv
import hashlib
import io
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.auth import token_from, token_matches
from snapshotd.api.crawlbot_args import (
    CONTROLS,
    DATA_ARGUMENTS,
    DOWNLOAD_TOKEN,
    allows_download,
    api_tokens,
    check_arguments,
    warnings_for,
)
from snapshotd.api.inputs import is_number, parse_json_object, read_body, record_json
from snapshotd.api.openapi import AUTH_ERRORS, operation
from snapshotd.api.shared import ApiError, context
from snapshotd.api.sites import job_json, new_round, rules_refused, site_from_body
from snapshotd.config.loading import site_to_mapping
from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.job_json import V3
from snapshotd.http_text.urls import split_site_path
from snapshotd.pages.flat_tree import composed
from snapshotd.rewrite import RulesError
from snapshotd.sites.param_learner import without_each_param

__all__ = ["V3", "crawl", "crawl_data", "crawl_download"]


def _yes(value: Any) -> bool:
    return value not in ("0", "false", False, 0)


def _days(value: Any) -> float:
    """Crawlbot's days: -1 (its default) and 0 are none."""
    return max(float(value), 0.0)


# Crawlbot argument -> site setting, and how its text is read.
SETTINGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "maxHops": ("max_hops", int),
    "maxToCrawl": ("max_pages", int),
    "maxToProcess": ("max_to_process", int),
    "obeyRobots": ("obey_robots", _yes),
    "useCanonical": ("use_canonical", _yes),
    "crawlDelay": ("crawl_delay", float),
    "urlCrawlPattern": ("url_crawl_pattern", str),
    "urlCrawlRegEx": ("url_crawl_regex", str),
    "urlProcessPattern": ("url_process_pattern", str),
    "urlProcessRegEx": ("url_process_regex", str),
    "pageProcessPattern": ("page_process_pattern", str),
    "repeat": ("repeat", _days),
    "seedRecrawlFrequency": ("seed_recrawl_frequency", _days),
    "onlyProcessIfNew": ("only_process_if_new", _yes),
    "maxRounds": ("max_rounds", lambda v: max(int(v), 0)),
    "notifyWebhook": ("notify_webhook", str),
    "notifyEmail": ("notify_email", str),
    "apiUrl": ("api_url", str),
}
# Crawlbot's bound on the jobs of one token, and its answer past it: a new job is refused while
# this many exist (snapshotd's sites, every one a job).
MAX_JOBS = 1000
TOO_MANY_JOBS = {"errorCode": 505, "error": "Too many collections for token"}
# Crawlbot's own default of a new job's maxToProcess (a site's setting is -1: no limit).
MAX_TO_PROCESS = 100_000
# A job is one host: a per-subdomain maximum is a maximum of the job (the lower one wins).
PER_SUBDOMAIN = {
    "maxToCrawlPerSubdomain": "max_pages",
    "maxToProcessPerSubdomain": "max_to_process",
}


async def _arguments(request: Request) -> dict[str, Any]:
    """Query, then form or JSON body, arguments (the body's win). ``customHeaders``, which
    Crawlbot takes once per header, is a list of every one given."""
    args: dict[str, Any] = dict(request.query_params)
    headers: list[Any] = request.query_params.getlist("customHeaders")
    if request.method == "POST":
        body = await read_body(request)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json" and body.strip():
            parsed = parse_json_object(body)
            args.update(parsed)
            given = parsed.get("customHeaders", [])
            headers += [given] if isinstance(given, str) else given
        elif body.strip():
            try:
                pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
            except UnicodeDecodeError:
                raise ApiError(400, "the body is not UTF-8 form data", "body") from None
            args.update(pairs)
            headers += [v for k, v in pairs if k == "customHeaders"]
    if "customHeaders" in args:
        args["customHeaders"] = headers
    return args


def _authorize(request: Request, args: dict[str, Any], *, download: bool = False) -> None:
    """The API token (argument or Bearer); for the data endpoint, a job's download token
    (:func:`~snapshotd.api.crawlbot_args.download_token`) opens that job's data too."""
    tokens = api_tokens(context(request))
    if download and DOWNLOAD_TOKEN in args:
        if allows_download(tokens, str(args.get("name")), args[DOWNLOAD_TOKEN], time.time()):
            return
        raise ApiError(401, f"{DOWNLOAD_TOKEN}: not this job's, or expired", DOWNLOAD_TOKEN)
    given = token_from(request.scope, prerender=False) or args.get("token")
    if not isinstance(given, str) or not given or not token_matches(given, tokens):
        raise ApiError(401, "a valid token is required (token argument or Bearer)", "token")


def _flag(args: dict[str, Any], name: str) -> bool | None:
    value = args.get(name)
    if value is None:
        return None
    if str(value) not in ("0", "1"):
        raise ApiError(400, f"{name} must be 0 or 1", name)
    return str(value) == "1"


def _read(arg: str, value: Any, read: Callable[[Any], Any]) -> Any:
    """A Crawlbot argument as ``read`` reads it; 400 naming it when it cannot be, and for
    text other than ASCII given where no text is kept (``int`` reads '١٢' as 12)."""
    try:
        if read is not str and isinstance(value, str) and not value.isascii():
            raise ValueError(value)
        return read(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf, 1e400
        raise ApiError(400, f"{arg}: cannot read {value!r:.60}", arg) from None


def _site_for(ctx: Any, name: str, args: dict[str, Any]) -> SiteSettings | None:
    """The job's site as the arguments change it; None when they change nothing."""
    site = ctx.sites.site(name)
    changes: dict[str, Any] = {}
    if "seeds" in args:
        seeds = str(args["seeds"]).split()
        if not seeds:
            raise ApiError(400, "seeds: give at least one URL", "seeds")
        first = urlsplit(seeds[0])
        origin = site.origin if site else f"{first.scheme}://{first.netloc}"
        paths = []
        for seed in seeds:
            parts = urlsplit(seed)
            if f"{parts.scheme}://{parts.netloc}" != origin:
                raise ApiError(400, f"seeds: {seed} is not on the job's origin {origin}", "seeds")
            paths.append((parts.path or "/") + ("?" + parts.query if parts.query else ""))
        changes.update(origin=origin, seeds=paths)
    for arg, (key, read) in SETTINGS.items():
        if arg in args:
            changes[key] = _read(arg, args[arg], read)
    if "customHeaders" in args:
        given = args["customHeaders"]
        if not isinstance(given, list) or not all(isinstance(h, str) for h in given):
            raise ApiError(400, "customHeaders: give each header as Name:value", "customHeaders")
        changes["custom_headers"] = [h for h in given if h.strip()]
    for arg, key in PER_SUBDOMAIN.items():
        if arg in args:
            limit = _read(arg, args[arg], int)
            if limit >= 0:
                current = changes.get(key, getattr(site, key) if site else -1)
                changes[key] = limit if current < 0 else min(current, limit)
    if not changes:
        return None
    if site is None and "origin" not in changes:
        raise ApiError(400, "seeds: a new job needs its seeds", "seeds")
    if site is None:
        changes.setdefault("max_to_process", MAX_TO_PROCESS)
    base = site_to_mapping(site) if site else {}
    try:
        return site_from_body(name, {**base, **changes}, ctx)
    except ApiError as exc:  # a setting is named by the argument that gave it
        named = {key: arg for arg, (key, _) in SETTINGS.items() if arg in args}
        named |= {key: arg for arg, key in PER_SUBDOMAIN.items() if arg in args}
        named |= {"origin": "seeds", "seeds": "seeds", "custom_headers": "customHeaders",
                  "site": "name"}
        field = named.get(exc.field or "", exc.field)
        message = str(exc).replace(f"site.{exc.field}", str(field), 1)
        raise ApiError(exc.status, message, field) from None


@operation(
    "Crawlbot-compatible crawl jobs (SPEC 7.2): with name and seeds (and Crawlbot's settings) "
    "create or change a job, with pause, restart, delete or roundStart control it; answers "
    '{"jobs": [...]} with Crawlbot\'s fields. Arguments in the query, a form or JSON',
    responses={"200": '{"jobs": [...]}', "400": "a bad or unsupported argument", **AUTH_ERRORS},
)
async def crawl(request: Request) -> Response:
    args = await _arguments(request)
    _authorize(request, args)
    check_arguments(args, CONTROLS | set(SETTINGS) | set(PER_SUBDOMAIN))
    if "restrictDomain" in args and not _yes(args["restrictDomain"]):
        raise ApiError(
            400, "restrictDomain: a snapshotd job serves the pages of its seeds' host, so it "
            "crawls that host only (restrictDomain=1)", "restrictDomain"
        )
    ctx = context(request)
    if args.get("notifyEmail") and not ctx.settings.smtp:
        raise ApiError(
            400, "notifyEmail: no SMTP server is configured ([server] smtp)", "notifyEmail"
        )
    if args.get("name") is None:
        if request.method == "POST":
            raise ApiError(400, "name: give the job's name", "name")
        return JSONResponse({"jobs": [await job_json(request, s) for s in ctx.sites.sites]})
    name = str(args["name"])
    site = _site_for(ctx, name, args)
    if site is not None and ctx.sites.site(name) is None and len(ctx.sites.sites) >= MAX_JOBS:
        return JSONResponse({**TOO_MANY_JOBS, "field": "name"}, status_code=400)
    response = "Successfully added urls for spidering." if site else ""
    if site is not None:
        try:
            await ctx.sites.put(site)
        except RulesError as exc:
            raise rules_refused(exc, site) from None
    if ctx.sites.site(name) is None:
        raise ApiError(404, f"no job is named {name!r}", "name")
    if _flag(args, "delete"):
        await ctx.sites.delete(name)
        return JSONResponse({"response": "Successfully deleted job."})
    if _flag(args, "restart"):
        await ctx.sites.restart(name)
        response = "Successfully restarted job."
    if (pause := _flag(args, "pause")) is not None:
        await ctx.sites.set_paused(name, pause)
        response = "Successfully paused job." if pause else "Successfully resumed job."
    if _flag(args, "roundStart"):
        n = await new_round(ctx, name)
        response = f"Successfully started a new round: {n} pages queued again."
    job = await job_json(request, ctx.sites.site(name))  # type: ignore[arg-type]
    answer: dict[str, Any] = {"response": response} if response else {}
    if warnings := warnings_for(args):
        answer["warnings"] = warnings
    return JSONResponse({**answer, "jobs": [job]})


@operation(
    "a job's processed pages (format=json|csv: url, path, status, capture time, title, "
    "canonical; html=1 adds the HTML), or with type=urls its URL report (CSV unless "
    "format=json); num=N: the N most recently captured. The job's downloadJson and "
    "downloadUrls carry a download token that opens them alone, for a day",
    responses={"200": "JSON or CSV", "400": "a bad argument", **AUTH_ERRORS},
)
async def crawl_data(request: Request) -> Response:
    args = await _arguments(request)
    _authorize(request, args, download=True)
    check_arguments(args, DATA_ARGUMENTS | {DOWNLOAD_TOKEN})
    return await _data(context(request), args)


# Crawlbot's download files: ``<token>-<job name>_data.json`` and ``_urls.csv``.
# Diffbot's Python client also asks for ``_data.csv``: the pages as CSV.
DOWNLOADS = {
    "_data.json": {"format": "json"},
    "_data.csv": {"format": "csv"},
    "_urls.csv": {"type": "urls", "format": "csv"},
}


@operation(
    "Crawlbot's download path: /v3/crawl/download/<token>-<name>_data.json (the job's pages, "
    "as crawl/data with format=json), _data.csv (the same as CSV) or <token>-<name>_urls.csv "
    "(its URL report)",
    responses={"200": "JSON or CSV", "404": "no such file or job", **AUTH_ERRORS},
)
async def crawl_download(request: Request) -> Response:
    file = str(request.path_params["download"])
    kind = next((k for k in DOWNLOADS if file.endswith(k)), None)
    if kind is None:
        raise ApiError(404, "a download is <token>-<name>_data.json or _urls.csv", "download")
    stem = file.removesuffix(kind)
    tokens = api_tokens(context(request))
    # A token and a job name may both hold "-": the token is the prefix that is one.
    found = False
    name = ""
    for at in [i for i, c in enumerate(stem) if c == "-"]:
        if token_matches(stem[:at], tokens) and not found:
            found, name = True, stem[at + 1 :]
    if not found or not name:
        raise ApiError(401, "the file's name must start with a valid token", "token")
    return await _data(context(request), {"name": name, **DOWNLOADS[kind]})


async def _data(ctx: Any, args: dict[str, Any]) -> Response:
    """A job's data as ``args`` ask for it (the caller authorized it)."""
    if not args.get("name"):
        raise ApiError(400, "name: give the job's name", "name")
    site = ctx.sites.site(str(args["name"]))
    if site is None:
        raise ApiError(404, f"no job is named {args.get('name')!r}", "name")
    # Crawlbot's URL report is CSV unless asked otherwise; its pages are JSON.
    fmt = str(args.get("format", "csv" if args.get("type") == "urls" else "json"))
    if fmt not in ("json", "csv"):
        raise ApiError(400, "format must be json or csv", "format")
    num = args.get("num")
    if num is not None and not is_number(str(num)):
        raise ApiError(400, "num must be a whole number", "num")
    records = [r async for r in ctx.store.iter_paths(site.name)]
    if args.get("type") != "urls":
        # Crawlbot's objects: a copy of another page is not listed (the URL report has it).
        records = [r for r in records if r.state == "processed" and not r.duplicate_of]
    if num is not None:
        records = sorted(records, key=lambda r: r.captured_at or 0, reverse=True)[: int(num)]
    if args.get("type") == "urls":
        profiles = await ctx.store.own_profiles(site.name, [r.path for r in records])
        rows = [{"url": site.url_for(r.path), **record_json(r, profiles.get(r.path, ())),
                 "ignored_params": " ".join(_learned(site, r.path))} for r in records]
    else:
        rows = [await _page(ctx, site, r, str(args.get("html")) == "1") for r in records]
    if fmt == "json":
        return JSONResponse(rows)
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8")


def _learned(site: SiteSettings, path: str) -> list[str]:
    """The parameters of ``path`` that its site now ignores (learned, pinned or set)."""
    page = split_site_path(path)[0]
    return [name for name, _ in without_each_param(path) if site.ignored_params(name, page)]


async def _page(ctx: Any, site: SiteSettings, record: Any, html: bool) -> dict[str, Any]:
    snapshot = await ctx.store.get_snapshot(site.name, record.path)
    text = snapshot.html if snapshot is not None else ""
    tree = composed(text)  # a canonical in a shadow root is the crawler's too (pages/links)
    title = tree.css_first("title")
    canonical = tree.css_first('link[rel="canonical"]')
    row = {
        # Crawlbot's id of an object: the same for the same content, whatever its URL.
        "diffbotUri": "page|1|" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32],
        "pageUrl": site.url_for(record.path),
        "path": record.path,
        "status": record.status,
        "captured_at": record_json(record)["captured_at"],
        "title": title.text(strip=True) if title else "",
        "canonical": (canonical.attributes.get("href") or "") if canonical else "",
    }
    if html:
        row["html"] = text
    return row

"""Sites as runtime objects (SPEC 7): create, read, replace, pause, resume, restart and remove
a site. A change is stored first and seen by this process at once, by every other process
within a second (:mod:`snapshotd.sites.registry`).

A site's rules come in the request (``rules_text``) or from a file of ``[server] rules_dir``;
the file a site already has (the config file's) is kept as it is. What is wrong with a file
is answered by its line alone, never with what the server's file holds.
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.crawlbot_args import api_tokens, download_token
from snapshotd.api.crawlbot_port import crawlbot_root
from snapshotd.api.inputs import parse_json_object, read_body
from snapshotd.api.openapi import AUTH_ERRORS, NOT_FOUND, SITE, operation
from snapshotd.api.paths import site_or_404
from snapshotd.api.shared import ApiError, context
from snapshotd.api.soft_404s import not_found_answer
from snapshotd.config.loading import site_from_mapping, site_to_mapping
from snapshotd.config.settings import SITE_NAME, Settings, SiteSettings
from snapshotd.config.values import ConfigError, check_type
from snapshotd.crawl.job_json import PROGRESS, describe_job
from snapshotd.crawl.rounds import start_round
from snapshotd.net.fetch import check_hop
from snapshotd.rewrite import RulesError, rules_file_in
from snapshotd.store.interface import STATES, iso_time
from snapshotd.store.job_state import job_state

_FIELD = re.compile(r"^site\.(\w+)")
_SETTINGS_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "the keys of a [[site]] table of the config file (SPEC 2); "
                "'origin' is required, every other key has its default",
            }
        }
    },
}


def site_from_body(name: str, raw: dict[str, Any], ctx: Any) -> SiteSettings:
    """The site a request body describes, checked as the config file is (400 naming the key);
    a rules file it names is one of ``[server] rules_dir``, or the one the site has."""
    if raw.get("name", name) != name:
        raise ApiError(400, f"the body names the site {raw['name']!r}, the URL {name!r}", "name")
    if not re.fullmatch(SITE_NAME, name):
        raise ApiError(400, f"site name {name!r} may hold only letters, digits, . _ -", "site")
    current = ctx.sites.site(name)
    try:
        rules = raw.get("rules")
        if isinstance(rules, str) and rules and rules != (current.rules if current else None):
            raw = {**raw, "rules": _rules_file(check_type("site.rules", rules, "str"),
                                               ctx.settings.rules_dir)}
        site = site_from_mapping({**raw, "name": name}, "site")
    except ConfigError as exc:
        field = _FIELD.match(str(exc))
        raise ApiError(400, str(exc), field.group(1) if field else "body") from None
    # Refused now rather than when it is called, when nothing could be told any more.
    if site.notify_webhook:
        _check_callable(site, current, "notify_webhook", "notify_private", ctx.settings)
    if site.indexnow_key:
        _check_callable(site, current, "indexnow_endpoint", "indexnow_private", ctx.settings)
    return site


def _check_callable(
    site: SiteSettings, current: SiteSettings | None, key: str, private: str, settings: Settings
) -> None:
    """400 for a new URL at ``key`` the address policy will never let be called (``private``:
    the server setting that lets the operator's own addresses in)."""
    url = getattr(site, key)
    if current is not None and url == getattr(current, key):
        return
    parts = urlsplit(url)
    allowed = getattr(settings, private)
    if reason := check_hop(url, f"{parts.scheme}://{parts.netloc}" if allowed else ""):
        raise ApiError(
            400, f"{key}: the address policy will never let it be called: {reason}"
            + ("" if allowed else
               f" ([server] {private} = true lets private and loopback addresses in)"),
            key,
        )


def _rules_file(name: str, rules_dir: str) -> str:
    if not rules_dir:
        raise ApiError(400, "rules: this server takes no rules file through the API ([server] "
                       "rules_dir is not set): send the rules themselves as rules_text", "rules")
    try:
        return rules_file_in(rules_dir, name)
    except RulesError as exc:
        raise ApiError(400, f"rules: {exc.reason}", "rules") from None


def rules_refused(exc: RulesError, site: SiteSettings) -> ApiError:
    """Broken rules as the API answers them: rules sent as text with what is wrong, a file
    by its line alone."""
    if site.rules_text:
        return ApiError(400, str(exc), "rules_text")
    if exc.line == 0:  # it could not be read, as the reason says
        return ApiError(400, f"rules: {exc.reason}", "rules")
    return ApiError(400, f"rules: line {exc.line} is not a rule snapshotd reads "
                    "('snapshotd rules check' on the server says why)", "rules")


async def job_json(request: Request, site: SiteSettings) -> dict[str, Any]:
    """The site's crawl job as Crawlbot describes it, counted up to now."""
    ctx = context(request)
    return await describe_job(
        ctx.store, site, paused=ctx.sites.is_paused(site.name),
        created=ctx.sites.created.get(site.name, 0.0),
        v3_url=str(request.base_url).rstrip("/") + crawlbot_root(request.scope) + "/v3",
        minutes=ctx.metrics.minutes,
        download=download_token(api_tokens(ctx), site.name, time.time()),
    )


async def site_answer(request: Request) -> dict[str, Any]:
    """A site as the API shows it: its settings, whether paused, its counts per state, and
    its crawl job's status, counters and round (SPEC 7.2)."""
    ctx = context(request)
    site = site_or_404(request)
    counts = (await ctx.store.counts()).get(site.name, {})
    job = await job_json(request, site)
    return {
        "name": site.name,
        "paused": ctx.sites.is_paused(site.name),
        "created_at": iso_time(ctx.sites.created.get(site.name)),
        "counts": {state: counts.get(state, 0) for state in STATES},
        # What SEO4Ajax's integrations put before a path (docs/SEO4AJAX.md): not the API token.
        "site_token": ctx.sites.token_of(site.name),
        "job": {key: job[key] for key in PROGRESS},
        # What this process told IndexNow of the site (SPEC 5.5).
        "indexnow": ctx.capture.indexnow.report(site.name),
        # Its not-found view and the paths that show it (SPEC 5.6).
        "not_found": await not_found_answer(ctx, site),
        "settings": site_to_mapping(site),
    }


@operation(
    "a site: its settings, whether it is paused, and its paths per state",
    params=[SITE],
    responses={"200": "Site", **AUTH_ERRORS, **NOT_FOUND},
)
async def get_site(request: Request) -> Response:
    return JSONResponse(await site_answer(request))


@operation(
    "create the site, or replace its settings (a key left out takes its default); "
    "every process serves and crawls it within a second",
    params=[SITE],
    body=_SETTINGS_BODY,
    responses={
        "200": "Site (replaced)",
        "201": "Site (created)",
        "400": "a bad setting, named in 'field'",
        **AUTH_ERRORS,
    },
)
async def put_site(request: Request) -> Response:
    ctx = context(request)
    name = request.path_params["site"]
    site = site_from_body(name, parse_json_object(await read_body(request)), ctx)
    existed = ctx.sites.site(name) is not None
    try:
        await ctx.sites.put(site)
    except RulesError as exc:
        raise rules_refused(exc, site) from None
    return JSONResponse(await site_answer(request), 200 if existed else 201)


@operation(
    "remove the site with all its paths, snapshots and counters",
    params=[SITE],
    responses={"200": '{"deleted": name, "paths": n}', **AUTH_ERRORS, **NOT_FOUND},
)
async def delete_site(request: Request) -> Response:
    ctx = context(request)
    name = site_or_404(request).name
    return JSONResponse({"deleted": name, "paths": await ctx.sites.delete(name)})


@operation(
    "give the site a new site token (the SEO4Ajax-compatible face's, docs/SEO4AJAX.md): "
    "the old one is refused from then on, by every process within a second",
    params=[SITE],
    responses={"200": '{"site": name, "site_token": token}', **AUTH_ERRORS, **NOT_FOUND},
)
async def rotate_site_token(request: Request) -> Response:
    name = site_or_404(request).name
    token = await context(request).sites.rotate_token(name)
    if token is None:  # removed meanwhile
        raise ApiError(404, f"no site named {name!r}", "site")
    return JSONResponse({"site": name, "site_token": token})


@operation(
    "pause the site's crawl: no new capture starts for it (bots still get its snapshots)",
    params=[SITE],
    responses={"200": '{"site": name, "paused": true}', **AUTH_ERRORS, **NOT_FOUND},
)
async def pause_site(request: Request) -> Response:
    name = site_or_404(request).name
    await context(request).sites.set_paused(name, True)
    return JSONResponse({"site": name, "paused": True})


@operation(
    "resume the site's crawl",
    params=[SITE],
    responses={"200": '{"site": name, "paused": false}', **AUTH_ERRORS, **NOT_FOUND},
)
async def resume_site(request: Request) -> Response:
    name = site_or_404(request).name
    await context(request).sites.set_paused(name, False)
    return JSONResponse({"site": name, "paused": False})


@operation(
    "remove every path and snapshot of the site, keep its settings, crawl it again from "
    "its seeds",
    params=[SITE],
    responses={"200": '{"restarted": name, "paths": n}', **AUTH_ERRORS, **NOT_FOUND},
)
async def restart_site(request: Request) -> Response:
    name = site_or_404(request).name
    return JSONResponse({"restarted": name, "paths": await context(request).sites.restart(name)})


async def new_round(ctx: Any, name: str) -> int:
    """A new round of the site's job now (:func:`snapshotd.crawl.rounds.start_round`); how many
    pages were queued again."""
    state = await job_state(ctx.store, name, ctx.sites.created.get(name, 0.0))
    n = await start_round(ctx.store, ctx.sites.site(name), state)
    if n and ctx.crawler is not None:
        ctx.crawler.wake()
    return n


@operation(
    "start a new round of the site's crawl now: the seeds, the pages only crawled and the "
    "failed ones are rendered again, and with only_process_if_new off every page (SPEC 7.2)",
    params=[SITE],
    responses={"200": '{"site": name, "queued": n}', **AUTH_ERRORS, **NOT_FOUND},
)
async def round_site(request: Request) -> Response:
    name = site_or_404(request).name
    return JSONResponse({"site": name, "queued": await new_round(context(request), name)})

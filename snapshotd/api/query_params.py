"""A site's query parameters (SPEC 5.3): what snapshotd learned about each, and the
operator's word on it, which learning never changes."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.inputs import parse_json_object, read_body
from snapshotd.api.openapi import AUTH_ERRORS, NOT_FOUND, SITE, operation, param
from snapshotd.api.paths import site_or_404
from snapshotd.api.shared import ApiError, context

__all__ = ["delete_param", "get_params", "put_param"]

NAME = param("name", "path", "the query parameter's name", {"type": "string"})


async def params_answer(ctx: Any, site: str) -> dict[str, Any]:
    """Every parameter of the site with a decision or evidence: its state (``ignored``,
    ``kept`` or ``learning``), scope, whether pinned, and the pages of its evidence."""
    decided = {p.name: p for p in await ctx.store.list_params(site)}
    evidence = await ctx.store.param_evidence(site)
    out = []
    for name in sorted(set(decided) | set(evidence)):
        row = decided.get(name)
        pages = evidence.get(name, [])
        out.append({
            "name": name,
            "state": row.state if row else "learning",
            "scope": row.scope if row else None,
            "pinned": bool(row and row.pinned),
            "same": [p for p, same in pages if same],
            "differ": [p for p, same in pages if not same],
        })
    return {"site": site, "params": out}


@operation(
    "the site's query parameters: which it learned to ignore (a variant of a page is that "
    "page), which it keeps, which it is still learning, with the pages of the evidence",
    params=[SITE],
    responses={"200": '{"site": name, "params": [...]}', **AUTH_ERRORS, **NOT_FOUND},
)
async def get_params(request: Request) -> Response:
    site = site_or_404(request)
    return JSONResponse(await params_answer(context(request), site.name))


@operation(
    'pin a parameter: body {"state": "ignored" | "kept", "scope": "/docs/"} (scope: the '
    "path prefix it holds under, default /); learning leaves a pinned parameter alone",
    params=[SITE, NAME],
    body={"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
    responses={"200": '{"site": name, "params": [...]}', "400": "a bad body",
               **AUTH_ERRORS, **NOT_FOUND},
)
async def put_param(request: Request) -> Response:
    ctx = context(request)
    site = site_or_404(request)
    name = request.path_params["name"]
    body = parse_json_object(await read_body(request))
    state, scope = body.get("state"), body.get("scope", "/")
    if state not in ("ignored", "kept"):
        raise ApiError(400, "state must be ignored or kept", "state")
    if not isinstance(scope, str) or not scope.startswith("/"):
        raise ApiError(400, "scope must be a path prefix starting with /", "scope")
    if not name or "&" in name or "=" in name:
        raise ApiError(400, f"{name!r} is not a parameter name", "name")
    await ctx.store.put_param(site.name, name, state, scope, pinned=True)
    if state == "ignored":
        await ctx.capture.learner.drop_pending(site, name, scope)
    await ctx.sites.refresh()
    return JSONResponse(await params_answer(ctx, site.name))


@operation(
    "forget the decision and the evidence on a parameter: learning starts again",
    params=[SITE, NAME],
    responses={"200": '{"site": name, "params": [...]}', **AUTH_ERRORS, **NOT_FOUND},
)
async def delete_param(request: Request) -> Response:
    ctx = context(request)
    site = site_or_404(request)
    await ctx.store.delete_param(site.name, request.path_params["name"])
    await ctx.sites.refresh()
    return JSONResponse(await params_answer(ctx, site.name))

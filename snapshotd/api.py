"""The API under ``/_snapshotd/`` (SPEC section 7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from snapshotd.app import Context


def create_api(ctx: Context) -> Starlette:
    async def healthz(request: Request) -> Response:
        ok = await ctx.store.ping()
        return JSONResponse({"status": "ok" if ok else "unavailable"}, 200 if ok else 503)

    async def metrics(request: Request) -> Response:
        for prio, n in (await ctx.store.queue_depth()).items():
            ctx.metrics.queue_depth.labels(str(prio)).set(n)
        return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/_snapshotd/healthz", healthz),
            Route("/_snapshotd/metrics", metrics),
        ]
    )

"""The readiness probe, ``GET /_snapshotd/readyz``: whether this process can serve snapshots
now, that is whether the store answers and the browser pool can render a page.

Invariants:
- open, like ``healthz`` (probes send no token), and it tells no more than two words and
  a short reason per part;
- one probe at a time per process, its answer kept :data:`KEEP` seconds: however often it
  is asked, the browser renders at most one probe page per :data:`KEEP` seconds;
- a renderer without a probe (a test's) is taken at its word: only the store is asked.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.openapi import operation
from snapshotd.api.shared import context

KEEP = 5.0


class Readiness:
    def __init__(self) -> None:
        self._answer: tuple[float, dict[str, Any]] | None = None
        self._running: asyncio.Future[dict[str, Any]] | None = None

    async def check(self, request: Request) -> dict[str, Any]:
        if self._answer is not None and time.monotonic() - self._answer[0] < KEEP:
            return self._answer[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._probe(request))
        return await asyncio.shield(self._running)

    async def _probe(self, request: Request) -> dict[str, Any]:
        ctx = context(request)
        store = "ok" if await ctx.store.ping() else "unavailable"
        probe = getattr(ctx.renderer, "probe", None)
        why = await probe() if probe is not None else None
        answer = {
            "status": "ready" if store == "ok" and why is None else "not ready",
            "store": store,
            "browser": "ok" if why is None else why,
        }
        self._answer = (time.monotonic(), answer)
        return answer


@operation(
    "whether this process can serve snapshots now: the store answers and the browser pool "
    "renders a page (checked at most every 5 s)",
    responses={
        "200": '{"status": "ready", "store": "ok", "browser": "ok"}',
        "503": '{"status": "not ready", "store": ..., "browser": why}',
    },
    security=[],
)
async def readyz(request: Request) -> Response:
    answer = await request.app.state.readiness.check(request)
    return JSONResponse(answer, 200 if answer["status"] == "ready" else 503)

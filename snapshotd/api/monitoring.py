"""What the server tells about itself: health, Prometheus metrics, the sites with their
counts and this process's capture rate, and the per-minute counters behind the console's
charts.

Invariants:
- ``healthz`` is open and tells only whether the store answers (and, in a header, which
  worker process answered, when the ``worker_header`` setting says so);
- the capture rate is measured over the samples of the last minute, kept on the application's
  state (``rate_samples``), so two applications in one process do not mix their samples.
"""

from __future__ import annotations

import os
import time
from collections import deque

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapshotd.api.inputs import is_number, query
from snapshotd.api.openapi import AUTH_ERRORS, operation, param
from snapshotd.api.shared import ApiError, context
from snapshotd.observe.minute_counts import RENDER_BUCKETS
from snapshotd.proxy.handler import WORKER_HEADER
from snapshotd.store.interface import STATES

RATE_WINDOW = 60.0


def capture_rate(request: Request) -> tuple[dict[str, int], float | None]:
    """Captures by outcome, and per minute over the last minute of samples."""
    samples: deque[tuple[float, float]] = request.app.state.rate_samples
    by_outcome = context(request).metrics.captures_by_outcome()
    total = float(sum(by_outcome.values()))
    now = time.monotonic()
    samples.append((now, total))
    while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW:
        samples.popleft()
    t0, n0 = samples[0]
    rate = (total - n0) / (now - t0) * 60 if now - t0 >= 1.0 else None
    return by_outcome, rate


@operation(
    "whether the store answers",
    responses={"200": '{"status": "ok"}', "503": "the store is down"},
    security=[],
)
async def healthz(request: Request) -> Response:
    ctx = context(request)
    ok = await ctx.store.ping()
    return JSONResponse(
        {"status": "ok" if ok else "unavailable"},
        200 if ok else 503,
        headers={WORKER_HEADER: str(os.getpid())} if ctx.settings.worker_header else None,
    )


@operation(
    "Prometheus metrics: requests by cache result, captures by outcome, queue "
    "depth by priority, render seconds, paths by state",
    responses={"200": "text exposition format", **AUTH_ERRORS},
    content="text/plain",
)
async def metrics(request: Request) -> Response:
    ctx = context(request)
    for prio, n in (await ctx.store.queue_depth()).items():
        ctx.metrics.queue_depth.labels(str(prio)).set(n)
    counts = await ctx.store.counts()
    for s in ctx.sites.sites:
        for state in STATES:
            ctx.metrics.paths.labels(s.name, state).set(counts.get(s.name, {}).get(state, 0))
    return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")


@operation(
    "sites with counts per state, queue depth by priority, captures by outcome "
    "and the capture rate of this process (per minute)",
    responses={"200": '{"sites": [...]}', **AUTH_ERRORS},
)
async def sites(request: Request) -> Response:
    ctx = context(request)
    counts = await ctx.store.counts()
    depth = await ctx.store.queue_depth()
    by_outcome, rate = capture_rate(request)
    out = []
    for s in ctx.sites.sites:
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


MAX_MINUTES = 7 * 24 * 60


@operation(
    "counts per minute over the last `minutes` (1-10080, default 60), of every process: "
    "snapshot requests by result and by bot, captures by outcome, render times by bucket; "
    "and the most recent bot requests of every process, newest first",
    params=[
        param("minutes", "query", f"how far back, 1-{MAX_MINUTES}", {"type": "integer"}),
    ],
    responses={
        "200": '{"from": t, "to": t, "rows": [[t, site, name, value]], "recent": [...]}',
        "400": "a bad parameter (named)",
        **AUTH_ERRORS,
    },
)
async def stats(request: Request) -> Response:
    ctx = context(request)
    q = query(request, {"minutes"})
    raw = q.get("minutes", "60")
    if not is_number(raw) or not 1 <= int(raw) <= MAX_MINUTES:
        raise ApiError(400, f"minutes must be an integer from 1 to {MAX_MINUTES}", "minutes")
    minutes = ctx.metrics.minutes
    await minutes.flush(ctx.store)  # what this process counted, up to now
    now = int(minutes.clock() // 60)
    since = now - int(raw) + 1
    rows = await ctx.store.counters(since)
    return JSONResponse(
        {
            "from": since * 60,
            "to": now * 60,
            "render_buckets": [*(f"{b:g}" for b in RENDER_BUCKETS), "inf"],
            "rows": [[m * 60, site, name, value] for m, site, name, value in rows],
            "recent": await minutes.recent_requests(ctx.store),
        }
    )

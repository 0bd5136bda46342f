"""The readiness corpus's origin: its pages, their data, and the frameworks' own builds.

``create_app()`` is an ASGI app (Starlette) served on loopback by the tests and the bench:

- ``/c/<name>``: ``pages/<name>.html``;
- ``/apps/<framework>/...``: each app's shell for every path under it (history routes), and
  ``/apps/angular/<view>.html`` its views;
- ``/node_modules/...``: files of ``apps/node_modules`` (installed by the Makefile from the
  committed ``apps/package-lock.json``);
- data: ``/api/step/<n>`` (150 ms each), ``/api/items[/<n>]`` (50 ms), ``/api/late`` (500 ms),
  ``/api/job/<started ms>`` (done 1.2 s after ``started``), a long poll held for up to 60 s,
  a status answered at once, an endless event stream, and a WebSocket that stays open.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from examples.spa.app import ITEMS

HERE = Path(__file__).parent
PAGES = HERE / "pages"
SITE = HERE / "apps" / "site"
NODE_MODULES = HERE / "apps" / "node_modules"
WORDS = {1: "alpha", 2: "beta", 3: "gamma"}
_HTML = "text/html; charset=utf-8"


async def page(request: Request) -> Response:
    path = PAGES / f"{request.path_params['name']}.html"
    if not path.is_file():
        return HTMLResponse("no such page", 404)
    return FileResponse(path, media_type=_HTML)


async def app_shell(request: Request) -> Response:
    framework, rest = request.path_params["framework"], request.path_params["rest"]
    if framework == "angular" and rest.endswith(".html"):
        view = SITE / f"angular-{rest.removesuffix('.html')}.html"
        if view.is_file():
            return FileResponse(view, media_type=_HTML)
    shell = SITE / f"{framework}.html"
    if not shell.is_file():
        return HTMLResponse("no such app", 404)
    return FileResponse(shell, media_type=_HTML)


async def node_module(request: Request) -> Response:
    path = (NODE_MODULES / request.path_params["rest"]).resolve()
    if not path.is_relative_to(NODE_MODULES.resolve()) or not path.is_file():
        return Response("not found", 404)
    return FileResponse(path, media_type="text/javascript")


async def step(request: Request) -> Response:
    n = request.path_params["n"]
    await asyncio.sleep(0.15)
    return JSONResponse({"word": WORDS.get(n, "?"), "next": n + 1 if n + 1 in WORDS else None})


async def items(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return JSONResponse([{"id": i["id"], "name": i["name"]} for i in ITEMS])


async def item(request: Request) -> Response:
    await asyncio.sleep(0.05)
    n = request.path_params["n"]
    if not 1 <= n <= len(ITEMS):
        return JSONResponse({"error": "no such item"}, 404)
    return JSONResponse(ITEMS[n - 1])


async def late(request: Request) -> Response:
    await asyncio.sleep(0.5)
    return JSONResponse({"word": "delta"})


async def job(request: Request) -> Response:
    """Done once 1.2 s have passed since ``started`` (the page's ``Date.now()``)."""
    done = time.time() * 1000 - request.path_params["started"] >= 1200
    return JSONResponse({"done": done, "word": "epsilon" if done else None})


async def status(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def long_poll(request: Request) -> Response:
    for _ in range(120):  # answered after 60 s, or when the client goes away
        if await request.is_disconnected():
            break
        await asyncio.sleep(0.5)
    return JSONResponse({"news": None})


async def events(request: Request) -> Response:
    async def stream():  # type: ignore[no-untyped-def]
        yield "data: first news\n\n"
        while not await request.is_disconnected():
            await asyncio.sleep(0.5)
            yield ": still here\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def socket(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello over a socket")
    try:
        while True:
            await websocket.receive_text()
    except WebSocketDisconnect:
        pass


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/c/{name}", page),
            Route("/apps/{framework}/{rest:path}", app_shell),
            Route("/node_modules/{rest:path}", node_module),
            Route("/api/step/{n:int}", step),
            Route("/api/items", items),
            Route("/api/items/{n:int}", item),
            Route("/api/late", late),
            Route("/api/job/{started:int}", job),
            Route("/api/status", status),
            Route("/api/longpoll", long_poll),
            Route("/api/events", events),
            WebSocketRoute("/ws", socket),
        ]
    )

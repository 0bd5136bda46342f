"""The web-component corpus's origin (ASGI, Starlette), served on loopback:

- ``/<page>``: ``site/<page>.html``, with ``__IMPORTS__`` replaced by the import map that
  resolves the packages' bare specifiers (``lit``, ``tslib``) to ``/node_modules``;
- ``/node_modules/...``: files of ``node_modules`` (``npm ci`` of the committed lock);
- data: ``/api/product/<id>`` (a product of the Lit shop, 50 ms).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

HERE = Path(__file__).parent
SITE = HERE / "site"
NODE_MODULES = HERE / "node_modules"

_IMPORTS = {
    "lit": "/node_modules/lit/index.js",
    "lit/": "/node_modules/lit/",
    "lit-html": "/node_modules/lit-html/lit-html.js",
    "lit-html/": "/node_modules/lit-html/",
    "lit-element/": "/node_modules/lit-element/",
    "@lit/reactive-element": "/node_modules/@lit/reactive-element/reactive-element.js",
    "@lit/reactive-element/": "/node_modules/@lit/reactive-element/",
    "@material/web/": "/node_modules/@material/web/",
    "@microsoft/fast-element": "/node_modules/@microsoft/fast-element/dist/fast-element.js",
    "tslib": "/node_modules/tslib/tslib.es6.mjs",
}
IMPORT_MAP = '<script type="importmap">' + json.dumps({"imports": _IMPORTS}) + "</script>"

PRODUCTS = {
    "1": {
        "name": "Kettle K2",
        "text": "Boils a litre in ninety seconds and switches itself off when the water rolls. "
        "Its brushed steel body stays quiet, its handle stays cool, and its filter lifts out "
        "for rinsing under the tap after every use.",
        "specs": [["Capacity", "1.2 litres"], ["Power", "2200 watts"]],
    },
    "2": {
        "name": "Teapot T7",
        "text": "A cast iron pot that keeps six cups warm for an hour on the table. Its enamel "
        "lining never takes the taste of yesterday's leaves, and its infuser holds enough "
        "for a strong pot of breakfast tea or a light green one.",
        "specs": [["Capacity", "0.9 litres"], ["Weight", "1.6 kilograms"]],
    },
}


async def page(request: Request) -> Response:
    name = request.path_params["name"]
    path = SITE / f"{name}.html"
    if not name.replace("-", "").isalnum() or not path.is_file():
        return Response("not found", status_code=404)
    return HTMLResponse(path.read_text().replace("__IMPORTS__", IMPORT_MAP))


async def module_file(request: Request) -> Response:
    path = (NODE_MODULES / request.path_params["path"]).resolve()
    if not path.is_relative_to(NODE_MODULES.resolve()) or not path.is_file():
        return Response("not found", status_code=404)
    kind = "text/javascript" if path.suffix in (".js", ".mjs") else None
    return FileResponse(path, media_type=kind)


async def product(request: Request) -> Response:
    await asyncio.sleep(0.05)
    found = PRODUCTS.get(request.path_params["id"])
    return JSONResponse(found) if found else JSONResponse({"error": "none"}, status_code=404)


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/node_modules/{path:path}", module_file),
            Route("/api/product/{id}", product),
            Route("/{name}", page),
        ]
    )

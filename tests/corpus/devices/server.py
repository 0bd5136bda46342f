"""The device-profile corpus's origin (ASGI, Starlette), served on loopback:

- ``/<page>``: ``site/<page>.html``;
- ``/node_modules/...``: files of ``node_modules`` (``npm ci`` of the committed lock);
- ``/shim/<name>.mjs``: ``site/<name>-shim.mjs``, a UMD build's global (React's, prop-types')
  as the ES module react-intersection-observer and react-responsive import;
- ``/cjs/<package>``: a CommonJS package's main file as an ES module, its ``require`` of other
  packages answered by importing them the same way (matchmediaquery for react-responsive);
- data: ``/api/block/<name>`` (an HTML block, 80 ms), ``/api/products?page=&total=`` (12 a
  page, 50 ms), ``/api/product``, ``/api/news`` (50 ms each).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

HERE = Path(__file__).parent
SITE = HERE / "site"
NODE_MODULES = HERE / "node_modules"
PAGE_SIZE = 12

BLOCKS = {
    "related": "<h2>Related posts</h2><ul><li>Grinding coffee for cold mornings</li>"
    "<li>Why copper kettles tarnish</li><li>Tea caddies that keep leaves fresh</li></ul>",
    "comments": "<h2>Comments</h2><p>Marta wrote: we camp at three thousand metres and now "
    "steep our breakfast tea twice as long.</p><p>Olu wrote: the lid trick works wonders.</p>",
    "author": "<h2>About the author</h2><p>Inés Calder writes about kitchens, mountains and "
    "the physics of everyday cooking.</p>",
    "archive": "<h2>Newsletter archive</h2><p>Every issue since spring, sorted by season and "
    "by topic, searchable by ingredient.</p>",
}
_ADJECTIVES = ("sturdy", "compact", "quiet", "bright", "folding", "enamel", "steel", "oak")
_THINGS = ("kettle", "teapot", "grinder", "scale", "mug", "jar", "whisk", "tray")
PRODUCT = {
    "name": "Kettle K2",
    "short": "Boils a litre in ninety seconds and switches itself off.",
    "facts": ["1.2 litre", "2200 watt", "keeps warm for thirty minutes"],
    "faq": [
        ["Can it boil half a cup?", "Yes, the minimum fill line is a single cup."],
        ["Is the base cordless?", "It turns freely on its base, cordless while pouring."],
    ],
    "long": [
        "The K2 is our quietest kettle yet, with a brushed steel body and a soft-touch handle "
        "that stays cool while the water rolls.",
        "Its filter lifts out for rinsing, and its gauge reads in cups and in litres.",
    ],
    "specs": [["Capacity", "1.2 litres"], ["Power", "2200 watts"], ["Weight", "1.1 kilograms"]],
    "reviews": [
        "Finally a kettle that does not wake the whole house at six in the morning.",
        "Pours without dribbling, which is more than my last three managed.",
    ],
}
NEWS = [
    {"title": "Summer opening times", "body": "Late opening on Thursdays through August."},
    {"title": "Repair café", "body": "Bring a broken appliance on the first Saturday."},
]


def product(n: int) -> dict[str, object]:
    adjective, thing = _ADJECTIVES[n % 8], _THINGS[(n // 8) % 8]
    return {
        "id": n,
        "name": f"{adjective.title()} {thing} number {n}",
        "blurb": f"A {adjective} {thing} from batch {n * 7 % 100}.",
    }


async def page(request: Request) -> Response:
    path = SITE / f"{request.path_params['name']}.html"
    if not path.is_file():
        return HTMLResponse("no such page", 404)
    return FileResponse(path, media_type="text/html; charset=utf-8")


async def node_module(request: Request) -> Response:
    path = (NODE_MODULES / request.path_params["rest"]).resolve()
    if not path.is_relative_to(NODE_MODULES.resolve()) or not path.is_file():
        return Response("not found", 404)
    return FileResponse(path, media_type="text/javascript")


_SHIMS = {"react", "prop-types"}
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_REQUIRE = re.compile(r"""\brequire\(\s*['"]([a-z0-9][a-z0-9._-]*)['"]\s*\)""")


async def shim(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _SHIMS:
        return Response("not found", 404)
    return FileResponse(SITE / f"{name}-shim.mjs", media_type="text/javascript")


async def commonjs(request: Request) -> Response:
    name = request.path_params["name"]
    package = NODE_MODULES / name
    if not _PACKAGE.fullmatch(name) or not (package / "package.json").is_file():
        return Response("not found", 404)
    main = json.loads((package / "package.json").read_text()).get("main") or "index.js"
    path = (package / main).resolve()
    if path.suffix != ".js":
        path = path.with_suffix(path.suffix + ".js")
    if not path.is_relative_to(package.resolve()) or not path.is_file():
        return Response("not found", 404)
    source = path.read_text()
    needs = sorted(set(_REQUIRE.findall(source)))
    imports = "".join(f'import dep{i} from "/cjs/{n}";\n' for i, n in enumerate(needs))
    table = ", ".join(f"{json.dumps(n)}: dep{i}" for i, n in enumerate(needs))
    module = (
        f"{imports}const module = {{ exports: {{}} }};\n"
        f"const required = {{ {table} }};\n"
        "(function (module, exports, require) {\n"
        f"{source}\n"
        "})(module, module.exports, (name) => required[name]);\n"
        "export default module.exports;\n"
    )
    return Response(module, media_type="text/javascript")


async def block(request: Request) -> Response:
    await asyncio.sleep(0.08)
    html = BLOCKS.get(request.path_params["name"])
    return HTMLResponse(html or "", 200 if html else 404)


async def products(request: Request) -> Response:
    await asyncio.sleep(0.05)
    try:
        n = max(int(request.query_params.get("page", "0")), 0)
        total = min(max(int(request.query_params.get("total", "48")), 0), 5000)
    except ValueError:
        return JSONResponse({"error": "page and total are numbers"}, 400)
    first = n * PAGE_SIZE
    items = [product(i) for i in range(first, min(first + PAGE_SIZE, total))]
    return JSONResponse({"items": items, "more": first + PAGE_SIZE < total})


async def product_data(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return JSONResponse(PRODUCT)


async def news(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return JSONResponse(NEWS)


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/api/block/{name}", block),
            Route("/api/products", products),
            Route("/api/product", product_data),
            Route("/api/news", news),
            Route("/shim/{name}.mjs", shim),
            Route("/cjs/{name}", commonjs),
            Route("/node_modules/{rest:path}", node_module),
            Route("/{name}", page),
        ]
    )

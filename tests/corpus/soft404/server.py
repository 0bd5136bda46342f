"""The soft-404 corpus's origins (ASGI, Starlette): one shop app a server, each at the root of
its own origin, as a single-page app is deployed:

- ``/assets/<app>.<version>.js``: the app's code, ``site/<app>.js``, after what that build
  changes (``site/<app>.<version>-not-found.js``, if any); ``/node_modules/...``: files of
  ``node_modules`` (``npm ci`` of the committed lock): React Router, Vue Router and their
  frameworks' browser builds;
- ``/api/products``, ``/api/products/<id>`` (404 for an unknown one), ``/api/categories/<slug>``
  (404 for an unknown one; ``empty`` has no product), ``/api/search?q=``: the shop's data,
  50 ms each;
- every other path: the app's shell (200, as a single-page app's server answers), which loads
  ``/assets/<app>.<version>.js``: a new version is a new build, as bundlers name them.

``Corpus.version`` may be changed while it serves: the next shell loads that build; so may
``Corpus.gone``, the products its API no longer knows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

HERE = Path(__file__).parent
SITE = HERE / "site"
NODE_MODULES = HERE / "node_modules"

PRODUCTS = {
    "1": ("Kettle K2", "tea", "Boils a litre in ninety seconds and switches itself off when "
          "the water rolls. Its brushed steel body stays quiet and its handle stays cool."),
    "2": ("Teapot T7", "tea", "A cast iron pot that keeps six cups warm for an hour on the "
          "table. Its enamel lining never takes the taste of yesterday's leaves."),
    "3": ("Grinder G1", "coffee", "Ceramic burrs grind beans for one cup or ten, from fine for "
          "espresso to coarse for a press pot, without heating them."),
    "4": ("Mug M4", "coffee", "A double-walled glass mug that keeps coffee hot and hands cool, "
          "and shows the crema settle while it waits for you."),
}
CATEGORIES = {"tea": "Tea things", "coffee": "Coffee things", "empty": "Gift cards"}

# The shells: which builds each app's page loads, by version.
_SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
{libraries}
</head><body><div id="app"></div>
<script src="/assets/{app}.{version}.js"></script>
</body></html>"""
LIBRARIES = {
    "react": (
        "/node_modules/react/umd/react.production.min.js",
        "/node_modules/react-dom/umd/react-dom.production.min.js",
        "/node_modules/@remix-run/router/dist/router.umd.min.js",
        "/node_modules/react-router/dist/umd/react-router.production.min.js",
        "/node_modules/react-router-dom/dist/umd/react-router-dom.production.min.js",
    ),
    "vue": (
        "/node_modules/vue/dist/vue.global.prod.js",
        "/node_modules/vue-router/dist/vue-router.global.prod.js",
    ),
}
PACKAGES = ("react", "react-dom", "react-router", "react-router-dom", "@remix-run/router",
            "vue", "vue-router")


def _product(pid: str) -> dict[str, str]:
    name, category, text = PRODUCTS[pid]
    return {"id": pid, "name": name, "category": category, "text": text}


async def products(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return JSONResponse([_product(pid) for pid in PRODUCTS])


async def category(request: Request) -> Response:
    await asyncio.sleep(0.05)
    slug = request.path_params["slug"]
    if slug not in CATEGORIES:
        return JSONResponse({}, 404)
    items = [_product(pid) for pid in PRODUCTS if PRODUCTS[pid][1] == slug]
    return JSONResponse({"slug": slug, "name": CATEGORIES[slug], "products": items})


async def search(request: Request) -> Response:
    await asyncio.sleep(0.05)
    q = request.query_params.get("q", "").lower()
    found = [_product(p) for p in PRODUCTS if q and q in PRODUCTS[p][0].lower()]
    return JSONResponse({"q": q, "products": found})


async def module_file(request: Request) -> Response:
    path = (NODE_MODULES / request.path_params["path"]).resolve()
    if not path.is_relative_to(NODE_MODULES.resolve()) or not path.is_file():
        return Response("not found", status_code=404)
    return FileResponse(path, media_type="text/javascript")


async def asset(request: Request) -> Response:
    app, _, version = request.path_params["name"].removesuffix(".js").partition(".")
    code = SITE / f"{app}.js"
    if not (app.isalpha() and version.isdigit() and code.is_file()):
        return Response("not found", status_code=404)
    change = SITE / f"{app}.{version}-not-found.js"
    prelude = change.read_text() if change.is_file() else ""
    return Response(prelude + code.read_text(), media_type="text/javascript")


@dataclass
class Corpus:
    """One app of the corpus: its name (``react``, ``vue``) and the build its shell loads."""

    app: str
    version: int = 1
    gone: set[str] = field(default_factory=set)  # products taken off the shop meanwhile

    async def product(self, request: Request) -> Response:
        await asyncio.sleep(0.05)
        pid = request.path_params["id"]
        if pid not in PRODUCTS or pid in self.gone:
            return JSONResponse({}, 404)
        return JSONResponse(_product(pid))

    async def shell(self, request: Request) -> Response:
        libraries = "\n".join(f'<script src="{src}"></script>' for src in LIBRARIES[self.app])
        return HTMLResponse(_SHELL.format(
            title="Shop", libraries=libraries, app=self.app, version=self.version))

    def create_app(self) -> Starlette:
        return Starlette(routes=[
            Route("/node_modules/{path:path}", module_file),
            Route("/assets/{name}", asset),
            Route("/api/products", products),
            Route("/api/products/{id}", self.product),
            Route("/api/categories/{slug}", category),
            Route("/api/search", search),
            Route("/{rest:path}", self.shell),
        ])


# What each app shows where (its soft 404s, its real pages, thin ones among them): the truth
# the corpus is measured against. A soft 404 is a path the app draws its not-found view for.
SOFT_404 = ("/no-such-page", "/old/blog/a-post", "/products/999", "/categories/nope")
THIN = ("/categories/empty", "/search?q=zzz", "/about", "/contact")
REAL = ("/", "/products/1", "/products/2", "/products/3", "/products/4", "/categories/tea",
        "/categories/coffee", "/search?q=kettle", *THIN)

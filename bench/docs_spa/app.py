"""A documentation site made with docsify (from the npm registry, history routes): the
index page for every route, docsify's own files, and the Markdown pages it fetches."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

HERE = Path(__file__).parent
DOCS = HERE / "docs"
LIB = HERE / "node_modules" / "docsify" / "lib"
# The site's own page list: a route per Markdown page (README.md is "/").
PAGES = ["/"] + sorted(f"/{p.relative_to(DOCS).with_suffix('')}" for p in DOCS.rglob("*.md")
                       if p.name not in ("README.md", "_sidebar.md"))


def create_app() -> Starlette:
    async def index(request: object) -> Response:
        return FileResponse(HERE / "index.html")

    return Starlette(routes=[
        Mount("/lib", StaticFiles(directory=LIB)),
        Mount("/docs", StaticFiles(directory=DOCS)),
        Route("/{path:path}", index),
    ])

"""A documentation app built like the ones crawlers waste renders on: history routes, every
heading linked as ``?id=<heading>`` from its own page and from the table of contents of every
page, the current entry marked "active", a build time under each article, and a paginated
blog whose ``?page=`` does change the page.

The server answers every route with the same shell; ``app.js`` reads the route, fetches the
page's data, renders it, and scrolls to ``?id=`` without rendering anything else.
``Docs.renders`` counts the data requests per route (one per render of a page).
"""

from __future__ import annotations

import json
import threading
from collections import Counter

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

TOPICS = [
    "install", "configure", "deploy", "upgrade", "backup", "restore", "monitor", "scale",
    "secure", "debug", "migrate", "extend", "theme", "search", "cache", "proxy", "cli",
    "api", "webhooks", "faq", "glossary",
]
# The site's own page list: the home page, one page per topic, the blog's pages.
DOCS = ["/"] + [f"/guide/{t}" for t in TOPICS]
BLOG = ["/blog", "/blog?page=2", "/blog?page=3"]
PAGES = DOCS + BLOG

SHELL = """<!doctype html><html><head><title>Docs</title></head><body>
<aside class="sidebar"><ul id="toc"></ul></aside><main id="main"></main>
<script src="/app.js"></script></body></html>"""

APP = r"""
const toc = %s;
function headings(page) { return ["overview", "usage", "details"].map(h => page + "-" + h); }
function render(data) {
  const here = location.pathname;
  const id = new URLSearchParams(location.search).get("id");
  document.getElementById("toc").innerHTML = toc.map(p => {
    const subs = p.startsWith("/guide/") ? headings(p.slice(7)).map(h =>
      `<li><a class="${p === here && h === id ? "active" : ""}" href="${p}?id=${h}">${h}</a></li>`
    ).join("") : "";
    return `<li><a class="${p === here ? "active" : ""}" href="${p}">${p}</a><ul>${subs}</ul></li>`;
  }).join("") + '<li><a href="/blog">blog</a></li>';
  let html = `<article><h1 id="${data.slug}">${data.title}</h1>`;
  for (const section of data.sections) {
    html += `<h2 id="${section.id}">${section.id}</h2><p>${section.text}</p>`;
  }
  for (const link of data.links) html += `<p><a href="${link}">${link}</a></p>`;
  html += `<p class="stamp">Built ${new Date().toISOString()}</p></article>`;
  document.getElementById("main").innerHTML = html;
  if (id && document.getElementById(id)) document.getElementById(id).scrollIntoView();
  window.onCaptureReady && window.onCaptureReady();
}
fetch("/data" + location.pathname + location.search.replace(/[?&]id=[^&]*/, ""))
  .then(r => r.json()).then(render);
"""


def _words(seed: str, n: int) -> str:
    return " ".join(f"{seed}{i % 17} word{(i * 7) % 23}" for i in range(n))


def page_data(route: str, page: int) -> dict[str, object]:
    if route == "/blog":
        return {
            "slug": f"blog-{page}", "title": f"Blog, page {page}",
            "sections": [{"id": f"post-{page}-{i}", "text": _words(f"post{page}x{i}", 30)}
                         for i in range(3)],
            "links": [p for p in BLOG if p != ("/blog" if page == 1 else f"/blog?page={page}")],
        }
    slug = route.rsplit("/", 1)[-1] or "home"
    return {
        "slug": slug, "title": f"Guide: {slug}",
        "sections": [{"id": h, "text": _words(h, 30)}
                     for h in (f"{slug}-overview", f"{slug}-usage", f"{slug}-details")],
        "links": [],
    }


class Docs:
    def __init__(self) -> None:
        self.renders: Counter[str] = Counter()
        self._lock = threading.Lock()

        async def shell(request: Request) -> Response:
            return HTMLResponse(SHELL)

        async def app_js(request: Request) -> Response:
            return Response(APP % json.dumps(DOCS), media_type="application/javascript")

        async def data(request: Request) -> Response:
            route = "/" + request.path_params["route"]
            page = int(request.query_params.get("page", "1"))
            with self._lock:
                self.renders[route + (f"?page={page}" if page > 1 else "")] += 1
            known = route in DOCS or route == "/blog"
            if not known:
                return JSONResponse({"error": "no such page"}, status_code=404)
            return JSONResponse(page_data(route, page))

        self.app = Starlette(routes=[
            Route("/app.js", app_js),
            Route("/data/{route:path}", data),
            Route("/{path:path}", shell),
        ])

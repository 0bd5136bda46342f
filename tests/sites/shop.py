"""The crawl test site: a few dozen pages with every case the crawler must get right.

Server-rendered pages (each calls ``window.onCaptureReady()`` so a capture ends at once),
plus one hashbang page rendered by script. ``Shop.hits`` counts document requests per
path, in order, so tests can prove what was fetched and how often.

    / ──▶ /a ⇄ /a/1 ─▶ /a/2 ─▶ /a/3 ─▶ /a/1 (cycles), /deep/1 ─▶ … ─▶ /deep/4
      ──▶ /b ⇄ /b/1, /b/2 ─▶ /spa#!/two
      ──▶ /moved (301 ─▶ /target), /missing (404), /broken (500)
      ──▶ /dup-1 (same HTML as /dup-2, linked from /a/1), /canon-copy (canonical /canon-main)
      ──▶ /nofollow (meta robots), rel=nofollow, /private/ (robots.txt), /admin/ (ignored)
      ──▶ /old/page and /gone (rules: 301 to /new/page, 410), /a?utm_source=news (rules: /a)
    /sitemap_index.xml.gz ─▶ /sitemap-1.xml, /sitemap-2.xml.gz ─▶ /from-sitemap-1, -2, /a
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections import Counter
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

RULES = Path(__file__).with_name("shop.rules")
READY = "<script>window.onCaptureReady && window.onCaptureReady()</script>"

# path -> (links, extra <head>)
PAGES: dict[str, tuple[list[str], str]] = {
    "/": (
        [
            "/a",
            "/b",
            "/moved",
            "/missing",
            "/broken",
            "/dup-1",
            "/canon-copy",
            "/nofollow",
            "/private/secret",
            "/admin/panel",
            "/admin/keep",
            "/old/page",
            "/gone",
            "/a?utm_source=news",
            "http://127.0.0.2:9/external",
            "https://example.com/x",
            "/spa#!/one",
            "#top",
            "/#section",
            "mailto:shop@example.com",
        ],
        "",
    ),
    "/a": (["/a/1", "/a/2", "/a/3", "/"], ""),
    "/a/1": (["/a/2", "/a", "/dup-2"], ""),
    "/a/2": (["/a/3"], ""),
    "/a/3": (["/a/1", "/deep/1"], ""),
    "/deep/1": (["/deep/2"], ""),
    "/deep/2": (["/deep/3"], ""),
    "/deep/3": (["/deep/4"], ""),
    "/deep/4": ([], ""),
    "/b": (["/b/1", "/b/2"], ""),
    "/b/1": (["/b"], ""),
    "/b/2": (["/spa#!/two"], ""),
    "/target": (["/a"], ""),
    "/canon-copy": (["/from-copy"], '<link rel="canonical" href="/canon-main">'),
    "/canon-main": ([], '<link rel="canonical" href="/canon-main">'),
    "/nofollow": (["/nf-meta"], '<meta name="robots" content="noindex, nofollow">'),
    "/admin/keep": ([], ""),
    "/new/page": ([], ""),
    "/from-dup": ([], ""),
    "/from-sitemap-1": ([], ""),
    "/from-sitemap-2": ([], ""),
    "/api-asked": ([], ""),
    "/bot-asked": ([], ""),
    # Reachable only through links the crawler must not follow; present so a wrong
    # crawl would capture them rather than fail on them.
    "/from-404": ([], ""),
    "/from-copy": ([], ""),
    "/nf-meta": ([], ""),
    "/nf-link": ([], ""),
    "/private/secret": ([], ""),
    "/private/in-sitemap": ([], ""),
    "/admin/panel": ([], ""),
    "/old/page": ([], ""),
    "/gone": ([], ""),
}

DUPLICATE = (
    f"<html><head><title>Same</title></head><body><p>Twin page</p>"
    f'<a href="/from-dup">more</a>{READY}</body></html>'
)

SPA = """<html><head><title>SPA</title></head><body><main id="app"></main><script>
document.getElementById("app").textContent = "Hashbang page " + location.hash;
window.onCaptureReady && window.onCaptureReady();
</script></body></html>"""

ROBOTS = "User-agent: *\nDisallow: /private/\n"


def page(path: str) -> str:
    links, head = PAGES[path]
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    if path == "/":
        anchors += '<li><a rel="nofollow" href="/nf-link">nofollow link</a></li>'
    return (
        f"<html><head><title>Page {path}</title>{head}</head><body><h1>Page {path}</h1>"
        f"<ul>{anchors}</ul>{READY}</body></html>"
    )


def urlset(base: str, paths: list[str]) -> bytes:
    urls = "".join(f"<url><loc>{base}{p}</loc></url>" for p in paths)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
    ).encode()


class Shop:
    """The site as an ASGI app; ``delay`` slows every page down (for kill tests)."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.hits: list[tuple[str, float]] = []
        self.other: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/robots.txt", self.robots),
                Route("/sitemap_index.xml.gz", self.sitemap_index),
                Route("/sitemap-1.xml", self.sitemap_1),
                Route("/sitemap-2.xml.gz", self.sitemap_2),
                Route("/{path:path}", self.document),
            ]
        )

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(path for path, _ in self.hits)

    def _other(self, name: str) -> None:
        with self._lock:
            self.other[name] += 1

    async def robots(self, request: Request) -> Response:
        self._other("robots.txt")
        return PlainTextResponse(ROBOTS)

    async def sitemap_index(self, request: Request) -> Response:
        self._other("sitemap")
        base = f"http://{request.url.netloc}"
        body = (
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{base}/sitemap-1.xml</loc></sitemap>"
            "<sitemap><loc>/sitemap-2.xml.gz</loc></sitemap>"
            "</sitemapindex>"
        )
        return Response(gzip.compress(body.encode()), media_type="application/gzip")

    async def sitemap_1(self, request: Request) -> Response:
        self._other("sitemap")
        base = f"http://{request.url.netloc}"
        return Response(urlset(base, ["/from-sitemap-1", "/a"]), media_type="application/xml")

    async def sitemap_2(self, request: Request) -> Response:
        self._other("sitemap")
        base = f"http://{request.url.netloc}"
        body = urlset(base, ["/from-sitemap-2", "/private/in-sitemap"])
        body = body.replace(
            b"</urlset>", b"<url><loc>http://127.0.0.2:9/off-site</loc></url></urlset>"
        )
        return Response(gzip.compress(body), media_type="application/gzip")

    async def document(self, request: Request) -> Response:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if path == "/favicon.ico":
            return Response(status_code=404)
        with self._lock:
            self.hits.append((path, time.monotonic()))
        if self.delay:
            await asyncio.sleep(self.delay)
        if path == "/moved":
            return RedirectResponse("/target", status_code=301)
        if path == "/missing":
            return HTMLResponse(
                f'<html><body><h1>Not found</h1><a href="/from-404">x</a>{READY}</body></html>',
                status_code=404,
            )
        if path == "/broken":
            return HTMLResponse("<html><body>Server error</body></html>", status_code=500)
        if path in ("/dup-1", "/dup-2"):
            return HTMLResponse(DUPLICATE)
        if path == "/spa":
            return HTMLResponse(SPA)
        if path in PAGES:
            return HTMLResponse(page(path))
        return HTMLResponse(f"<html><body>No page {path}{READY}</body></html>", status_code=404)

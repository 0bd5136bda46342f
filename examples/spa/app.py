"""A small single-page app to put behind snapshotd: ``python -m examples.spa [--port 3000]``.

History-API routes (/, /items, /items/<n>, /about), hashbang routes (/#!/faq, /#!/contact),
data fetched after load, links, a canonical tag, and unknown routes answering 404 through
Prerender's status meta tag. Every route is served the same HTML shell, as SPAs are.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

STATIC = Path(__file__).parent / "static"
ITEM_COUNT = 24


def item(n: int, count: int = ITEM_COUNT) -> dict[str, object]:
    return {
        "id": n,
        "name": f"Item {n}",
        "price": f"{(n * 7) % 50 + 5}.00",
        "text": f"Item {n} is a sturdy thing, made to last, number {n} of {count}.",
    }


ITEMS = [item(n) for n in range(1, ITEM_COUNT + 1)]


async def shell(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html")


async def app_js(request: Request) -> Response:
    return FileResponse(STATIC / "app.js", media_type="text/javascript")


async def style(request: Request) -> Response:
    return FileResponse(STATIC / "style.css", media_type="text/css")


async def api_items(request: Request) -> Response:
    await asyncio.sleep(0.05)  # a little server latency, as real APIs have
    return JSONResponse([{"id": i["id"], "name": i["name"]} for i in ITEMS])


def api_item(count: int):  # type: ignore[no-untyped-def]
    async def answer(request: Request) -> Response:
        await asyncio.sleep(0.05)
        n = request.path_params["n"]
        if not 1 <= n <= count:
            return JSONResponse({"error": "no such item"}, 404)
        return JSONResponse(item(n, count))

    return answer


async def robots(request: Request) -> Response:
    return Response("User-agent: *\nDisallow: /private/\n", media_type="text/plain")


async def sitemap(request: Request) -> Response:
    base = f"{request.url.scheme}://{request.url.netloc}"
    urls = ["/", "/items", "/about"] + [f"/items/{i['id']}" for i in ITEMS]
    body = "".join(f"<url><loc>{base}{u}</loc></url>" for u in urls)
    return Response(
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>',
        media_type="application/xml",
    )


def create_app(item_count: int = ITEM_COUNT) -> Starlette:
    """The app; ``item_count`` item pages answer (the list and the sitemap show the first
    ``ITEM_COUNT``)."""
    return Starlette(
        routes=[
            Route("/app.js", app_js),
            Route("/style.css", style),
            Route("/api/items", api_items),
            Route("/api/items/{n:int}", api_item(item_count)),
            Route("/robots.txt", robots),
            Route("/sitemap.xml", sitemap),
            Route("/{path:path}", shell),
        ]
    )


app = create_app()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="the snapshotd example SPA")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

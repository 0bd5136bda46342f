"""Bot floods against a real proxy (uvicorn, SQLite, a fixed-page renderer with render slots).

Prints, for each flood, the renders and stored rows it cost and how the requests were
answered, with the site's default settings:

    PYTHONPATH=. python bench/bench_flood.py
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings  # noqa: E402
from snapshotd.render.renderer import CaptureResult  # noqa: E402
from snapshotd.server.app import create_app  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PAGE = "<html><body><h1>rendered</h1></body></html>"


class FixedRenderer:
    def __init__(self, slots: int) -> None:
        self.slots, self.renders = slots, 0
        self._sem: asyncio.Semaphore | None = None

    async def start(self) -> None:
        self._sem = asyncio.Semaphore(self.slots)

    async def close(self) -> None:
        pass

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        assert self._sem is not None
        async with self._sem:
            self.renders += 1
            return CaptureResult(url=url, final_url=url, html=PAGE)


def flood(name: str, targets: list[str]) -> None:
    async def origin_page(request):  # type: ignore[no-untyped-def]
        return HTMLResponse("<html><body>origin</body></html>")

    origin = Starlette(routes=[Route("/{rest:path}", origin_page)])
    with tempfile.TemporaryDirectory() as tmp, serve_asgi(origin) as origin_url:
        db = str(Path(tmp) / "flood.db")
        settings = Settings(
            db=db,
            browser=BrowserSettings(concurrency=2),
            sites=(SiteSettings(name="s", origin=origin_url, seeds=(), obey_robots=False),),
        )
        renderer = FixedRenderer(2)
        app = create_app(settings, renderer=renderer, crawler=False)
        answers: collections.Counter[str] = collections.Counter()
        with serve_asgi(app) as base, httpx.Client(base_url=base, trust_env=False) as client:
            for target in targets:
                r = client.get(target, headers={"User-Agent": BOT}, timeout=60)
                answers[r.headers.get("x-snapshotd-cache", "?")] += 1
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT COUNT(*) FROM paths").fetchone()[0]
        conn.close()
        print(
            f"{name}: {len(targets)} requests, {renderer.renders} renders, {rows} rows, "
            + ", ".join(f"{k} {v}" for k, v in sorted(answers.items()))
        )


def main() -> None:
    params = ("utm_source", "utm_campaign", "fbclid", "gclid")
    flood("utm variants of /about", [f"/about?{params[i % 4]}=v{i}" for i in range(200)])
    flood("random queries", [f"/search?q={uuid.uuid4().hex}" for _ in range(1000)])


if __name__ == "__main__":
    main()
